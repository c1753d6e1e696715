"""Where production runs (issue 27): another database, other writers' TTLs, other writers' fields."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.coverage.labels import CONDITION_LABELS, REQUIRED, _queues_with, condition_labels
from difftest.history import format as hist
from difftest.history.format import Advance, CallStep, History, RawWrite
from difftest.replay.artifacts import by_hand
from difftest.replay.replayer import Replayer
from difftest.replay.sides import LuaSide
from difftest.servers.group import ServerGroup
from difftest.spec.snapshot import (
    Entry,
    diff,
    parse_canonical,
    qualified,
    restore_commands,
    resync_commands,
    unqualified,
)
from executors.native.adapter import DEFAULT_MODULE
from strategies.corpus import LAYOUT, PRELUDE, plain

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"replayer": ("servers",)}

HISTORIES = Path(__file__).parent / "histories"


# -- pure ------------------------------------------------------------------------------------------


def test_a_key_of_another_database_is_named_with_it_and_read_back() -> None:
    assert qualified(3, b"emq:{q}:pending") == b"@db3:emq:{q}:pending"
    assert unqualified(b"@db3:emq:{q}:pending") == (3, b"emq:{q}:pending")
    assert unqualified(b"emq:{q}:pending") == (None, b"emq:{q}:pending")
    assert unqualified(b"@dbx:k") == (None, b"@dbx:k")  # not a database's number: a key of its own


def test_a_resync_writes_each_key_into_its_own_database_and_selects_the_historys_again() -> None:
    snapshot = {
        b"a": Entry("string", b"1", 500),
        qualified(0, b"b"): Entry("hash", {b"f": b"v"}, -1),
        qualified(7, b"c"): Entry("set", frozenset({b"m"}), -1),
    }
    assert restore_commands(snapshot, home=2) == [
        [b"SELECT", b"0"], [b"HSET", b"b", b"f", b"v"],
        [b"SELECT", b"7"], [b"SADD", b"c", b"m"],
        [b"SELECT", b"2"], [b"SET", b"a", b"1"], [b"PEXPIRE", b"a", b"500"],
    ]  # fmt: skip
    assert restore_commands({b"a": Entry("string", b"1", -1)}) == [[b"SET", b"a", b"1"]]
    # a re-sync writes only what differs: a key held alike (at its expiry's very millisecond too) stays
    held = {
        b"same": Entry("string", b"1", 0),
        b"gone": Entry("string", b"x", -1),
        b"moved": Entry("set", frozenset({b"m"}), 9),
    }
    wanted = {
        b"same": Entry("string", b"1", 0),
        b"moved": Entry("set", frozenset({b"n"}), 9),
        qualified(1, b"new"): Entry("string", b"2", -1),
    }
    assert resync_commands(held, wanted, home=3) == (
        [[b"SELECT", b"1"], [b"SET", b"new", b"2"], [b"SELECT", b"3"], [b"DEL", b"gone"],
         [b"DEL", b"moved"], [b"SADD", b"moved", b"n"], [b"PEXPIRE", b"moved", b"9"]],
        [],
    )  # fmt: skip
    # a key written at its expiry's very millisecond: given it with the clock one millisecond back
    wanted[b"same"] = Entry("string", b"2", 0)
    commands, at_expiry = resync_commands(held, wanted, home=3)
    assert [b"SET", b"same", b"2"] in commands and not any(c[0] == b"PEXPIRE" and c[1] == b"same" for c in commands)
    assert at_expiry == [[b"SELECT", b"3"], [b"PEXPIRE", b"same", b"1"], [b"SELECT", b"3"]]


def test_one_label_per_condition_and_verb_and_each_required() -> None:
    ours = [label for label in CONDITION_LABELS if label.split(":")[1] in ("db", "ttl", "fields")]
    assert len(ours) == 30 and set(ours) <= set(REQUIRED)
    assert {"condition:db:enqueue", "condition:ttl:sweep", "condition:fields:resume"} <= set(CONDITION_LABELS)


# -- on real servers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replayer() -> Iterator[Replayer]:
    with Replayer(DEFAULT_MODULE) as replaying:
        yield replaying


def test_every_step_runs_in_the_historys_database_on_both_servers(replayer: Replayer) -> None:
    history = History((*PRELUDE, CallStep(plain("SWEEP")), RawWrite((b"SET", b"x", b"1"))), db=15)
    result = replayer.replay(history)
    assert result.ok and result.records
    labels = condition_labels(result)
    assert labels["condition:db:sweep"] == 1 and labels["condition:db:enqueue"] == 4
    for server in (replayer.lua_server, replayer.native_server):
        keyspace = server.client.execute_command("INFO", "keyspace")
        assert set(keyspace) == {"db15"}, (server.name, keyspace)
    # the next history, on database 0, finds its connections moved back
    assert replayer.replay(History(PRELUDE)).ok
    for server in (replayer.lua_server, replayer.native_server):
        assert set(server.client.execute_command("INFO", "keyspace")) == {"db0"}


def test_a_resync_in_another_database_restores_it_there(replayer: Replayer) -> None:
    """A contract row whose outcome re-synchronises (D3) in a history on database 2: the Lua server
    takes the native's keyspace into database 2, and the history goes on equal."""
    d3 = hist.load(HISTORIES / "d3_wrong_type_after_write.jsonl")
    more = (*d3.steps, *PRELUDE)
    result = replayer.replay(dataclasses.replace(d3, steps=more, db=2))
    assert result.ok and "D3" in result.rules_hit
    assert set(replayer.lua_server.client.execute_command("INFO", "keyspace")) == {"db2"}


