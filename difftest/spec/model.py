"""The spec as an executable model: from the keyspace before a step, each executor's reply and keyspace after.

Pure functions over logical snapshots (`lease_epoch` set aside, as the judge compares them). For a
transition call, `predict` walks the spec's effect for the verb (docs/contract.md, and
docs/contract-decisions.md where the spec is silent) command by command on a copy of the keyspace,
with the caller's permissions (the ACL facts the replay gathered), the frozen clock, the native
server's run_id and the server's conditions (the memory limit, a read-only replica), once for the
Lua executor (the host's guards and `paused?` read, then the script) and once for the native one
(the module's single command), and answers what each must reply and leave:

- where the contract lets the sides differ (D1-D9, N2-N5) each side gets its own outcome: the
  native refuses what the scripts stop at half-way (nothing written), exempts another run's lease
  (D7), refuses a lane (D8), decides a split claim on the state at its end (D1), answers a paused
  read's error (D2) and is refused by the server where the host decides alone (N3, N4);
- where the scripts stop at an error after they wrote, their error is predicted and their partial
  writes are not (the spec: the retired scripts' behaviour, recorded, not judged).

`raw_write`, `advanced` and `unchanged` predict the harness's own steps (another writer's command,
the clock moving on, a restart or a condition switched), the same for both sides. The judge
(difftest/judge/verdicts.py) holds each executor to the model as well as to the other.

`claim` and `sweep` give the same walk as an `Outcome` (a reply and keyspace, or an error class) for
the contract's rules D1, D7 and D8, which predict one side's outcome where the two executors differ.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from difftest.spec.commands import (
    ATTEMPTS,
    COMPLETED,
    COUNT,
    FAILED,
    STALLED,
    SWEEP_VERDICTS,
    TRANSITIONS,
    Layout,
    Transition,
    Verb,
)
from difftest.spec.guards import GuardError, parse_integer
from difftest.spec.replies import ErrorReply, NotSent, Refused, Reply
from difftest.spec.snapshot import Entry, Epochs, Members, Snapshot, as_keyspace, diff, volatile_keys

I64_MAX = 2**63 - 1
NOTINT, OVERFLOW, WRONGTYPE, LANE = "NOTINT", "OVERFLOW", "WRONGTYPE", "LANE"
LUA_EXACT_INTEGERS = 2**53  # a Lua number (a double) holds every integer up to this, and not all beyond


@dataclass(frozen=True)
class Outcome:
    """A predicted step: a reply and the keyspace after it, or an error (a class, see below)."""

    reply: object = None
    after: Snapshot | None = None
    error: str | None = None  # WRONGTYPE, NOTINT, OVERFLOW, LANE


def kind_of(snapshot: Snapshot, key: bytes) -> str:
    entry = snapshot.get(key)
    return "none" if entry is None else entry.kind


def zset(snapshot: Snapshot, key: bytes) -> Mapping[bytes, bytes] | None:
    """A zset's members (empty if absent), or None when the key holds another type."""
    entry = snapshot.get(key)
    if entry is None:
        return {}
    if entry.kind != "zset" or not isinstance(entry.value, Mapping):
        return None
    return entry.value


def hash_fields(snapshot: Snapshot, key: bytes) -> dict[bytes, bytes] | None:
    entry = snapshot.get(key)
    if entry is None or entry.kind != "hash" or not isinstance(entry.value, dict):
        return None
    return entry.value


def ordered(members: Mapping[bytes, bytes]) -> list[tuple[float, bytes, bytes]]:
    """Members in zset order, by score, then by member bytes: (score as a number, member, score)."""
    if isinstance(members, Members):
        return members.ordered()
    return sorted((float(score), member, score) for member, score in members.items())


def select(members: Mapping[bytes, bytes], now_ms: int, limit: int) -> list[tuple[bytes, bytes]]:
    """ZRANGEBYSCORE -inf now LIMIT 0 limit."""
    if not members:
        return []
    out: list[tuple[bytes, bytes]] = []
    for number, member, score in ordered(members):
        if number > now_ms or len(out) >= limit:
            break
        out.append((member, score))
    return out


def _members(value: object) -> Members:
    """A zset's members as the model writes them (a walk's dict made a `Members` once)."""
    if isinstance(value, Members):
        return value
    return Members(value if isinstance(value, Mapping) else {})


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


def lua_number(count: int) -> int:
    """A count as the retired scripts reply it: through a Lua number, so past 2^53 the double nearest
    it (N5; docs/contract-decisions.md, "Lua number precision")."""
    return count if abs(count) <= LUA_EXACT_INTEGERS else int(float(count))


def _score(ms: int) -> bytes:
    return str(ms).encode()


def claim(before: Snapshot, layout: Layout, lease_ms: int, now_ms: int) -> Outcome:
    """CLAIM past the pause check, as the module does it (attempts exact), without the caller's
    permissions or a server condition: the contract's D1 reads it for the side that claims."""
    r = _Run(before, frozenset(), NO_GATES, True, now_ms)
    try:
        reply = _claim_script(r, layout, (lease_ms,), None)
    except _Stop as stop:
        return Outcome(error=_CLASSES[stop.faults[0]])
    return Outcome(reply, r.snapshot())


