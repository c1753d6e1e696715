"""The spec's invariants of a healthy queue, checked on an executor's keyspace after a step.

A `Ledger` remembers what the history did (enqueued ids, transitions into dead and done, the
highest attempts seen, what corruption touched). It is a value: `taint` and `record` return a new
ledger, so the judge's fold carries it in its state. `violations` is pure over it and a snapshot.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from difftest.commands import ATTEMPTS, COMPLETED, COUNT, FAILED, SETS, Layout, Moves, parse_key, reply_kind
from difftest.model import hash_fields, zset
from difftest.replies import ErrorReply, Refused, Reply
from difftest.resolve import Resolved
from difftest.snapshot import Snapshot

INVARIANTS = {
    "placement": "every enqueued id is in exactly one set and its row's state names that set",
    "attempts-monotonic": "attempts never decreases",
    "fence": "a stale token never completes, fails or extends a lease",
    "metrics": "metrics:failed and metrics:completed equal the transitions into dead and done",
    "done-final": "a job in done never comes back",
    "revive-dead-only": "nothing but a dead job is revived",
}
# raw commands that rewrite the keyspace wholesale: nothing is held to the invariants after them
_WHOLESALE = (b"FLUSHALL", b"FLUSHDB", b"RESTORE", b"RENAME")


@dataclass(frozen=True)
class Ledger:
    enqueued: frozenset[tuple[bytes, bytes]] = frozenset()
    done: frozenset[tuple[bytes, bytes]] = frozenset()
    attempts: tuple[tuple[bytes, int], ...] = ()  # row -> the highest attempts seen, as pairs
    into: tuple[tuple[tuple[bytes, str], int], ...] = ()  # (queue, failed|completed) -> transitions
    tainted_ids: frozenset[tuple[bytes, bytes]] = frozenset()
    tainted_queues: frozenset[bytes] = frozenset()
    tainted_metrics: frozenset[tuple[bytes, str]] = frozenset()
    everything_tainted: bool = False
    settled: bool = field(default=False, compare=False)  # nothing recorded since the last full check

    def taint(self, command: tuple[bytes, ...]) -> Ledger:
        """A raw write: whatever it touches is no longer held to the invariants."""
        if len(command) < 2 or command[0].upper() in _WHOLESALE:
            return replace(self, everything_tainted=True, settled=False)
        ids, queues, metrics = set(self.tainted_ids), set(self.tainted_queues), set(self.tainted_metrics)
        for key in command[1:]:
            name = parse_key(key)
            if name is None:
                continue
            if name.job is not None:
                ids.add((name.queue, name.job))
            elif name.metrics is not None:
                metrics.add((name.queue, name.metrics))
            elif name.set_name is not None:
                queues.add(name.queue)
        return replace(self, tainted_ids=frozenset(ids), tainted_queues=frozenset(queues),
                       tainted_metrics=frozenset(metrics), settled=False)  # fmt: skip

    def held(self, queue: bytes, job: bytes) -> bool:
        return not (self.everything_tainted or queue in self.tainted_queues or (queue, job) in self.tainted_ids)

    def record(self, resolved: Resolved, reply: Reply, after: Snapshot) -> Ledger:
        """After a step: what it did, for the checks that follow."""
        guarded, transition = resolved.guarded, resolved.transition
        if guarded is None or transition is None:
            return self
        queue = guarded.layout.queue
        moved = reply not in (0, None, []) and not isinstance(reply, ErrorReply | Refused)
        enqueued, done, into = self.enqueued, self.done, Counter(dict(self.into))
        kind = reply_kind(transition.verb, reply) if moved else ""
        if transition.moves is Moves.ENQUEUED and reply == 1:
            enqueued = enqueued | {(queue, guarded.job)}
        elif transition.moves is Moves.COMPLETED and reply == 1:
            into[(queue, COMPLETED)] += 1
            done = done | {(queue, guarded.job)}
        elif transition.moves is Moves.DEAD_LETTERED and kind == "dead":
            into[(queue, FAILED)] += 1
        elif transition.moves is Moves.SWEPT and isinstance(reply, list) and len(reply) == 4:
            into[(queue, FAILED)] += int(reply[1])  # type: ignore[arg-type]
        attempts = dict(self.attempts)
        for key, entry in after.items():
            if entry.kind == "hash" and isinstance(entry.value, dict):
                raw = entry.value.get(ATTEMPTS)
                if raw is not None and raw.lstrip(b"-").isdigit():
                    attempts[key] = max(attempts.get(key, int(raw)), int(raw))
        return replace(self, enqueued=enqueued, done=done, into=tuple(sorted(into.items())),
                       attempts=tuple(sorted(attempts.items())), settled=self.settled and not moved)  # fmt: skip

    def checked(self) -> Ledger:
        """The ledger after a full check that found nothing broken."""
        return self if self.settled else replace(self, settled=True)


def violations(ledger: Ledger, resolved: Resolved, before: Snapshot, reply: Reply, after: Snapshot,
               held: bool = False) -> list[str]:  # fmt: skip
    """Each broken invariant, named, with the id or key it concerns.

    `held`: the keyspace and the ledger are as at the last check, which passed; only the step's
    own invariants (the fence, revive) are checked again.
    """
    broken: list[str] = []
    if ledger.everything_tainted:
        return broken
    if held:
        return _step_violations(ledger, resolved, before, reply)
    for queue, job in sorted(ledger.enqueued):
        if not ledger.held(queue, job):
            continue
        layout = Layout(queue)
        homes = [s for s in SETS if job in (zset(after, layout.key(s)) or {})]
        state = (hash_fields(after, layout.row(job)) or {}).get(b"state")
        if len(homes) != 1 or state != homes[0].encode():
            broken.append(f"placement: {job!r} of {queue!r} is in {homes or 'no set'} with state {state!r}")
    for queue, job in sorted(ledger.done):
        if ledger.held(queue, job) and job not in (zset(after, Layout(queue).done) or {}):
            broken.append(f"done-final: {job!r} of {queue!r} left done")
    for key, highest in ledger.attempts:
        name = parse_key(key)
        if name is not None and name.job is not None and not ledger.held(name.queue, name.job):
            continue
        raw = (hash_fields(after, key) or {}).get(ATTEMPTS)
        if raw is not None and raw.lstrip(b"-").isdigit() and int(raw) < highest:
            broken.append(f"attempts-monotonic: {key!r} went from {highest} to {int(raw)}")
    for (queue, which), count in ledger.into:
        if (queue, which) in ledger.tainted_metrics:
            continue
        stored = (hash_fields(after, Layout(queue).metrics(which)) or {}).get(COUNT)
        if int(stored or 0) != count:
            broken.append(f"metrics: {which} count is {stored!r}, {count} transitions happened")
    broken += _step_violations(ledger, resolved, before, reply)
    return broken


def _step_violations(ledger: Ledger, resolved: Resolved, before: Snapshot, reply: Reply) -> list[str]:
    guarded, transition = resolved.guarded, resolved.transition
    if guarded is None or transition is None:
        return []
    layout = guarded.layout
    if transition.fenced and reply not in (0, None) and isinstance(reply, int | bytes):
        job, token = guarded.job, str(guarded.args[1]).encode()
        in_active = job in (zset(before, layout.active) or {})
        attempts = (hash_fields(before, layout.row(job)) or {}).get(ATTEMPTS)
        if ledger.held(layout.queue, job) and not (in_active and attempts == token):
            return [f"fence: {transition.verb} of {job!r} with token {token!r} succeeded (attempts {attempts!r})"]
    if transition.moves is Moves.REVIVED and reply == 1:
        job = guarded.job
        if job not in (zset(before, layout.dead) or {}):
            return [f"revive-dead-only: {job!r} was revived but was not dead"]
    return []
