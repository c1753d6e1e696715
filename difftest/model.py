"""An executable reading of the spec for the transitions whose contract rows need a prediction.

Pure functions over logical snapshots (epochs set aside): the selection of due and expired members,
counter increments with Valkey's integer rules, and the outcomes of CLAIM (for D1) and SWEEP on
either executor (for D7 and D8). The comparator consults them only when the two executors differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from difftest.commands import ATTEMPTS, FAILED, STALLED, SWEEP_VERDICTS, Layout
from difftest.guards import GuardError, parse_integer
from difftest.snapshot import Entry, Epochs, Snapshot

I64_MAX = 2**63 - 1
NOTINT, OVERFLOW, WRONGTYPE, LANE = "NOTINT", "OVERFLOW", "WRONGTYPE", "LANE"


@dataclass(frozen=True)
class Outcome:
    """A predicted step: a reply and the keyspace after it, or an error (a class, see below)."""

    reply: object = None
    after: Snapshot | None = None
    error: str | None = None  # WRONGTYPE, NOTINT, OVERFLOW, LANE


def kind_of(snapshot: Snapshot, key: bytes) -> str:
    entry = snapshot.get(key)
    return "none" if entry is None else entry.kind


def zset(snapshot: Snapshot, key: bytes) -> dict[bytes, bytes] | None:
    """A zset's members (empty if absent), or None when the key holds another type."""
    entry = snapshot.get(key)
    if entry is None:
        return {}
    if entry.kind != "zset" or not isinstance(entry.value, dict):
        return None
    return entry.value


def hash_fields(snapshot: Snapshot, key: bytes) -> dict[bytes, bytes] | None:
    entry = snapshot.get(key)
    if entry is None or entry.kind != "hash" or not isinstance(entry.value, dict):
        return None
    return entry.value