def sweep(
    before: Snapshot,
    epochs: Epochs,
    layout: Layout,
    max_stalled: int,
    limit: int,
    now_ms: int,
    run_id: bytes | None,
) -> Outcome:
    """SWEEP on one executor: run_id None is the Lua scripts (no exemption, no lane refusal). The
    contract's D7 and D8 read it.

    Both executors take the members in order and meet each member's faults before the next
    member's: its row's type, its lane and stalled counter, then the destination its verdict
    writes (pending, or dead and the metrics count). The scripts stop there half-way, the native
    refuses the whole sweep there; either way the first fault in that order is the error. The Lua
    outcome on an error is its error class only (its partial writes are not predicted).
    """
    r = _Run(before, frozenset(), NO_GATES, run_id is not None, now_ms)
    try:
        reply = _sweep(r, layout, (max_stalled, limit), run_id, epochs)
    except _Stop as stop:
        return Outcome(error=_CLASSES[stop.faults[0]])
    return Outcome(reply, r.snapshot())


# -- the model: what each executor replies and leaves at a step ------------------------------------


@dataclass(frozen=True)
class Expected:
    """What the spec says one executor does at a step.

    `errors` non-empty: an error reply is expected, any of these (an error code, `EMQ NOTINT`, or
    the start of its message); else `reply` exactly (unless `reply_judged` is false: the harness's
    own steps, whose replies are not executor behaviour). `after` is the keyspace after the step,
    epochs set aside; None where the spec does not judge it (the scripts' writes before an error).
    """

    reply: Reply = None
    errors: tuple[str, ...] = ()
    after: Snapshot | None = None
    reply_judged: bool = True


@dataclass(frozen=True)
class Prediction:
    """The spec's outcome of one step on each executor (the same object where they must agree)."""

    lua: Expected
    native: Expected


# the steps the model does not predict, each a kind the campaign reports the share of
UNJUDGED_KINDS: dict[str, str] = {
    "died": "the native server died at the step (no reply, no keyspace)",
    "raw-command": "a raw write of a command the model does not read (its effect is Valkey's, not the spec's)",
    "raw-over-limit": "a raw write while the memory limit is on (refused or not by the command's own flags)",
    "raw-writes-denied": "a raw write while the servers deny writes (refused as a write command is)",
    "off": "the model switched off (bench/bench_replay.py --model measures its cost against the same run)",
}

READ, WRITE = "read", "write"
Denied = frozenset[tuple[bytes, str]]
# the access a command needs on a derived key (the native checks the same, host.rs `Access`)
EXISTS, READS, WRITES, READ_WRITE = "exists", "read", "write", "read-write"
# the server conditions that refuse a script at its first write: a read-only replica, every write denied
# (fewer good replicas than min-replicas-to-write; MISCONF refuses the same way, not generated), the memory limit
REPLICA, WRITES_DENIED, MEMORY = "READONLY", "NOREPLICAS", "OOM"
Gates = frozenset[str]  # the conditions on at a call, any of the three
NO_GATES: Gates = frozenset()


@dataclass(frozen=True)
class _Error:
    """An error one command meets: what the scripts answer (a code or a message's start) and what
    the module answers for the same fault."""

    lua: str
    native: str


_WRONGTYPE = _Error("WRONGTYPE", "WRONGTYPE")
_NOPERM = _Error("NOPERM", "NOPERM")
_COUNTER = {
    NOTINT: _Error("ERR hash value is not an integer", "EMQ NOTINT"),
    OVERFLOW: _Error("ERR increment or decrement would overflow", "EMQ OVERFLOW"),
}
_GATES = {REPLICA: _Error("READONLY", "READONLY"), WRITES_DENIED: _Error("NOREPLICAS", "NOREPLICAS"),
          MEMORY: _Error("OOM", "OOM")}  # fmt: skip
_LANE = _Error("EMQ LANE", "EMQ LANE")  # the module's alone: the scripts ignore a `group` field
# each fault's class, as the contract's rules name it (Outcome.error)
_CLASSES = {_WRONGTYPE: WRONGTYPE, _COUNTER[NOTINT]: NOTINT, _COUNTER[OVERFLOW]: OVERFLOW, _LANE: LANE,
            _NOPERM: "NOPERM", _GATES[REPLICA]: REPLICA, _GATES[WRITES_DENIED]: WRITES_DENIED,
            _GATES[MEMORY]: MEMORY}  # fmt: skip


class _Stop(Exception):
    """The command met its faults (in the order the server checks them: ACL, the first-write gate,
    the key's type, the counter's value); the scripts answer the first, the module any of them
    (it checks a derived key's type and the caller's access to it in its own order, D3)."""

    def __init__(self, faults: list[_Error]) -> None:
        super().__init__(faults[0].lua)
        self.faults = faults


@dataclass(frozen=True)
class CallFacts:
    """A transition call as the model needs it, with what surrounds it at this step.

    `layout` and `args` are the guards' reading (None: the guards refused it, `refusal` says why);
    `checked` the keys the server checks the caller's ACL on before the native command runs;
    `denied` the (key, read|write) the caller may not touch; `stage` "call", "begin" (the Lua host's
    `paused?` read of a split CLAIM) or "end" (its claim, `read_at_begin` what that read answered);
    `scripts_only` the native server runs the Lua host for it too (an upgrade's Lua-era worker);
    `gates` the server conditions on (READONLY: sent to a read-only replica, NOREPLICAS: the server
    denies every write, OOM: over the memory limit), any of them together."""

    verb: Verb
    layout: Layout | None
    args: tuple[int | bytes, ...]
    refusal: str | None = None
    checked: tuple[bytes, ...] = ()
    denied: Denied = frozenset()
    stage: str = "call"
    read_at_begin: Reply = None
    scripts_only: bool = False
    gates: Gates = NO_GATES


