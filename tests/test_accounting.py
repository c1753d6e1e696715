"""The queue's accounting (difftest/judge/accounting.py) on hand-made steps and snapshots: each finding
is found where it happens and nowhere else, and an excluded job is never judged (pure, no server)."""

from __future__ import annotations

import json

import pytest

from difftest.history.format import loads
from difftest.history.resolve import Resolved, resolve
from difftest.judge import accounting, invariants
from difftest.judge.accounting import EMPTY, FINDINGS, Accounts, follow
from difftest.judge.invariants import Ledger
from difftest.spec.replies import Reply
from difftest.spec.snapshot import Entry, Keyspace, Snapshot

Q = "q"


def _steps(*steps: dict[str, object]) -> tuple[Resolved, ...]:
    lines = [json.dumps({"format": "difftest-history", "version": 1, "start_ms": 1000})]
    lines += [json.dumps(step) for step in steps]
    return resolve(loads("\n".join(lines)).steps)


def _call(verb: str, *args: object) -> dict[str, object]:
    return {"op": "call", "verb": verb, "queue": Q, "args": list(args)}


def _keys(sets: dict[str, dict[str, int]], rows: dict[str, dict[str, object]] | None = None,
          meta: dict[str, str] | None = None) -> Snapshot:  # fmt: skip
    """A keyspace of queue q: each set's members and scores, each row's fields."""
    snapshot: Snapshot = {}
    for name, members in sets.items():
        if members:
            value = {m.encode(): str(s).encode() for m, s in members.items()}
            snapshot[f"emq:{{q}}:{name}".encode()] = Entry("zset", value, -1)
    for job, fields in (rows or {}).items():
        value = {k.encode(): str(v).encode() for k, v in fields.items()}
        snapshot[f"emq:{{q}}:job:{job}".encode()] = Entry("hash", value, -1)
    if meta:
        snapshot[b"emq:{q}:meta"] = Entry("hash", {k.encode(): v.encode() for k, v in meta.items()}, -1)
    return snapshot


def _run(steps: tuple[Resolved, ...], outcomes: list[tuple[Reply, Snapshot]], ledger: Ledger | None = None,
         **options: object) -> tuple[Accounts, list[str]]:  # fmt: skip
    """Every step followed with its reply and keyspace after; the findings of all of them."""
    ledger = ledger or Ledger()
    held = options.pop("held", ledger.followed)
    accounts, found, before = EMPTY, [], {}  # type: ignore[var-annotated]
    for resolved, (reply, after) in zip(steps, outcomes, strict=True):
        accounts, more = follow(accounts, held, resolved, before, reply, after, 1000, **options)  # type: ignore[arg-type]
        found += more
        before = after
    return accounts, found


ENQUEUED = _keys({"pending": {"j": 1000}}, {"j": {"state": "pending"}})
CLAIMED = _keys({"active": {"j": 1100}}, {"j": {"state": "active", "attempts": 1}})
CLAIM_REPLY = [b"j", b"p", 1]


def _names(found: list[str]) -> set[str]:
    return {f.split(":")[1] for f in found}


def test_an_honest_life_is_no_finding() -> None:
    steps = _steps(_call("ENQUEUE", "j", "p", 0), {"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]},
                   _call("EXTEND", "j", 1, 100), _call("COMPLETE", "j", 1))  # fmt: skip
    done = _keys({"done": {"j": 1000}}, {"j": {"state": "done", "attempts": 1}})
    accounts, found = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, CLAIMED), (1, CLAIMED), (1, done)])
    assert found == []
    life = accounts.lives[(b"q", b"j")]
    assert life.stage == "done" and life.token == 1 and len(life.events) == 4


def test_a_job_in_no_set_is_lost_with_its_life() -> None:
    steps = _steps(_call("ENQUEUE", "j", "p", 5), _call("PROMOTE", 10))
    delayed = _keys({"delayed": {"j": 1005}}, {"j": {"state": "delayed"}})
    _, found = _run(steps, [(1, delayed), (1, _keys({}, {"j": {"state": "pending"}}))])
    assert _names(found) == {"lost"}
    assert "#0 ENQUEUE -> delayed" in found[0] and "#1 PROMOTE" in found[0]