def test_a_key_in_another_database_is_part_of_the_snapshot(replayer: Replayer) -> None:
    """The walks cover every database: a key only one server holds, in a database no step selected,
    makes the two snapshots differ by that key, named with its database."""
    history = History((*PRELUDE, RawWrite((b"MOVE", LAYOUT.pending, b"0")), CallStep(plain("CLAIM"))), db=2)
    assert replayer.replay(history).ok  # the same MOVE on both: equal, database 0 included
    lua, native = replayer.lua, replayer.native
    assert lua is not None and native is not None
    native.wires[None].call(b"SET", b"stray", b"1")
    native.wires[None].call(b"MOVE", b"stray", b"5")  # what a native writing elsewhere would leave
    walks = [side.wires[None].call(*side.walk_command) for side in (lua, native)]
    assert all(isinstance(walk, list) and len(walk) == 3 for walk in walks)  # others' keys: a third string
    by_lua, by_native = (parse_canonical(walk)[0] for walk in walks)  # type: ignore[arg-type]
    assert set(diff(by_lua, by_native)) == {qualified(5, b"stray")}
    assert by_lua[qualified(0, LAYOUT.pending)] == by_native[qualified(0, LAYOUT.pending)]


@pytest.mark.servers
def test_active_expiry_is_off_so_a_key_goes_only_when_read_past_its_time() -> None:
    with ServerGroup() as group:
        side = LuaSide(group.add("lua"), {})
        admin = side.wires[None]
        admin.call(b"SET", b"k", b"1", b"PX", b"10")
        group.advance(100)
        time.sleep(0.3)  # thirty of the server's cron runs at hz 100, each of which would expire it
        assert admin.call(b"DBSIZE") == 1  # still held: nothing expired it
        assert admin.call(b"GET", b"k") is None and admin.call(b"DBSIZE") == 0  # a read meets it past its time
        side.close()


def test_ttls_and_fields_other_writers_leave_are_kept_alike(replayer: Replayer) -> None:
    """A TTL on the row a CLAIM writes, one the clock has passed (metrics:failed), one taken away;
    an operator's fields in meta and in the row: the pair agrees, and the row keeps both."""
    row = LAYOUT.row(b"j4")
    steps = (
        *PRELUDE,
        RawWrite((b"PEXPIRE", row, b"5000")), RawWrite((b"PEXPIRE", LAYOUT.metrics("failed"), b"1")),
        RawWrite((b"HSET", row, b"owner", b"ops")), RawWrite((b"HSET", LAYOUT.meta, b"note", b"x")),
        Advance(2), CallStep(plain("CLAIM")), CallStep(plain("SWEEP")), CallStep(plain("PAUSE")),
        CallStep(plain("RESUME")), CallStep(plain("FAIL", b"j4", 1, b"e", 1, 0)),
    )  # fmt: skip
    result = replayer.replay(History(steps))
    assert result.ok
    after = result.observations[-1].native_after
    assert after[row].pttl == 5000 - 2 and after[row].value[b"owner"] == b"ops"  # type: ignore[index]
    assert after[LAYOUT.meta].value == {b"note": b"x"}
    assert after[LAYOUT.metrics("failed")] == Entry(
        "hash", {b"count": b"2"}, -1
    )  # expired, then counted anew (SWEEP, FAIL)
    labels = condition_labels(result)
    assert labels["condition:ttl:claim"] and labels["condition:fields:fail"] and labels["condition:fields:resume"]