class _Run:
    """One executor's walk through a transition: the keyspace as it writes (copied at its first
    write), the caller's permissions, whether the first write has been reached, and the facts."""

    __slots__ = ("before", "data", "denied", "gated", "gates", "native", "now", "scripted", "written", "wrote")

    def __init__(self, before: Snapshot, denied: Denied, gates: Gates, native: bool, now: int,
                 scripted: bool = True) -> None:  # fmt: skip
        self.before = before
        # the walk's writes over `before` (None: a key it deleted), not a copy of the keyspace
        self.data: dict[bytes, Entry | None] | None = None
        self.written: set[bytes] = set()  # the keys the walk set or deleted
        self.denied = denied
        self.gates = gates
        self.gated = False
        # the walk is a script's (its commands checked by the script runner), or a plain command's
        # (the Lua host's PAUSE and RESUME): the two check the memory limit and the ACL in turn
        self.scripted = scripted
        self.native = native
        self.now = now
        self.wrote = False

    # reading
    def get(self, key: bytes) -> Entry | None:
        data = self.data
        if data is not None and key in data:
            return data[key]
        return self.before.get(key)

    def snapshot(self) -> Snapshot:
        """The keyspace the walk leaves: `before` itself when it wrote nothing, else one made from it
        that names the keys written (so that it is compared with the walk's by those keys alone)."""
        if self.data is None:
            return self.before
        changed = {key: entry for key, entry in self.data.items() if entry is not None}
        gone = [key for key, entry in self.data.items() if entry is None]
        return as_keyspace(self.before).then(changed, gone)

    def allowed(self, key: bytes, access: str) -> bool:
        denied = self.denied
        if not denied:
            return True
        if access == EXISTS:  # a key pattern of either permission: EXISTS asks for no read
            return not ((key, READ) in denied and (key, WRITE) in denied)
        if access == READS:
            return (key, READ) not in denied
        if access == WRITES:
            return (key, WRITE) not in denied
        return (key, READ) not in denied and (key, WRITE) not in denied

    def check(self, key: bytes, access: str | None = None, want: str | None = None, *, write: bool = False,
              deny_oom: bool = False) -> Entry | None:  # fmt: skip
        """One command's checks on its key, in the server's order: the caller's access (None: a
        declared key, which the server checked before the command ran), the first-write gate,
        the key's type (`want`; None: any). Its entry, or _Stop."""
        faults: list[_Error] = []
        first_write = write and not self.gated
        if first_write:
            self.gated = True
        over_limit = first_write and deny_oom and MEMORY in self.gates
        if over_limit and self.scripted:
            faults.append(_GATES[MEMORY])  # valkey 9.1's script runner: the limit before the ACL
        if access is not None and self.denied and not self.allowed(key, access):
            faults.append(_NOPERM)
        if over_limit and not self.scripted:
            faults.append(_GATES[MEMORY])  # a plain command (the host's HSET): the ACL first
        if first_write:
            # then a read-only replica, then writes denied (a replica never lacks replicas)
            faults += (_GATES[gate] for gate in (REPLICA, WRITES_DENIED) if gate in self.gates)
        entry = self.get(key)
        if want is not None and entry is not None and entry.kind != want:
            faults.append(_WRONGTYPE)
        if faults:
            raise _Stop(faults)
        return entry

    # writing (each after its check)
    def _data(self) -> dict[bytes, Entry | None]:
        if self.data is None:
            self.data = {}
        self.wrote = True
        return self.data

    def zadd(self, key: bytes, member: bytes, score: bytes) -> None:
        self.written.add(key)
        entry = self.get(key)
        if entry is None:
            self._data()[key] = Entry("zset", Members({member: score}), -1)
        else:
            self._data()[key] = Entry("zset", _members(entry.value).with_score(member, score), entry.pttl)

    def zrem(self, key: bytes, member: bytes) -> None:
        entry = self.get(key)
        if entry is None or not isinstance(entry.value, Mapping) or member not in entry.value:
            self.wrote = True
            return
        members = _members(entry.value).without(member)
        data = self._data()
        self.written.add(key)
        if members:
            data[key] = Entry("zset", members, entry.pttl)
        else:
            data[key] = None  # a set's last member leaves: the key goes (and its TTL with it)

    def hset(self, key: bytes, fields: dict[bytes, bytes]) -> int:
        """HSET; its reply (the fields that were new)."""
        entry = self.get(key)
        current: dict[bytes, bytes] = entry.value if entry is not None and isinstance(entry.value, dict) else {}
        added = sum(1 for name in fields if name not in current)
        self.written.add(key)
        self._data()[key] = Entry("hash", {**current, **fields}, entry.pttl if entry is not None else -1)
        return added

    def hdel(self, key: bytes, name: bytes) -> int:
        entry = self.get(key)
        if entry is None or not isinstance(entry.value, dict) or name not in entry.value:
            self.wrote = True
            return 0
        fields = {f: v for f, v in entry.value.items() if f != name}
        data = self._data()
        self.written.add(key)
        if fields:
            data[key] = Entry("hash", fields, entry.pttl)
        else:
            data[key] = None  # a hash's last field goes: the key goes
        return 1

    def incr(self, key: bytes, name: bytes) -> int:
        """HINCRBY key name 1 with its checks (the caller's read and write, a hash, an integer)."""
        entry = self.check(key, READ_WRITE, "hash", write=True, deny_oom=True)
        stored = entry.value.get(name) if entry is not None and isinstance(entry.value, dict) else None
        value = next_counter(stored)
        if isinstance(value, str):
            raise _Stop([_COUNTER[value]])
        self.hset(key, {name: str(value).encode()})
        return value

    def members(self, key: bytes) -> Mapping[bytes, bytes]:
        """A declared zset read (ZSCORE, ZRANGEBYSCORE): its members, WRONGTYPE when not a zset."""
        entry = self.check(key, None, "zset")
        return entry.value if entry is not None and isinstance(entry.value, Mapping) else {}