def test_a_job_in_two_sets_is_duplicated() -> None:
    steps = _steps(_call("ENQUEUE", "j", "p", 0), {"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]})
    both = _keys({"pending": {"j": 1000}, "active": {"j": 1100}}, {"j": {"state": "active", "attempts": 1}})
    _, found = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, both)])
    assert _names(found) == {"duplicated"}


def test_a_claim_of_a_held_lease_is_duplicated_and_its_token_checked() -> None:
    claim = {"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]}
    steps = _steps(_call("ENQUEUE", "j", "p", 0), claim, claim)
    _, found = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, CLAIMED), (CLAIM_REPLY, CLAIMED)])
    assert _names(found) == {"duplicated", "token"}


def test_a_token_not_above_the_last_is_found() -> None:
    claim = {"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]}
    steps = _steps(_call("ENQUEUE", "j", "p", 0), claim, _call("FAIL", "j", 0, "e", 5, 0), _call("PROMOTE", 5), claim)
    delayed = _keys({"delayed": {"j": 1000}}, {"j": {"state": "delayed", "attempts": 0}})
    pending = _keys({"pending": {"j": 1000}}, {"j": {"state": "pending", "attempts": 0}})
    again = _keys({"active": {"j": 1100}}, {"j": {"state": "active", "attempts": 0}})
    outcomes = [(1, ENQUEUED), ([b"j", b"p", 0], again), (b"retry", delayed), (1, pending), ([b"j", b"p", 0], again)]
    _, found = _run(steps, outcomes)
    assert _names(found) == {"token"}
    assert "not above its earlier 0" in found[0]


def test_a_stale_token_that_takes_effect_is_found() -> None:
    claim = {"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]}
    steps = _steps(_call("ENQUEUE", "j", "p", 0), claim, _call("COMPLETE", "j", 7))
    done = _keys({"done": {"j": 1000}}, {"j": {"state": "done", "attempts": 1}})
    _, found = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, CLAIMED), (1, done)])
    assert _names(found) == {"stale"}
    # refused (0): nothing took effect, nothing found
    _, found = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, CLAIMED), (0, CLAIMED)])
    assert found == []


def test_a_claim_while_paused_is_found_unless_decided_on_an_earlier_read() -> None:
    paused = _keys({"pending": {"j": 1000}}, {"j": {"state": "pending"}}, {"paused": "1"})
    claimed = {**CLAIMED, b"emq:{q}:meta": paused[b"emq:{q}:meta"]}
    steps = _steps({"op": "call", "verb": "PAUSE", "queue": Q, "args": []}, _call("ENQUEUE", "j", "p", 0),
                   {"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]})  # fmt: skip
    outcomes = [(1, {b"emq:{q}:meta": paused[b"emq:{q}:meta"]}), (1, paused), (CLAIM_REPLY, claimed)]
    _, found = _run(steps, outcomes)
    assert _names(found) == {"pause"}
    _, found = _run(steps, outcomes, decided_late=True)  # the Lua host's split claim (D1)
    assert found == []


def test_a_sweep_must_take_an_expired_lease_and_count_its_stall() -> None:
    claim = {"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]}
    steps = _steps(_call("ENQUEUE", "j", "p", 0), claim, _call("SWEEP", 5, 10))
    expired = _keys({"active": {"j": 900}}, {"j": {"state": "active", "attempts": 1}})
    counted = _keys({"pending": {"j": 0}}, {"j": {"state": "pending", "attempts": 1, "stalled": 1}})
    uncounted = _keys({"pending": {"j": 0}}, {"j": {"state": "pending", "attempts": 1}})
    assert _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, expired), ([1, 0, 0, 0], counted)])[1] == []
    _, found = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, expired), ([1, 0, 0, 0], uncounted)])
    assert _names(found) == {"stalled"}
    # the native side: a lease of another run is exempt (D7), stalled unchanged
    row = b"emq:{q}:job:j"
    exempt = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, expired), ([0, 0, 0, 1], uncounted)],
                  exempt={row: b"old"}, run_id=b"new")  # fmt: skip
    assert exempt[1] == []
    # a lease whose deadline is still ahead is not the sweep's to take
    _, found = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, CLAIMED), ([1, 0, 0, 0], counted)])
    assert _names(found) == {"duplicated"}


