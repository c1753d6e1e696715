"""The spec's invariants of a healthy queue, checked on an executor's keyspace after a step.

A `Ledger` remembers what the history did (enqueued ids, transitions into dead and done, the
highest attempts seen, what corruption touched); `violations` is pure over it and a snapshot.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from difftest.calls import Call
from difftest.guards import GuardError, check_call
from difftest.model import hash_fields, zset
from difftest.replies import ErrorReply, Refused, Reply
from difftest.snapshot import Snapshot

SETS = ("pending", "active", "delayed", "dead", "done")
_KEY = re.compile(rb"emq:\{([^{}]+)\}:(.*)", re.DOTALL)

INVARIANTS = {
    "placement": "every enqueued id is in exactly one set and its row's state names that set",
    "attempts-monotonic": "attempts never decreases",
    "fence": "a stale token never completes, fails or extends a lease",
    "metrics": "metrics:failed and metrics:completed equal the transitions into dead and done",
    "done-final": "a job in done never comes back",
    "revive-dead-only": "nothing but a dead job is revived",
}


@dataclass
class Ledger:
    enqueued: set[tuple[bytes, bytes]] = field(default_factory=set)
    done: set[tuple[bytes, bytes]] = field(default_factory=set)
    attempts: dict[bytes, int] = field(default_factory=dict)
    into: Counter[tuple[bytes, str]] = field(default_factory=Counter)  # (queue, failed|completed)
    tainted_ids: set[tuple[bytes, bytes]] = field(default_factory=set)
    tainted_queues: set[bytes] = field(default_factory=set)
    tainted_metrics: set[tuple[bytes, str]] = field(default_factory=set)
    everything_tainted: bool = False
    settled: bool = False  # nothing recorded since the last full check

    def __post_init__(self) -> None:
        self.settled = False

    def taint(self, command: tuple[bytes, ...]) -> None:
        """A raw write: whatever it touches is no longer held to the invariants."""
        self.settled = False
        if len(command) < 2 or command[0].upper() in (b"FLUSHALL", b"FLUSHDB", b"RESTORE", b"RENAME"):
            self.everything_tainted = True
            return
        for key in command[1:]:
            match = _KEY.fullmatch(key)
            if not match:
                continue
            queue, rest = match.groups()
            if rest.startswith(b"job:"):
                self.tainted_ids.add((queue, rest[4:]))
            elif rest.startswith(b"metrics:"):
                self.tainted_metrics.add((queue, rest[8:].decode(errors="replace")))
            elif rest.decode(errors="replace") in SETS:
                self.tainted_queues.add(queue)

    def held(self, queue: bytes, job: bytes) -> bool:
        return not (self.everything_tainted or queue in self.tainted_queues or (queue, job) in self.tainted_ids)

    def record(self, call: Call, reply: Reply, after: Snapshot) -> None:
        """After a step both executors agree on: what it did, for the checks that follow."""
        try:
            queue, args = check_call(call.verb, call.numkeys, call.rest)
        except GuardError:
            return
        if reply not in (0, None, []) and not isinstance(reply, ErrorReply | Refused):
            self.settled = False
        if call.verb == "ENQUEUE" and reply == 1:
            self.enqueued.add((queue, bytes(args[0])))
        elif call.verb == "COMPLETE" and reply == 1:
            self.into[(queue, "completed")] += 1
            self.done.add((queue, bytes(args[0])))
        elif call.verb == "FAIL" and reply == b"dead":
            self.into[(queue, "failed")] += 1
        elif call.verb == "SWEEP" and isinstance(reply, list) and len(reply) == 4:
            self.into[(queue, "failed")] += int(reply[1])  # type: ignore[arg-type]
        for key, entry in after.items():
            if entry.kind == "hash" and isinstance(entry.value, dict):
                raw = entry.value.get(b"attempts")
                if raw is not None and raw.lstrip(b"-").isdigit():
                    self.attempts[key] = max(self.attempts.get(key, int(raw)), int(raw))


def violations(
    ledger: Ledger, call: Call | None, before: Snapshot, reply: Reply, after: Snapshot, held: bool = False
) -> list[str]:
    """Each broken invariant, named, with the id or key it concerns; marks the ledger settled
    when none is (the next check of an unchanged keyspace can then skip the sweep).

    `held`: the keyspace and the ledger are as at the last check, which passed; only the step's
    own invariants (the fence, revive) are checked again.
    """
    broken: list[str] = []
    if ledger.everything_tainted:
        return broken
    if held:
        return _step_violations(ledger, call, before, reply) if call is not None else []
    base = {q: b"emq:{" + q + b"}:" for q, _ in ledger.enqueued | ledger.done}
    for queue, job in sorted(ledger.enqueued):
        if not ledger.held(queue, job):
            continue
        homes = [s for s in SETS if job in (zset(after, base[queue] + s.encode()) or {})]
        state = (hash_fields(after, base[queue] + b"job:" + job) or {}).get(b"state")
        if len(homes) != 1 or state != homes[0].encode():
            broken.append(f"placement: {job!r} of {queue!r} is in {homes or 'no set'} with state {state!r}")
    for queue, job in sorted(ledger.done):
        if ledger.held(queue, job) and job not in (zset(after, base[queue] + b"done") or {}):
            broken.append(f"done-final: {job!r} of {queue!r} left done")
    for key, highest in ledger.attempts.items():
        match = _KEY.fullmatch(key)
        if match and not ledger.held(match.group(1), match.group(2)[4:]):
            continue
        raw = (hash_fields(after, key) or {}).get(b"attempts")
        if raw is not None and raw.lstrip(b"-").isdigit() and int(raw) < highest:
            broken.append(f"attempts-monotonic: {key!r} went from {highest} to {int(raw)}")
    for (queue, which), count in ledger.into.items():
        if (queue, which) in ledger.tainted_metrics:
            continue
        stored = (hash_fields(after, b"emq:{" + queue + b"}:metrics:" + which.encode()) or {}).get(b"count")
        if int(stored or 0) != count:
            broken.append(f"metrics: {which} count is {stored!r}, {count} transitions happened")
    if call is not None:
        broken += _step_violations(ledger, call, before, reply)
    ledger.settled = not broken
    return broken


def _step_violations(ledger: Ledger, call: Call, before: Snapshot, reply: Reply) -> list[str]:
    try:
        queue, args = check_call(call.verb, call.numkeys, call.rest)
    except GuardError:
        return []
    base = b"emq:{" + queue + b"}:"
    if call.verb in ("EXTEND", "COMPLETE", "FAIL") and reply not in (0, None) and isinstance(reply, int | bytes):
        job, token = bytes(args[0]), str(args[1]).encode()
        held = job in (zset(before, base + b"active") or {})
        attempts = (hash_fields(before, base + b"job:" + job) or {}).get(b"attempts")
        if ledger.held(queue, job) and not (held and attempts == token):
            return [f"fence: {call.verb} of {job!r} with token {token!r} succeeded (attempts {attempts!r})"]
    if call.verb == "REVIVE" and reply == 1:
        job = bytes(args[0])
        if job not in (zset(before, base + b"dead") or {}):
            return [f"revive-dead-only: {job!r} was revived but was not dead"]
    return []