def ordered(members: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """Members in zset order: by score, then by member bytes."""
    return sorted(members.items(), key=lambda item: (float(item[1]), item[0]))


def select(members: dict[bytes, bytes], now_ms: int, limit: int) -> list[tuple[bytes, bytes]]:
    """ZRANGEBYSCORE -inf now LIMIT 0 limit."""
    return [item for item in ordered(members) if float(item[1]) <= now_ms][:limit]


def next_counter(stored: bytes | None) -> int | str:
    """What HINCRBY <key> <field> 1 answers, or the error class it raises (NOTINT, OVERFLOW)."""
    if stored is None:
        return 1
    try:
        value = parse_integer(stored, -(2**63), I64_MAX)
    except GuardError:
        return NOTINT  # string2ll refuses it: "hash value is not an integer"
    if value == I64_MAX:
        return OVERFLOW
    return value + 1


def _score(ms: int) -> bytes:
    return str(ms).encode()


class _Writer:
    """A copy of a snapshot that writes land in."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.state = dict(snapshot)

    def zadd(self, key: bytes, member: bytes, score: bytes) -> None:
        members = dict(zset(self.state, key) or {})
        members[member] = score
        self.state[key] = Entry("zset", members, self.state[key].pttl if key in self.state else -1)

    def zrem(self, key: bytes, member: bytes) -> None:
        members = dict(zset(self.state, key) or {})
        members.pop(member, None)
        if members:
            self.state[key] = Entry("zset", members, self.state[key].pttl)
        else:
            self.state.pop(key, None)

    def hset(self, key: bytes, **fields: bytes) -> None:
        current = dict(hash_fields(self.state, key) or {})
        current.update({name.encode(): value for name, value in fields.items()})
        self.state[key] = Entry("hash", current, self.state[key].pttl if key in self.state else -1)


def claim(before: Snapshot, layout: Layout, lease_ms: int, now_ms: int) -> Outcome:
    """CLAIM past the pause check, as both executors do it when nothing is wrong-typed."""
    pending = zset(before, layout.pending)
    if pending is None:
        return Outcome(error=WRONGTYPE)
    if not pending:
        return Outcome([], before)
    head, _ = ordered(pending)[0]
    row = layout.row(head)
    writer = _Writer(before)
    if kind_of(before, row) == "none":
        writer.zrem(layout.pending, head)
        return Outcome([], writer.state)
    fields = hash_fields(before, row)
    if fields is None:
        return Outcome(error=WRONGTYPE)
    attempts = next_counter(fields.get(ATTEMPTS))
    if isinstance(attempts, str):
        return Outcome(error=attempts)
    if zset(before, layout.active) is None:
        return Outcome(error=WRONGTYPE)
    writer.zrem(layout.pending, head)
    writer.hset(row, attempts=str(attempts).encode(), state=b"active")
    writer.zadd(layout.active, head, _score(now_ms + lease_ms))
    return Outcome([head, fields.get(b"payload"), attempts], writer.state)


@dataclass(frozen=True)
class SweepVerdict:
    member: bytes
    verdict: str  # ghost, exempt, recover, die
    stalled: int = 0


def sweep(
    before: Snapshot,
    epochs: Epochs,
    layout: Layout,
    max_stalled: int,
    limit: int,
    now_ms: int,
    run_id: bytes | None,
) -> Outcome:
    """SWEEP on one executor: run_id None is the Lua scripts (no exemption, no lane refusal).

    Both executors take the members in order and meet each member's faults before the next
    member's: its row's type, its lane and stalled counter, then the destination its verdict
    writes (pending, or dead and the metrics count). The scripts stop there half-way, the native
    refuses the whole sweep there; either way the first fault in that order is the error. The Lua
    outcome on an error is its error class only (its partial writes are not predicted).
    """
    active = zset(before, layout.active)
    if active is None:
        return Outcome(error=WRONGTYPE)
    writer = _Writer(before)
    counts = dict.fromkeys(SWEEP_VERDICTS, 0)
    for member, _ in select(active, now_ms, limit):
        row = layout.row(member)
        kind = kind_of(before, row)
        if kind == "none":
            verdict = SweepVerdict(member, "ghost")
        elif kind != "hash":
            return Outcome(error=WRONGTYPE)
        else:
            fields = hash_fields(before, row) or {}
            if run_id is not None and b"group" in fields:
                return Outcome(error=LANE)
            if run_id is not None and epochs.get(row) != run_id:
                verdict = SweepVerdict(member, "exempt")
            else:
                stalled = next_counter(fields.get(STALLED))
                if isinstance(stalled, str):
                    return Outcome(error=stalled)
                verdict = SweepVerdict(member, "die" if stalled >= max_stalled else "recover", stalled)
        error = _apply_member(writer, layout, verdict)
        if error is not None:
            return Outcome(error=error)
        counts[verdict.verdict] += 1
    reply = [counts[verdict] for verdict in SWEEP_VERDICTS]
    return Outcome(reply, writer.state)


def _apply_member(writer: _Writer, layout: Layout, v: SweepVerdict) -> str | None:
    """One member's writes, or the error class of the first that fails (types do not change
    during a sweep, so they are read from the state before it)."""
    writer.zrem(layout.active, v.member)
    row = layout.row(v.member)
    metrics = layout.metrics(FAILED)
    if v.verdict in ("exempt", "recover"):
        if zset(writer.state, layout.pending) is None:
            return WRONGTYPE
        writer.zadd(layout.pending, v.member, b"0")
        if v.verdict == "recover":
            writer.hset(row, stalled=str(v.stalled).encode(), state=b"pending")
        else:
            writer.hset(row, state=b"pending")
    elif v.verdict == "die":
        if zset(writer.state, layout.dead) is None or kind_of(writer.state, metrics) not in ("none", "hash"):
            return WRONGTYPE
        writer.hset(row, stalled=str(v.stalled).encode(), state=b"dead", last_error=b"stalled")
        writer.zadd(layout.dead, v.member, b"0")
        count = next_counter((hash_fields(writer.state, metrics) or {}).get(b"count"))
        if isinstance(count, str):
            return count
        writer.hset(metrics, count=str(count).encode())
    return None
