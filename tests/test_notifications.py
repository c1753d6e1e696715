"""Keyspace notifications on real servers: each verb's events on both sides, exactly, and the replay's capture."""

from __future__ import annotations

import pytest

from difftest.history.format import Advance, History, Notify, Restart, Step, call_step
from difftest.history.resolve import resolve
from difftest.judge.events import Event
from difftest.replay.replayer import Replayer
from difftest.replay.sides import LuaSide, NativeSide, Side
from difftest.servers.group import ServerGroup
from executors.native.adapter import DEFAULT_MODULE
from strategies.corpus import PRELUDE

pytestmark = pytest.mark.servers

Q = "emq:{q}:"


def row(job: str) -> bytes:
    return f"{Q}job:{job}".encode()


def key(name: str) -> bytes:
    return f"{Q}{name}".encode()


def kea(*fired: tuple[str, bytes]) -> tuple[Event, ...]:
    """What `KEA` delivers for each event: its keyspace message, then its keyevent message."""
    out: list[Event] = []
    for event, at in fired:
        out += [Event("keyspace", 0, event.encode(), at), Event("keyevent", 0, event.encode(), at)]
    return tuple(out)


# After the corpus's prelude (j1 active and expired, j2 delayed and due, j3 dead, j4 pending), each
# verb's call and what the scripts fire for it; the native must fire the same (EXTEND: and N1's hset)
CASES: dict[str, tuple[tuple[Step, ...], tuple[Event, ...]]] = {
    "ENQUEUE": ((call_step("ENQUEUE", "q", "j5", "p", 0),), kea(("hset", row("j5")), ("zadd", key("pending")))),
    "CLAIM": (
        (call_step("CLAIM", "q", 10),),
        kea(
            ("zpopmin", key("pending")),
            ("del", key("pending")),
            ("hincrby", row("j4")),
            ("hset", row("j4")),
            ("zadd", key("active")),
        ),
    ),
    "EXTEND": ((call_step("EXTEND", "q", "j1", 1, 10),), kea(("zadd", key("active")))),
    "COMPLETE": (
        (call_step("COMPLETE", "q", "j1", 1),),
        kea(
            ("zrem", key("active")),
            ("del", key("active")),
            ("hset", row("j1")),
            ("zadd", key("done")),
            ("hincrby", key("metrics:completed")),
        ),
    ),
    "FAIL": (
        (call_step("FAIL", "q", "j1", 1, "e", 1, 0),),
        kea(
            ("zrem", key("active")),
            ("del", key("active")),
            ("hset", row("j1")),
            ("zadd", key("dead")),
            ("hincrby", key("metrics:failed")),
        ),
    ),
    "PROMOTE": (
        (call_step("PROMOTE", "q", 3),),
        kea(("zrem", key("delayed")), ("del", key("delayed")), ("zadd", key("pending")), ("hset", row("j2"))),
    ),
    "SWEEP": (
        (call_step("SWEEP", "q", 1, 3),),
        kea(
            ("zrem", key("active")),
            ("del", key("active")),
            ("hincrby", row("j1")),
            ("hset", row("j1")),
            ("zadd", key("dead")),
            ("hincrby", key("metrics:failed")),
        ),
    ),
    "SWEEP-recover": (
        (call_step("SWEEP", "q", 2, 3),),
        kea(
            ("zrem", key("active")),
            ("del", key("active")),
            ("hincrby", row("j1")),
            ("hset", row("j1")),
            ("zadd", key("pending")),
        ),
    ),
    "REVIVE": (
        (call_step("REVIVE", "q", "j3"),),
        kea(("zrem", key("dead")), ("del", key("dead")), ("zadd", key("pending")), ("hset", row("j3"))),
    ),
    "PAUSE": ((call_step("PAUSE", "q"),), kea(("hset", key("meta")))),
    "RESUME": ((call_step("RESUME", "q"),), kea(("hdel", key("meta")), ("del", key("meta")))),
}