def test_recovered_without_a_sweep_and_revived_not_dead() -> None:
    claim = {"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]}
    steps = _steps(_call("ENQUEUE", "j", "p", 0), claim, _call("PROMOTE", 5))
    back = _keys({"pending": {"j": 0}}, {"j": {"state": "pending", "attempts": 1}})
    _, found = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, CLAIMED), (1, back)])
    assert _names(found) == {"recovered"}
    steps = _steps(_call("ENQUEUE", "j", "p", 0), claim, _call("COMPLETE", "j", 1), _call("REVIVE", "j"))
    done = _keys({"done": {"j": 1000}}, {"j": {"state": "done", "attempts": 1}})
    _, found = _run(steps, [(1, ENQUEUED), (CLAIM_REPLY, CLAIMED), (1, done), (1, back)])
    assert _names(found) == {"recovered"}


def test_a_member_without_an_enqueue_is_unexpected() -> None:
    steps = _steps(_call("ENQUEUE", "j", "p", 0), _call("PROMOTE", 5))
    stranger = _keys({"pending": {"j": 1000, "x": 5}}, {"j": {"state": "pending"}})
    _, found = _run(steps, [(1, ENQUEUED), (0, stranger)])
    assert _names(found) == {"unexpected"}


def test_an_excluded_job_or_queue_is_never_judged() -> None:
    steps = _steps(_call("ENQUEUE", "j", "p", 5), _call("PROMOTE", 10))
    delayed = _keys({"delayed": {"j": 1005}}, {"j": {"state": "delayed"}})
    lost = [(1, delayed), (1, _keys({}, {"j": {"state": "pending"}}))]
    assert _names(_run(steps, lost)[1]) == {"lost"}
    for raw in (
        (b"DEL", b"emq:{q}:job:j"),
        (b"ZADD", b"emq:{q}:pending", b"1", b"x"),
        (b"FLUSHALL",),
    ):
        assert _run(steps, lost, Ledger().taint(raw))[1] == [], raw


def test_every_finding_is_named_and_described() -> None:
    assert set(FINDINGS) == {"lost", "duplicated", "recovered", "unexpected", "token", "stale", "pause", "stalled"}
    assert all(text.strip() for text in FINDINGS.values())