def test_a_resync_keeps_a_key_written_at_its_expirys_very_millisecond(replayer: Replayer) -> None:
    """PROMOTE meets a wrong-typed pending after the scripts' ZREM (D3): the Lua server takes the
    native's `delayed`, whose TTL ends at this very millisecond (PTTL 0, still there). No command can
    give a key an expiry that is not in the future: the re-sync gives it with the clock a millisecond
    back, and the history goes on equal (found by the generated campaign, seed 1)."""
    q = LAYOUT
    steps = (
        RawWrite((b"SET", q.pending, b"junk")), CallStep(plain("ENQUEUE", b"", b"p", 5)), Advance(5),
        RawWrite((b"PEXPIRE", q.delayed, b"1")), Advance(1), CallStep(plain("PROMOTE", 1)),
        CallStep(plain("ENQUEUE", b"", b"p", 0)), Advance(1), CallStep(plain("PROMOTE", 1)),
    )  # fmt: skip
    result = replayer.replay(History(steps))
    assert result.ok and result.rules_hit["D3"] == 1
    assert result.observations[6].lua_after[q.delayed].pttl == 0  # re-synced with its TTL
    assert q.delayed not in result.observations[-1].native_after  # and gone, on both, once the clock moved


def test_a_history_on_another_database_says_so_in_its_by_hand_lines() -> None:
    assert by_hand(History((), db=15))[0] == "# every connection on database 15: SELECT 15 (valkey-cli -n 15)"
    assert not any("SELECT" in line for line in by_hand(History(())))


def test_the_queues_a_condition_label_names_are_read_off_the_keyspace_before_the_call() -> None:
    """A queue has a TTL when one of its keys has; foreign fields when its meta or a row holds a field
    that is none of the queue's own (a metrics hash's or another database's keys do not count)."""
    snapshot = {
        b"emq:{a}:pending": Entry("zset", {b"j": b"1"}, 50),
        b"emq:{b}:job:j": Entry("hash", {b"payload": b"p", b"state": b"pending", b"owner": b"ops"}, -1),
        b"emq:{c}:meta": Entry("hash", {b"paused": b"1"}, -1),
        b"emq:{d}:metrics:failed": Entry("hash", {b"count": b"1", b"note": b"x"}, -1),
        qualified(2, b"emq:{e}:meta"): Entry("hash", {b"note": b"x"}, 7),
        b"emq:{f}:meta": Entry("hash", {b"paused": b"1", b"": b""}, -1),
    }
    ttl, fields = _queues_with(snapshot)
    assert ttl == {b"emq:{a}:"} and fields == {b"emq:{b}:", b"emq:{f}:"}


PAUSED_CLAIM_ON_A_REPLICA = """{"format": "difftest-history", "version": 1, "start_ms": 1000%s}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}
{"op": "call", "verb": "PAUSE", "queue": "q", "args": []}
{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100], "target": "replica"}
"""


@pytest.mark.servers
def test_a_call_to_a_replica_runs_in_the_historys_database() -> None:
    """The replica's wire moves with the history's database: in database 2 the paused read on the
    replica sees database 2's meta (both answer empty), not database 0's (the scripts would claim)."""
    with Replayer(DEFAULT_MODULE) as replayer:
        for db in (0, 2):
            history = hist.loads(PAUSED_CLAIM_ON_A_REPLICA % (f', "db": {db}' if db else ""))
            result = replayer.replay(history)
            assert result.ok, (db, result.divergence and result.divergence.reason)
            assert (result.records[-1].lua_reply, result.records[-1].native_reply) == ([], [])