# -- each transition, as the spec's effect column says, on one executor ---------------------------


def _fence(r: _Run, layout: Layout, job: bytes, token: int) -> bytes | None:
    """The fence: the id in active and its row's attempts the token (compared as bytes); the
    attempts it holds, or None when the fence fails (reply 0, nothing written)."""
    if job not in r.members(layout.active):
        return None
    row = r.check(layout.row(job), READS, "hash")
    attempts = row.value.get(ATTEMPTS) if row is not None and isinstance(row.value, dict) else None
    return attempts if attempts == str(token).encode() else None


def _enqueue(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    job, payload, delay = args
    assert isinstance(job, bytes) and isinstance(payload, bytes) and isinstance(delay, int)
    row = layout.row(job)
    if r.check(row, EXISTS) is not None:
        return 0  # a row of any type: a duplicate
    if delay == 0:
        state, home, due = b"pending", layout.pending, r.now
    else:
        state, home, due = b"delayed", layout.delayed, r.now + delay
    r.check(row, WRITES, write=True, deny_oom=True)
    r.hset(row, {b"payload": payload, b"state": state, b"enqueued_at": _score(r.now)})
    r.check(home, None, "zset", write=True, deny_oom=True)
    r.zadd(home, job, _score(due))
    return 1


def _claim_script(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    """CLAIM past the pause decision: pop the oldest pending id (a ghost is consumed), attempts + 1,
    state active, the lease. The scripts reply attempts through a Lua number (N5)."""
    (lease,) = args
    assert isinstance(lease, int)
    pending = r.check(layout.pending, None, "zset", write=True)  # ZPOPMIN: the first write, on an empty pending too
    members = pending.value if pending is not None and isinstance(pending.value, Mapping) else {}
    if not members:
        return []
    if isinstance(members, Members):
        head = members.ordered()[0][1]  # (its order handed on from the zset it was made from)
    else:
        head = min(members.items(), key=lambda item: (float(item[1]), item[0]))[0]
    r.zrem(layout.pending, head)
    row = layout.row(head)
    if r.check(row, EXISTS) is None:
        return []  # a ghost: consumed by the pop, nothing minted
    attempts = r.incr(row, ATTEMPTS)
    r.hset(row, {b"state": b"active"})
    r.check(layout.active, None, "zset", write=True, deny_oom=True)
    r.zadd(layout.active, head, _score(r.now + lease))
    entry = r.get(row)
    payload = entry.value.get(b"payload") if entry is not None and isinstance(entry.value, dict) else None
    return [head, payload, attempts if r.native else lua_number(attempts)]


def _paused_read(r: _Run, layout: Layout) -> Reply:
    """`HGET meta paused`: the Lua host's read, and the module's own at its round trip."""
    entry = r.check(layout.meta, READS, "hash")
    return entry.value.get(b"paused") if entry is not None and isinstance(entry.value, dict) else None


def _claim_native(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    """The module's CLAIM: the pause decided atomically on the state at its round trip (any present
    `paused` value pauses; an error reading meta is the answer, D2), then the script's claim."""
    if _paused_read(r, layout) is not None:
        return []
    return _claim_script(r, layout, args, run_id)


def _extend(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    job, token, lease = args
    assert isinstance(job, bytes) and isinstance(token, int) and isinstance(lease, int)
    if _fence(r, layout, job, token) is None:
        return 0
    r.check(layout.active, None, "zset", write=True, deny_oom=True)
    r.zadd(layout.active, job, _score(r.now + lease))  # ZADD XX: the member is there
    if r.native:
        r.check(layout.row(job), WRITES)  # N1's re-stamp writes the row (N2: a read-only caller is refused)
    return 1


def _complete(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    job, token = args
    assert isinstance(job, bytes) and isinstance(token, int)
    if _fence(r, layout, job, token) is None:
        return 0
    row, now = layout.row(job), _score(r.now)
    r.check(layout.active, None, "zset", write=True)
    r.zrem(layout.active, job)
    r.check(row, WRITES, "hash", write=True, deny_oom=True)
    r.hset(row, {b"state": b"done", b"finished_at": now})
    r.check(layout.done, None, "zset", write=True, deny_oom=True)
    r.zadd(layout.done, job, now)
    r.incr(layout.metrics(COMPLETED), COUNT)
    return 1


def _fail(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    job, token, error, max_attempts, backoff = args
    assert isinstance(job, bytes) and isinstance(token, int) and isinstance(error, bytes)
    assert isinstance(max_attempts, int) and isinstance(backoff, int)
    attempts = _fence(r, layout, job, token)
    if attempts is None:
        return 0
    row = layout.row(job)
    r.check(layout.active, None, "zset", write=True)
    r.zrem(layout.active, job)
    r.check(row, WRITES, "hash", write=True, deny_oom=True)
    if int(attempts) >= max_attempts:  # (canonical decimals: the scripts compare length, then bytes)
        r.hset(row, {b"state": b"dead", b"last_error": error})
        r.check(layout.dead, None, "zset", write=True, deny_oom=True)
        r.zadd(layout.dead, job, b"0")
        r.incr(layout.metrics(FAILED), COUNT)
        return b"dead"
    r.hset(row, {b"state": b"delayed", b"last_error": error})
    r.check(layout.delayed, None, "zset", write=True, deny_oom=True)
    r.zadd(layout.delayed, job, _score(r.now + backoff))
    return b"retry"


def _promote(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    (limit,) = args
    assert isinstance(limit, int)
    promoted = 0
    for job, score in select(r.members(layout.delayed), r.now, limit):
        r.check(layout.delayed, None, "zset", write=True)
        r.zrem(layout.delayed, job)
        row = layout.row(job)
        if r.check(row, EXISTS) is None:
            continue  # a ghost: dropped
        r.check(layout.pending, None, "zset", write=True, deny_oom=True)
        r.zadd(layout.pending, job, score)  # its due score, as stored
        r.check(row, WRITES, "hash", write=True, deny_oom=True)  # D9: a row not a hash
        r.hset(row, {b"state": b"pending"})
        promoted += 1
    return promoted


def _sweep(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None,
           epochs: Epochs | None = None) -> Reply:  # fmt: skip
    """Expired leases, each leaving active first: a ghost dropped; stalled + 1, dead at max_stalled
    (last_error `stalled`, metrics:failed + 1), else pending at 0. The module exempts a lease whose
    `lease_epoch` is not its run_id (D7: pending at 0, stalled unchanged) and refuses a lane (D8)."""
    max_stalled, limit = args
    assert isinstance(max_stalled, int) and isinstance(limit, int)
    counts = dict.fromkeys(SWEEP_VERDICTS, 0)
    for job, _ in select(r.members(layout.active), r.now, limit):
        r.check(layout.active, None, "zset", write=True)
        r.zrem(layout.active, job)
        row = layout.row(job)
        entry = r.check(row, EXISTS)
        if entry is None:
            counts["ghost"] += 1
            continue
        if r.native:
            entry = r.check(row, READ_WRITE, "hash")
            fields = entry.value if entry is not None and isinstance(entry.value, dict) else {}
            if b"group" in fields:
                raise _Stop([_LANE])
            if epochs is None or epochs.get(row) != run_id:
                r.check(layout.pending, None, "zset", write=True, deny_oom=True)
                r.zadd(layout.pending, job, b"0")
                r.hset(row, {b"state": b"pending"})
                counts["exempt"] += 1
                continue
        stalled = r.incr(row, STALLED)
        if stalled >= max_stalled:
            r.hset(row, {b"state": b"dead", b"last_error": b"stalled"})
            r.check(layout.dead, None, "zset", write=True, deny_oom=True)
            r.zadd(layout.dead, job, b"0")
            r.incr(layout.metrics(FAILED), COUNT)
            counts["die"] += 1
        else:
            r.hset(row, {b"state": b"pending"})
            r.check(layout.pending, None, "zset", write=True, deny_oom=True)
            r.zadd(layout.pending, job, b"0")
            counts["recover"] += 1
    return [counts[verdict] for verdict in SWEEP_VERDICTS]


def _revive(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    (job,) = args
    assert isinstance(job, bytes)
    if job not in r.members(layout.dead):
        return 0
    r.check(layout.dead, None, "zset", write=True)
    r.zrem(layout.dead, job)
    row = layout.row(job)
    if r.check(row, EXISTS) is None:
        return 0  # a ghost: consumed, nothing minted (docs/contract-decisions.md, "REVIVE of a ghost")
    r.check(layout.pending, None, "zset", write=True, deny_oom=True)
    r.zadd(layout.pending, job, _score(r.now))
    r.check(row, WRITES, "hash", write=True, deny_oom=True)
    r.hset(row, {b"state": b"pending", b"stalled": b"0"})
    return 1


def _pause(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    r.check(layout.meta, WRITES, "hash", write=True, deny_oom=True)  # HSET meta paused 1
    return r.hset(layout.meta, {b"paused": b"1"})


def _resume(r: _Run, layout: Layout, args: tuple[int | bytes, ...], run_id: bytes | None) -> Reply:
    r.check(layout.meta, WRITES, "hash", write=True)  # HDEL meta paused (not deny-oom)
    return r.hdel(layout.meta, b"paused")


Effect = Callable[[_Run, Layout, tuple[int | bytes, ...], "bytes | None"], Reply]
_EFFECTS: dict[Verb, Effect] = {
    Verb.ENQUEUE: _enqueue,
    Verb.CLAIM: _claim_script,
    Verb.EXTEND: _extend,
    Verb.COMPLETE: _complete,
    Verb.FAIL: _fail,
    Verb.PROMOTE: _promote,
    Verb.SWEEP: _sweep,
    Verb.REVIVE: _revive,
    Verb.PAUSE: _pause,
    Verb.RESUME: _resume,
}


def _declared_denied(transition: Transition, layout: Layout, denied: Denied) -> bool:
    """The server refuses the command before it runs: the caller may not read or write one of its
    declared keys (a module command's keys, and a script's, need both; the base is every caller's)."""
    if not denied:
        return False
    base = layout.base
    return any((key, perm) in denied for key in layout.declared(transition) if key != base for perm in (READ, WRITE))


def _outcome(r: _Run, walk: Callable[[], Reply], before: Snapshot) -> Expected:
    """Run one executor's walk: its reply and keyspace, or its error. The module writes nothing
    when it refuses (every check before its first write); the scripts' writes before their error
    stay and are not judged."""
    try:
        reply = walk()
    except _Stop as stop:
        if r.native:
            return Expected(errors=tuple(dict.fromkeys(f.native for f in stop.faults)), after=before)
        return Expected(errors=(stop.faults[0].lua,), after=None if r.wrote else before)
    return Expected(reply, after=r.snapshot())


def _lua_side(facts: CallFacts, before: Snapshot, now_ms: int) -> Expected:
    """The Lua executor: the host's guards, its `paused?` read (CLAIM), its plain command (PAUSE,
    RESUME) or the script by EVALSHA (refused by the server when a declared key is denied)."""
    if facts.layout is None:
        return Expected(Refused(facts.refusal or ""), after=before)
    layout, transition = facts.layout, TRANSITIONS[facts.verb]
    r = _Run(before, facts.denied, facts.gates, False, now_ms, transition.scripted)
    if transition.reads_meta:
        if facts.stage == "end":
            read = facts.read_at_begin
        else:
            try:
                read = _paused_read(r, layout)
            except _Stop as stop:
                if facts.stage == "begin":
                    return Expected(errors=(stop.faults[0].lua,), after=before)
                return Expected([], after=before)  # any non-nil reply reads as paused, an error too (D2)
            if facts.stage == "begin":
                return Expected(read, after=before)
        if read is not None:
            return Expected([], after=before)  # paused: the host sends no script (N3 too)
    if transition.scripted and _declared_denied(transition, layout, facts.denied):
        return Expected(errors=("NOPERM",), after=before)
    effect = _EFFECTS[facts.verb]
    return _outcome(r, lambda: effect(r, layout, facts.args, None), before)


def _native_side(facts: CallFacts, before: Snapshot, epochs: Epochs, now_ms: int, run_id: bytes) -> Expected:
    """The native executor: one module command, refused by the server on a denied declared key,
    then the module's own argument rules (D6) and its transition."""
    if facts.stage == "begin":
        return Expected(NotSent(""), after=before, reply_judged=False)  # one round trip, at the end
    if facts.layout is None:
        refused = facts.denied and any((key, perm) in facts.denied for key in facts.checked for perm in (READ, WRITE))
        return Expected(errors=("NOPERM",), after=before) if refused else Expected(ErrorReply(facts.refusal or ""),
                                                                                   after=before)  # fmt: skip
    layout, transition = facts.layout, TRANSITIONS[facts.verb]
    if _declared_denied(transition, layout, facts.denied):
        return Expected(errors=("NOPERM",), after=before)
    r = _Run(before, facts.denied, facts.gates, True, now_ms, transition.scripted)
    if facts.verb is Verb.SWEEP:
        return _outcome(r, lambda: _sweep(r, layout, facts.args, run_id, epochs), before)
    effect = _claim_native if facts.verb is Verb.CLAIM else _EFFECTS[facts.verb]
    return _outcome(r, lambda: effect(r, layout, facts.args, run_id), before)


def predict(facts: CallFacts, before: Snapshot, epochs: Epochs, now_ms: int, run_id: bytes) -> Prediction:
    """A transition call's outcome on each executor: from the keyspace before it (epochs set aside;
    `epochs` the native's `lease_epoch` fields, which D7 reads), the frozen clock and the native
    server's run_id."""
    lua = _lua_side(facts, before, now_ms)
    if facts.scripts_only:
        return Prediction(lua, lua)  # the Lua host on the native server too: the same outcome
    return Prediction(lua, _native_side(facts, before, epochs, now_ms, run_id))


# -- the harness's own steps: the same on both sides --------------------------------------------------


def discarded(before: Snapshot, refusal: str | None = None, scripts_only: bool = False) -> Prediction:
    """An element of a transaction the server discarded (EXECABORT: a command it queued was refused
    then): nothing written, on both sides alike; a call the Lua host's guards refuse (`refusal`) was
    never sent by the host (D6), while the module's command was queued and discarded with the rest
    (unless the native server runs the Lua host for it too, `scripts_only`: then neither sent it)."""
    discarded = Expected(errors=("EXECABORT",), after=before)
    if refusal is None:
        return Prediction(discarded, discarded)
    host_refused = Expected(Refused(refusal), after=before)
    return Prediction(host_refused, host_refused if scripts_only else discarded)


def unchanged(before: Snapshot) -> Prediction:
    """A step that writes nothing (a restart, a condition switched, MULTI, EXEC): the keyspace as it
    was (a restart reloads it from the AOF; the clock is frozen). Its reply is not the executors'."""
    same = Expected(after=before, reply_judged=False)
    return Prediction(same, same)


def advanced(before: Snapshot, ms: int) -> Prediction:
    """The clock moved on by `ms`: every TTL is that much shorter, and a key past its expiry is
    gone (the walk after the step reads every key: lazy expiry; a key at its very millisecond stays)."""
    volatile = volatile_keys(before)
    if ms == 0 or not volatile:
        return unchanged(before)
    changed: dict[bytes, Entry] = {}
    gone = []
    for key in volatile:
        entry = before[key]
        if entry.pttl - ms >= 0:
            changed[key] = Entry(entry.kind, entry.value, entry.pttl - ms)
        else:
            gone.append(key)
    same = Expected(after=as_keyspace(before).then(changed, gone), reply_judged=False)
    return Prediction(same, same)


_FLOAT = re.compile(rb"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity)", re.IGNORECASE)


def zset_score(raw: bytes) -> bytes | None:
    """A score as ZADD reads it and the walk gives it back (Valkey's d2string: an integral value
    within 2^62 as an integer, infinities as `inf` / `-inf`); None for one it refuses or one whose
    shortest form the model does not spell (a fraction in exponent form)."""
    if not _FLOAT.fullmatch(raw):
        return None
    value = float(raw)
    if math.isinf(value):
        return b"-inf" if value < 0 else b"inf"
    if value == 0:
        return b"-0" if math.copysign(1.0, value) < 0 else b"0"
    if value.is_integer() and abs(value) <= 2**62:
        return str(int(value)).encode()
    text = repr(value)
    return None if "e" in text else text.encode()


_RAW_VERBS = frozenset({b"SET", b"DEL", b"HSET", b"HDEL", b"ZADD", b"RPUSH", b"SADD", b"PEXPIRE", b"PEXPIREAT",
                        b"PERSIST"})  # fmt: skip


# a raw verb's write: (verb, key, the arguments after it, the keyspace before, now, the epochs) -> as raw_write
_RawWrite: TypeAlias = Callable[[bytes, bytes, tuple[bytes, ...], Snapshot, int, Epochs | None], Snapshot | str]


def raw_write(
    command: tuple[bytes, ...], before: Snapshot, now_ms: int, epochs: Epochs | None = None
) -> Snapshot | str:
    """The keyspace after another writer's command (the corruption, other writers' values, fields
    and TTLs the generator writes); the unjudged kind for a command the model does not read. A
    command a key's type refuses changes nothing. `epochs`: the native's `lease_epoch` fields before
    it (the Lua server holds none the native lacks: only raw writes and re-syncs give it any)."""
    verb = command[0].upper() if command else b""
    if verb not in _RAW_VERBS or len(command) < 2:
        return "raw-command"
    return _RAW_WRITES[verb](verb, command[1], command[2:], before, now_ms, epochs)


def _raw_set(verb: bytes, key: bytes, rest: tuple[bytes, ...], before: Snapshot, now_ms: int,
             epochs: Epochs | None) -> Snapshot | str:  # fmt: skip
    """SET key value: any type replaced, its TTL dropped."""
    if len(rest) != 1:
        return "raw-command"
    after = dict(before.items())
    after[key] = Entry("string", rest[0], -1)
    return after


def _raw_del(verb: bytes, key: bytes, rest: tuple[bytes, ...], before: Snapshot, now_ms: int,
             epochs: Epochs | None) -> Snapshot | str:  # fmt: skip
    """DEL key...: every key named gone."""
    after = dict(before.items())
    for name in (key, *rest):
        after.pop(name, None)
    return after


def _raw_hset(verb: bytes, key: bytes, rest: tuple[bytes, ...], before: Snapshot, now_ms: int,
              epochs: Epochs | None) -> Snapshot | str:  # fmt: skip
    """HSET key field value...: the fields set on a hash (a new one where the key is free)."""
    if not rest or len(rest) % 2:
        return "raw-command"
    entry = before.get(key)
    if entry is not None and entry.kind != "hash":
        return before
    fields = dict(entry.value) if entry is not None and isinstance(entry.value, dict) else {}
    for i in range(0, len(rest), 2):
        if rest[i] != b"lease_epoch":  # set aside in every snapshot (a hash of it alone is an empty one)
            fields[rest[i]] = rest[i + 1]
    after = dict(before.items())
    after[key] = Entry("hash", fields, entry.pttl if entry is not None else -1)
    return after


def _raw_hdel(verb: bytes, key: bytes, rest: tuple[bytes, ...], before: Snapshot, now_ms: int,
              epochs: Epochs | None) -> Snapshot | str:  # fmt: skip
    """HDEL key field...: the fields gone from a hash, the hash with its last one (where that is sure)."""
    entry = before.get(key)
    if entry is None or entry.kind != "hash" or not isinstance(entry.value, dict):
        return before
    fields = {f: v for f, v in entry.value.items() if f not in rest}
    after = dict(before.items())
    if fields:
        after[key] = Entry("hash", fields, entry.pttl)
    elif b"lease_epoch" in rest:
        del after[key]  # every field gone, the epoch a row may hold too
    elif len(fields) == len(entry.value):
        return before  # none of them there (a hash of an epoch alone shows empty): nothing changes
    elif epochs is not None and key not in epochs:
        del after[key]  # its last field gone, and no epoch on either side to keep it
    else:
        return "raw-command"  # its last field gone: whether an epoch alone keeps it, one side may know
    return after


def _raw_zadd(verb: bytes, key: bytes, rest: tuple[bytes, ...], before: Snapshot, now_ms: int,
              epochs: Epochs | None) -> Snapshot | str:  # fmt: skip
    """ZADD key score member...: the members added or rescored (unjudged for a score not spelled)."""
    if not rest or len(rest) % 2:
        return "raw-command"
    entry = before.get(key)
    if entry is not None and entry.kind != "zset":
        return before
    members = dict(entry.value) if entry is not None and isinstance(entry.value, dict) else {}
    for i in range(0, len(rest), 2):
        score = zset_score(rest[i])
        if score is None:
            return "raw-command"
        members[rest[i + 1]] = score
    after = dict(before.items())
    after[key] = Entry("zset", members, entry.pttl if entry is not None else -1)
    return after


def _raw_push(verb: bytes, key: bytes, rest: tuple[bytes, ...], before: Snapshot, now_ms: int,
              epochs: Epochs | None) -> Snapshot | str:  # fmt: skip
    """RPUSH key item... / SADD key member...: the items appended to a list, the members to a set."""
    kind = "list" if verb == b"RPUSH" else "set"
    if not rest:
        return "raw-command"
    entry = before.get(key)
    if entry is not None and entry.kind != kind:
        return before
    pttl = entry.pttl if entry is not None else -1
    after = dict(before.items())
    if kind == "list":
        items = entry.value if entry is not None and isinstance(entry.value, tuple) else ()
        after[key] = Entry("list", (*items, *rest), pttl)
    else:
        had = entry.value if entry is not None and isinstance(entry.value, frozenset) else frozenset()
        after[key] = Entry("set", had | frozenset(rest), pttl)
    return after


def _raw_persist(verb: bytes, key: bytes, rest: tuple[bytes, ...], before: Snapshot, now_ms: int,
                 epochs: Epochs | None) -> Snapshot | str:  # fmt: skip
    """PERSIST key: its TTL dropped."""
    after = dict(before.items())
    entry = before.get(key)
    if entry is not None:
        after[key] = Entry(entry.kind, entry.value, -1)
    return after


def _raw_expire(verb: bytes, key: bytes, rest: tuple[bytes, ...], before: Snapshot, now_ms: int,
                epochs: Epochs | None) -> Snapshot | str:  # fmt: skip
    """PEXPIRE key ms / PEXPIREAT key at-ms: its TTL set, the key gone at a time not in the future."""
    if len(rest) != 1 or not rest[0].lstrip(b"-").isdigit():
        return "raw-command"
    entry = before.get(key)
    if entry is None:
        return before
    at = int(rest[0]) + (now_ms if verb == b"PEXPIRE" else 0)
    after = dict(before.items())
    if at <= now_ms:
        del after[key]  # a time not in the future deletes the key at once
    else:
        after[key] = Entry(entry.kind, entry.value, at - now_ms)
    return after


# each raw verb's write (the verbs of _RAW_VERBS)
_RAW_WRITES: dict[bytes, _RawWrite] = {
    b"SET": _raw_set, b"DEL": _raw_del, b"HSET": _raw_hset, b"HDEL": _raw_hdel, b"ZADD": _raw_zadd,
    b"RPUSH": _raw_push, b"SADD": _raw_push, b"PERSIST": _raw_persist, b"PEXPIRE": _raw_expire,
    b"PEXPIREAT": _raw_expire,
}  # fmt: skip


def raw_prediction(command: tuple[bytes, ...], before: Snapshot, now_ms: int, limited: bool,
                   epochs: Epochs | None = None) -> Prediction | str:  # fmt: skip
    """A raw write on both sides (its reply is not compared: the harness's own), or the unjudged kind."""
    if limited:
        return "raw-over-limit"
    after = raw_write(command, before, now_ms, epochs)
    if isinstance(after, str):
        return after
    same = Expected(after=after, reply_judged=False)
    return Prediction(same, same)


# -- holding an executor to its prediction -----------------------------------------------------------


def _error_matches(reply: Reply, accepted: tuple[str, ...]) -> bool:
    return isinstance(reply, ErrorReply) and any(reply.code == a or reply.message.startswith(a) for a in accepted)


def _keys(changed: Iterable[bytes], most: int = 4) -> str:
    names = [key.decode("utf-8", errors="backslashreplace") for key in changed]
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def departure(expected: Expected, reply: Reply, after: Snapshot) -> str | None:
    """How an executor's reply and keyspace depart from the spec's, in words; None when they do not."""
    if expected.reply_judged:
        if expected.errors:
            if not _error_matches(reply, expected.errors):
                return f"the spec says an error ({' or '.join(expected.errors)}), it answered {reply!r}"
        elif not (reply == expected.reply and type(reply) is type(expected.reply)):
            return f"the spec says {expected.reply!r}, it answered {reply!r}"
    wanted = expected.after
    if wanted is not None and after is not wanted and after != wanted:
        return f"its keyspace departs from the spec's at {_keys(diff(wanted, after))}"
    return None


__all__ = [
    "UNJUDGED_KINDS",
    "CallFacts",
    "Expected",
    "Outcome",
    "Prediction",
    "advanced",
    "claim",
    "departure",
    "lua_number",
    "predict",
    "raw_prediction",
    "raw_write",
    "sweep",
    "unchanged",
    "zset_score",
]