def fired(side: Side, steps: tuple[Step, ...]) -> list[tuple[Event, ...]]:
    """Each step's events on one side, as the replay reads them (markers between steps)."""
    outcomes = side.run_steps(resolve(steps), walk=False)
    side.finish(outcomes)
    return side.events(outcomes)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_verb_fires_the_scripts_events_on_both_sides(group: ServerGroup, case: str) -> None:
    group.clock.set(1000)
    lua, native = LuaSide(group.add("lua"), {}), NativeSide(group.add("native", module=DEFAULT_MODULE), {})
    try:
        steps, want = CASES[case]
        prelude = (*PRELUDE, call_step("PAUSE", "q")) if case == "RESUME" else PRELUDE
        for side in (lua, native):
            side.set_notify("KEA")
            for step in prelude:
                if isinstance(step, Advance):
                    group.advance(step.ms)
                else:
                    fired(side, (step,))
        assert fired(lua, steps) == [want]
        extra = kea(("hset", row("j1"))) if case == "EXTEND" else ()  # N1: the lease_epoch re-stamp
        assert fired(native, steps) == [want + extra]
    finally:
        lua.close()
        native.close()


def test_a_replay_captures_every_step_and_keeps_the_flags_over_a_restart() -> None:
    """Notifications on, a restart of the native server (the flags set again there), then off: the
    histories agree, events were compared at each step, and the next history starts with them off."""
    steps: tuple[Step, ...] = (
        Notify("KEA"),
        call_step("ENQUEUE", "q", "j1", "p", 0),
        call_step("ENQUEUE", "q", "j2", "p", 0),
        call_step("CLAIM", "q", 100),
        call_step("CLAIM", "q", 100),
        Restart(),
        call_step("EXTEND", "q", "j1", 1, 100),  # after the restart: N1's hset, heard on the new server
        Advance(300),
        call_step("SWEEP", "q", 3, 10),  # j2 exempt, j1 counted: D7 (re-synchronising: events not judged)
        call_step("CLAIM", "q", 100),
        Advance(300),
        call_step("SWEEP", "q", 3, 10),  # counted now: hincrby then hset on both
        Notify(""),
        call_step("PAUSE", "q"),
    )
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(History(steps))
        assert result.divergence is None, result.divergence
        assert [r.verdict.rule for r in result.records if r.verdict.rule] == ["D7"]
        assert replayer.native is not None and replayer.lua is not None
        assert replayer.native.notify_flags == "" and replayer.native.subscriber is None
        config = replayer.native.wires[None].call(b"CONFIG", b"GET", b"notify-keyspace-events")
        assert config == [b"notify-keyspace-events", b""]
        # the flags were set again on the restarted server: a native that lost them would fire
        # nothing there, and the EXTEND after the restart would diverge
        assert replayer.replay(History(steps[:7])).divergence is None


def test_every_verb_agrees_with_new_key_events_and_key_misses_on() -> None:
    """The corpus's notify histories again under `KEAnm`: new-key events compared, the module's extra
    key misses (its peeks before its first write) set aside; without that, ENQUEUE alone would differ."""
    from dataclasses import replace

    from strategies.corpus import class_corpus

    histories = [h for h in class_corpus() if "condition:notify:" in h.note]
    assert len(histories) == 10
    with Replayer(DEFAULT_MODULE) as replayer:
        for history in histories:
            steps = tuple(Notify("KEAnm") if isinstance(s, Notify) and s.flags else s for s in history.steps)
            result = replayer.replay(replace(history, steps=steps))
            assert result.divergence is None, (history.note, result.divergence)


def test_a_queue_in_another_database_hears_n1_there() -> None:
    """Database 2: the EXTEND whose deadline does not move fires only N1's hset, on database 2's channels."""
    steps: tuple[Step, ...] = (
        Notify("KEA"),
        call_step("ENQUEUE", "q", "j1", "p", 0),
        call_step("CLAIM", "q", 100),
        call_step("EXTEND", "q", "j1", 1, 100),
        Advance(300),
        call_step("SWEEP", "q", 1, 10),
    )
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(History(steps, db=2))
        assert result.divergence is None, result.divergence