@pytest.mark.parametrize("reply", [0, None, []])
def test_a_claim_that_took_nothing_follows_nothing(reply: Reply) -> None:
    steps = _steps({"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]})
    assert _run(steps, [(reply, {})]) == (EMPTY, [])


def test_a_field_write_on_a_row_keeps_the_job_followed_and_attempts_resets_its_tokens() -> None:
    steps = _steps(_call("ENQUEUE", "j", "p", 5), _call("PROMOTE", 10))
    lost = [(1, _keys({"delayed": {"j": 1005}}, {"j": {"state": "delayed"}})), (1, _keys({}, {"j": {}}))]
    mild = Ledger().taint((b"HSET", b"emq:{q}:job:j", b"owner", b"ops"))
    assert not mild.held(b"q", b"j") and mild.followed(b"q", b"j")  # the invariants let it go, not the accounting
    assert _names(_run(steps, lost, mild)[1]) == {"lost"}
    for raw in ((b"EXPIRE", b"emq:{q}:job:j", b"10"), (b"DEL", b"emq:{q}:job:j"), (b"HINCRBY", b"emq:{q}:job:j",
                b"attempts", b"1"), (b"ZREM", b"emq:{q}:active", b"j")):  # fmt: skip
        assert not Ledger().taint(raw).followed(b"q", b"j"), raw
    # another writer lowers a held lease's attempts: the stale check and the token baseline start again
    claim = {"op": "call", "verb": "CLAIM", "queue": Q, "args": [100]}
    write = {"op": "raw", "command": ["HSET", "emq:{q}:job:j", "attempts", "0"]}
    steps = _steps(_call("ENQUEUE", "j", "p", 0), claim, write, _call("EXTEND", "j", 0, 100),
                   _call("FAIL", "j", 0, "e", 5, 0), _call("PROMOTE", 5), claim)  # fmt: skip
    lowered = _keys({"active": {"j": 1100}}, {"j": {"state": "active", "attempts": 0}})
    delayed = _keys({"delayed": {"j": 1000}}, {"j": {"state": "delayed", "attempts": 0}})
    pending = _keys({"pending": {"j": 1000}}, {"j": {"state": "pending", "attempts": 0}})
    outcomes = [(1, ENQUEUED), (CLAIM_REPLY, CLAIMED), (3, lowered), (1, lowered), (b"retry", delayed),
                (1, pending), (CLAIM_REPLY, CLAIMED)]  # fmt: skip
    accounts, found = _run(steps, outcomes, Ledger().taint(tuple(b.encode() for b in write["command"])))  # type: ignore[union-attr]
    assert found == []
    assert accounts.lives[(b"q", b"j")].token == 1 and "#2 raw HSET attempts" in accounts.lives[(b"q", b"j")].story()


def _chained(count: int) -> tuple[tuple[Resolved, ...], list[Keyspace]]:
    """`count` ENQUEUEs of j0, j1, ... and each step's keyspace, a Keyspace made from the one before
    (as the replay's walks make them: the judge's short checks can tell what each step wrote)."""
    steps = _steps(
        *(_call("ENQUEUE", f"j{i}", "p", 0) for i in range(count)), {"op": "call", "verb": "PAUSE", "queue": Q}
    )
    snapshots, current = [], Keyspace()
    for i in range(count):
        pending = {**(current.get(b"emq:{q}:pending").value if i else {}), f"j{i}".encode(): b"1000"}  # type: ignore[union-attr]
        current = current.then({b"emq:{q}:pending": Entry("zset", pending, -1),
                                f"emq:{{q}}:job:j{i}".encode(): Entry("hash", {b"state": b"pending"}, -1)})  # fmt: skip
        snapshots.append(current)
    return steps, snapshots


@pytest.mark.parametrize("short", [True, False])
def test_the_checks_of_what_a_step_wrote_find_a_job_it_lost(short: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past FULL_CHECK_BELOW jobs the invariants and the accounting look only at what a step wrote
    (and what the ledger recorded): a job the step lost from its set is found all the same, worded
    as the full check words it; a step that moved nothing finds nothing either way."""
    monkeypatch.setattr(invariants, "FULL_CHECK_BELOW", 0 if short else 10**9)
    monkeypatch.setattr(accounting, "FULL_CHECK_BELOW", 0 if short else 10**9)
    steps, snapshots = _chained(40)
    ledger, accounts, before = Ledger(), EMPTY, Keyspace()
    for resolved, after in zip(steps, snapshots, strict=False):
        ledger = ledger.record(resolved, 1, after)
        assert invariants.violations(ledger, resolved, before, 1, after) == []
        ledger = ledger.checked(after)
        accounts, found = follow(accounts, ledger.followed, resolved, before, 1, after, 1000)
        assert found == []
        before = after
    pause = steps[-1]
    fine = before.then({b"emq:{q}:meta": Entry("hash", {b"paused": b"1"}, -1)})
    assert invariants.violations(ledger, pause, before, 1, fine) == []
    assert follow(accounts, ledger.followed, pause, before, 1, fine, 1000)[1] == []
    # (short: decided from the meta key written and the ids recorded, not from every job)
    assert invariants._nothing_broken_where_written(ledger, fine) is short
    members = dict(before[b"emq:{q}:pending"].value)  # type: ignore[arg-type]
    del members[b"j7"]
    lost = before.then({b"emq:{q}:pending": Entry("zset", members, -1)})
    assert invariants._nothing_broken_where_written(ledger, lost) is False
    assert invariants.violations(ledger, pause, before, 1, lost) == [
        "placement: b'j7' of b'q' is in no set with state b'pending'"
    ]
    found = follow(accounts, ledger.followed, pause, before, 1, lost, 1000)[1]
    assert len(found) == 1 and found[0].startswith("accounting:lost: b'j7' of b'q' is in no set")
