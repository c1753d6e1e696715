"""The spec's invariants of a healthy queue, checked on an executor's keyspace after a step.

A `Ledger` remembers what the history did (enqueued ids, transitions into dead and done, the
highest attempts seen, what corruption touched). It is a value: `taint` and `record` return a new
ledger, so the judge's fold carries it in its state. `violations` is pure over it and a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import immutables

from difftest.history.resolve import Resolved
from difftest.judge.accounting import EMPTY, Accounts
from difftest.spec.commands import ATTEMPTS, COMPLETED, COUNT, FAILED, SETS, Layout, Moves, parse_key, reply_kind
from difftest.spec.replies import ErrorReply, Refused, Reply
from difftest.spec.snapshot import Snapshot, moved_members, written_since

IdSet = immutables.Map[tuple[bytes, bytes], bool]  # a persistent set of (queue, id): each value True
Attempts = immutables.Map[bytes, int]
_NO_IDS: IdSet = immutables.Map()
_NO_ATTEMPTS: Attempts = immutables.Map()

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
_REFUSED = (ErrorReply, Refused)  # replies that moved nothing, whatever they say


@dataclass(frozen=True)
class Ledger:
    # persistent maps (immutables.Map): a step adds one id to a ledger of thousands without a copy
    enqueued: IdSet = _NO_IDS  # each id an ENQUEUE answered 1 for (the values: True)
    done: IdSet = _NO_IDS
    attempts: Attempts = _NO_ATTEMPTS  # row -> the highest attempts seen
    into: tuple[tuple[tuple[bytes, str], int], ...] = ()  # (queue, failed|completed) -> transitions
    tainted_ids: frozenset[tuple[bytes, bytes]] = frozenset()
    # the tainted ids a raw write touched beyond its row's fields (the accounting follows a job
    # whose row only had fields written: see _mild)
    harsh_ids: frozenset[tuple[bytes, bytes]] = frozenset()
    tainted_queues: frozenset[bytes] = frozenset()
    tainted_metrics: frozenset[tuple[bytes, str]] = frozenset()
    everything_tainted: bool = False
    settled: bool = field(default=False, compare=False)  # nothing recorded since the last full check
    accounts: Accounts = field(default=EMPTY, compare=False)  # every job's life (difftest/judge/accounting.py)
    # the snapshot the last check that found nothing broken was made on, and the ids and rows whose
    # entries this ledger changed since: a check then looks at those and at the keys written since
    # (snapshot.written_since), not at every id (`violations`)
    checked_on: Snapshot | None = field(default=None, compare=False)
    recorded: frozenset[tuple[bytes, bytes]] = field(default=frozenset(), compare=False)
    recorded_rows: frozenset[bytes] = field(default=frozenset(), compare=False)
    merged_on: Snapshot | None = field(default=None, compare=False)  # the snapshot `attempts` last took in

    def _but(
        self,
        *,
        enqueued: IdSet | None = None,
        done: IdSet | None = None,
        attempts: Attempts | None = None,
        into: tuple[tuple[tuple[bytes, str], int], ...] | None = None,
        tainted_ids: frozenset[tuple[bytes, bytes]] | None = None,
        harsh_ids: frozenset[tuple[bytes, bytes]] | None = None,
        tainted_queues: frozenset[bytes] | None = None,
        tainted_metrics: frozenset[tuple[bytes, str]] | None = None,
        everything_tainted: bool | None = None,
        settled: bool | None = None,
        accounts: Accounts | None = None,
        checked_on: Snapshot | bool | None = False,
        recorded: frozenset[tuple[bytes, bytes]] | None = None,
        recorded_rows: frozenset[bytes] | None = None,
        merged_on: Snapshot | bool | None = False,
    ) -> Ledger:
        """This ledger with the fields given changed (dataclasses.replace without its per-call
        field introspection and keyword dicts: the judge makes a new ledger on most moving steps)."""
        return Ledger(
            enqueued=self.enqueued if enqueued is None else enqueued,
            done=self.done if done is None else done,
            attempts=self.attempts if attempts is None else attempts,
            into=self.into if into is None else into,
            tainted_ids=self.tainted_ids if tainted_ids is None else tainted_ids,
            harsh_ids=self.harsh_ids if harsh_ids is None else harsh_ids,
            tainted_queues=self.tainted_queues if tainted_queues is None else tainted_queues,
            tainted_metrics=self.tainted_metrics if tainted_metrics is None else tainted_metrics,
            everything_tainted=self.everything_tainted if everything_tainted is None else everything_tainted,
            settled=self.settled if settled is None else settled,
            accounts=self.accounts if accounts is None else accounts,
            checked_on=self.checked_on if checked_on is False else checked_on,  # type: ignore[arg-type]
            recorded=self.recorded if recorded is None else recorded,
            recorded_rows=self.recorded_rows if recorded_rows is None else recorded_rows,
            merged_on=self.merged_on if merged_on is False else merged_on,  # type: ignore[arg-type]
        )

    def taint(self, command: tuple[bytes, ...]) -> Ledger:
        """A raw write: whatever it touches is no longer held to the invariants."""
        if len(command) < 2 or command[0].upper() in _WHOLESALE:
            return self._but(everything_tainted=True, settled=False)
        ids, queues, metrics = _touched(command)
        harsh = ids if ids and not _mild(command) else None
        return self._but(
            # (a union only where the command names something: most name one kind of key)
            tainted_ids=self.tainted_ids | ids if ids else self.tainted_ids,
            harsh_ids=self.harsh_ids | harsh if harsh else self.harsh_ids,
            tainted_queues=self.tainted_queues | queues if queues else self.tainted_queues,
            tainted_metrics=self.tainted_metrics | metrics if metrics else self.tainted_metrics,
            settled=False,
        )

    def held(self, queue: bytes, job: bytes) -> bool:
        return not (self.everything_tainted or queue in self.tainted_queues or (queue, job) in self.tainted_ids)

    def record(self, resolved: Resolved, reply: Reply, after: Snapshot) -> Ledger:
        """After a step: what it did, for the checks that follow."""
        guarded, transition = resolved.guarded, resolved.transition
        if guarded is None or transition is None:
            return self
        # reply not in (0, None, []), without building that list and tuple (nor a union for
        # isinstance) on every call: objects made per step are what sets off the collector
        moved = not (reply is None or reply == 0 or (isinstance(reply, list) and not reply)) and not isinstance(
            reply, _REFUSED
        )
        attempts, rose = _highest(self.attempts, after, self.merged_on)
        recorded_rows = self.recorded_rows | rose if rose else self.recorded_rows
        if not moved:
            # each case below needs a reply that moved something (1, a kind, a sweep's counts), and
            # settled stays: most steps, the same ledger unless attempts rose
            if attempts is self.attempts:
                return self if self.merged_on is after else self._but(merged_on=after)
            return self._but(attempts=attempts, recorded_rows=recorded_rows, merged_on=after)
        enqueued, done, into, recorded = self.enqueued, self.done, self.into, self.recorded
        moves, queue = transition.moves, guarded.layout.queue
        if moves is Moves.ENQUEUED and reply == 1:
            enqueued = enqueued.set((queue, guarded.job), True)
            recorded = recorded | {(queue, guarded.job)}
        elif moves is Moves.COMPLETED and reply == 1:
            into = _counted(into, (queue, COMPLETED), 1)
            done = done.set((queue, guarded.job), True)
            recorded = recorded | {(queue, guarded.job)}
        elif moves is Moves.DEAD_LETTERED and reply_kind(transition.verb, reply) == "dead":
            into = _counted(into, (queue, FAILED), 1)
        elif moves is Moves.SWEPT and isinstance(reply, list) and len(reply) == 4:
            into = _counted(into, (queue, FAILED), int(reply[1]))  # type: ignore[arg-type]
        if (enqueued is self.enqueued and done is self.done and into is self.into and attempts is self.attempts
                and not self.settled):  # fmt: skip
            return self if self.merged_on is after else self._but(merged_on=after)  # nothing new, already unsettled
        return self._but(enqueued=enqueued, done=done, into=into, attempts=attempts, settled=False,
                         recorded=recorded, recorded_rows=recorded_rows, merged_on=after)  # fmt: skip

    def followed(self, queue: bytes, job: bytes) -> bool:
        """Whether the accounting still follows the job: no raw write touched its queue's sets, nor
        its row beyond writing fields (difftest/judge/accounting.py)."""
        return not (self.everything_tainted or queue in self.tainted_queues or (queue, job) in self.harsh_ids)

    def held_as(self, other: Ledger) -> bool:
        """Both ledgers follow the same jobs (the same taints)."""
        return self.everything_tainted == other.everything_tainted and (
            (self.harsh_ids is other.harsh_ids or self.harsh_ids == other.harsh_ids)
            and (self.tainted_queues is other.tainted_queues or self.tainted_queues == other.tainted_queues)
        )

    def accounted(self, accounts: Accounts) -> Ledger:
        """This ledger with the accounting's new accounts (the same ledger when they did not change)."""
        return self if accounts is self.accounts else self._but(accounts=accounts)

    def checked(self, on: Snapshot | None = None) -> Ledger:
        """The ledger after a check of the snapshot `on` that found nothing broken."""
        if self.settled and self.checked_on is on and not self.recorded and not self.recorded_rows:
            return self
        return self._but(settled=True, checked_on=on, recorded=frozenset(), recorded_rows=frozenset())


@lru_cache(maxsize=512)
def _touched(command: tuple[bytes, ...]) -> tuple[frozenset[tuple[bytes, bytes]], frozenset[bytes],
                                                  frozenset[tuple[bytes, str]]]:  # fmt: skip
    """The ids, queues (by a set) and metrics a raw command's arguments name (a pure function of
    the command, cached: both sides' ledgers are tainted by the same one)."""
    ids, queues, metrics = set(), set(), set()
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
    return frozenset(ids), frozenset(queues), frozenset(metrics)


def _mild(command: tuple[bytes, ...]) -> bool:
    """Field writes to one row (HSET, HMSET, HDEL): the job stays in its sets, so the accounting
    keeps following it (a write of `attempts` resets what it knows of the job's tokens: see
    accounting.rewritten); a wrong-typed row answers WRONGTYPE and nothing changes."""
    verb = command[0].upper()
    if verb in (b"HSET", b"HMSET"):
        shaped = len(command) >= 4 and len(command) % 2 == 0
    else:
        shaped = verb == b"HDEL" and len(command) >= 3
    return shaped and _row_owner(command[1]) is not None


def _counted(into: tuple[tuple[tuple[bytes, str], int], ...], which: tuple[bytes, str],
             count: int) -> tuple[tuple[tuple[bytes, str], int], ...]:  # fmt: skip
    """`into` with `count` more transitions into `which` (a count of 0 still enters it: the metrics
    hash is then held to 0), sorted as the ledger keeps it."""
    counts = dict(into)
    counts[which] = counts.get(which, 0) + count
    return tuple(sorted(counts.items()))


# the last snapshot's attempts, by identity: the replay hands the same snapshot object again while
# the keyspace does not change (most steps), and both ledgers of a step read the same one
_attempts_of: tuple[Snapshot | None, tuple[tuple[bytes, int], ...]] = (None, ())


def _snapshot_attempts(after: Snapshot) -> tuple[tuple[bytes, int], ...]:
    """Each hash's `attempts`, where it is an integer, as (key, value) in the snapshot's order."""
    global _attempts_of
    last, found = _attempts_of
    if last is after:
        return found
    pairs = []
    for key, entry in after.items():
        if entry.kind == "hash" and isinstance(entry.value, dict):
            raw = entry.value.get(ATTEMPTS)
            if raw is not None and raw.lstrip(b"-").isdigit():
                pairs.append((key, int(raw)))
    found = tuple(pairs)
    _attempts_of = (after, found)
    return found


def _highest(attempts: Attempts, after: Snapshot, merged_on: Snapshot | None) -> tuple[Attempts, frozenset[bytes]]:
    """The highest attempts seen per row, with the snapshot's (`attempts` itself when none rose), and
    the rows that rose. Only the keys written since `merged_on`, the snapshot `attempts` last took
    in, are read, where the snapshots say which (snapshot.written_since); else every hash."""
    written = written_since(after, merged_on)
    if written is not None and not written:
        return attempts, frozenset()
    if written is None:
        seen: Iterable[tuple[bytes, int]] = _snapshot_attempts(after)
    else:
        seen = _attempts_of_keys(after, written)
    rose: list[tuple[bytes, int]] = []
    for key, value in seen:
        known = attempts.get(key)
        if known is None or value > known:
            rose.append((key, value))
    if not rose:
        return attempts, frozenset()
    merged = attempts.mutate()
    for key, value in rose:
        merged[key] = value
    return merged.finish(), frozenset(key for key, _ in rose)


def _attempts_of_keys(after: Snapshot, keys: Iterable[bytes]) -> list[tuple[bytes, int]]:
    """Each of `keys` that is a hash with an integer `attempts` in `after`, as (key, value)."""
    pairs = []
    for key in keys:
        entry = after.get(key)
        if entry is not None and entry.kind == "hash" and isinstance(entry.value, dict):
            raw = entry.value.get(ATTEMPTS)
            if raw is not None and raw.lstrip(b"-").isdigit():
                pairs.append((key, int(raw)))
    return pairs


def violations(ledger: Ledger, resolved: Resolved, before: Snapshot, reply: Reply, after: Snapshot,
               held: bool = False) -> list[str]:  # fmt: skip
    """Each broken invariant, named, with the id or key it concerns.

    `held`: the keyspace and the ledger are as at the last check, which passed; only the step's
    own invariants (the fence, revive) are checked again.
    """
    broken: list[str] = []
    if ledger.everything_tainted:
        return broken
    if not held and _nothing_broken_where_written(ledger, after):
        held = True  # (what a full check would find: nothing, as the last check found)
    if not held:
        tainted_queues, tainted_ids = ledger.tainted_queues, ledger.tainted_ids
        for item in _sorted(ledger.enqueued):
            if item[0] in tainted_queues or item in tainted_ids:
                continue
            misplaced = _misplaced(item, after)
            if misplaced is not None:
                homes, state = misplaced
                broken.append(f"placement: {item[1]!r} of {item[0]!r} is in {homes or 'no set'} with state {state!r}")
        for queue, job in _sorted(ledger.done):
            if ledger.held(queue, job) and not _in_zset(after, _queue_keys(queue)[2], job):
                broken.append(f"done-final: {job!r} of {queue!r} left done")
        for key, highest in sorted(ledger.attempts.items()):
            owner = _row_owner(key)
            if owner is not None and not ledger.held(*owner):
                continue
            raw = _hash_field(after, key, ATTEMPTS)
            if raw is not None and raw.lstrip(b"-").isdigit() and int(raw) < highest:
                broken.append(f"attempts-monotonic: {key!r} went from {highest} to {int(raw)}")
        for (queue, which), count in ledger.into:
            if (queue, which) in ledger.tainted_metrics:
                continue
            stored = _hash_field(after, _metrics_key(queue, which), COUNT)
            if int(stored or 0) != count:
                broken.append(f"metrics: {which} count is {stored!r}, {count} transitions happened")
    found = _step_violation(ledger, resolved, before, reply)
    if found is not None:
        broken.append(found)
    return broken


# below this many enqueued ids the full check runs (cheaper than finding what to look at)
FULL_CHECK_BELOW = 32


def _nothing_broken_where_written(ledger: Ledger, after: Snapshot) -> bool:
    """Whether a full check of `after` would find nothing broken, decided from what changed since the
    last check that found nothing (`ledger.checked_on`): the ids and rows the ledger recorded since,
    and those the keys written since touch (a row, a member of a queue's set); the metrics are
    checked whole (a few keys). False: not known (no such check, or the keys written not known), or
    something may be broken: the full check then decides, and words what it finds."""
    before = ledger.checked_on
    if len(ledger.enqueued) <= FULL_CHECK_BELOW:
        return False  # (a few ids: the full check costs less than working out which to look at)
    written = written_since(after, before) if before is not None else None
    if written is None or before is None:
        return False
    ids = set(ledger.recorded)
    rows = set(ledger.recorded_rows)
    for key in written:
        rows.add(key)
        owner = _row_owner(key)
        if owner is not None:
            ids.add(owner)
            continue
        member_of = _set_owner(key)
        if member_of is not None:
            ids.update((member_of, job) for job in moved_members(before.get(key), after.get(key)))
    tainted_queues, tainted_ids = ledger.tainted_queues, ledger.tainted_ids
    for item in ids:
        queue, job = item
        if queue in tainted_queues or item in tainted_ids:
            continue
        if item in ledger.enqueued and _misplaced(item, after) is not None:
            return False
        if item in ledger.done and ledger.held(queue, job) and not _in_zset(after, _queue_keys(queue)[2], job):
            return False
    for key in rows:
        highest = ledger.attempts.get(key)
        if highest is None:
            continue
        owner = _row_owner(key)
        if owner is not None and not ledger.held(*owner):
            continue
        raw = _hash_field(after, key, ATTEMPTS)
        if raw is not None and raw.lstrip(b"-").isdigit() and int(raw) < highest:
            return False
    for (queue, which), count in ledger.into:
        if (queue, which) not in ledger.tainted_metrics:
            stored = _hash_field(after, _metrics_key(queue, which), COUNT)
            if int(stored or 0) != count:
                return False
    return True


def _misplaced(item: tuple[bytes, bytes], after: Snapshot) -> tuple[list[str], bytes | None] | None:
    """Where an enqueued id is (the sets that hold it, its row's state) when that breaks placement:
    not in exactly one set, or its row's state not that set's name; None when it is in place. (The
    lookups of _in_zset and _hash_field written out: the full check runs it for every id.)"""
    queue, job = item
    sets, row_prefix, _ = _queue_keys(queue)
    get = after.get
    homes = []
    for s, key in sets:
        entry = get(key)
        if entry is not None and entry.kind == "zset" and isinstance(entry.value, Mapping) and job in entry.value:
            homes.append(s)
    row = get(row_prefix + job)
    state = None
    if row is not None and row.kind == "hash" and isinstance(row.value, dict):
        state = row.value.get(b"state")
    if len(homes) != 1 or state != homes[0].encode():
        return homes, state
    return None


@lru_cache(maxsize=4096)
def _set_owner(key: bytes) -> bytes | None:
    """The queue of one of a queue's sets' keys; None for any other key."""
    name = parse_key(key)
    if name is None or name.set_name is None:
        return None
    return name.queue


# the ids of the last few sets sorted, compared by identity: a ledger's sets change only when an id
# is enqueued or done, and the full check goes through them in order at every step that changes
# the keyspace
_sorted_ids: list[tuple[IdSet, tuple[tuple[bytes, bytes], ...]]] = []
_SORTED_KEPT = 4


def _sorted(ids: IdSet) -> tuple[tuple[bytes, bytes], ...]:
    if not ids:
        return ()
    for known, in_order in _sorted_ids:
        if known is ids:
            return in_order
    in_order = tuple(sorted(ids))
    if len(_sorted_ids) >= _SORTED_KEPT:
        del _sorted_ids[0]
    _sorted_ids.append((ids, in_order))
    return in_order


# (member in (zset(...) or {})) and (hash_fields(...) or {}).get(...), without the empty dicts they
# make for every absent key: objects made per step are what sets off the collector
def _in_zset(snapshot: Snapshot, key: bytes, member: bytes) -> bool:
    entry = snapshot.get(key)
    return entry is not None and entry.kind == "zset" and isinstance(entry.value, Mapping) and member in entry.value


def _hash_field(snapshot: Snapshot, key: bytes, name: bytes) -> bytes | None:
    entry = snapshot.get(key)
    if entry is None or entry.kind != "hash" or not isinstance(entry.value, dict):
        return None
    return entry.value.get(name)


# keys spelled by Layout, cached per queue: the full check looks up every enqueued id's sets and row
@lru_cache(maxsize=1024)
def _queue_keys(queue: bytes) -> tuple[tuple[tuple[str, bytes], ...], bytes, bytes]:
    """(each set's name and key, the rows' prefix, done's key) of one queue."""
    layout = Layout(queue)
    return tuple((s, layout.key(s)) for s in SETS), layout.row_prefix, layout.done


@lru_cache(maxsize=1024)
def _metrics_key(queue: bytes, which: str) -> bytes:
    return Layout(queue).metrics(which)


@lru_cache(maxsize=4096)
def _row_owner(key: bytes) -> tuple[bytes, bytes] | None:
    """The (queue, id) of a job row's key; None for any other key."""
    name = parse_key(key)
    if name is None or name.job is None:
        return None
    return name.queue, name.job


def _step_violation(ledger: Ledger, resolved: Resolved, before: Snapshot, reply: Reply) -> str | None:
    """The step's own invariant it breaks (the fence, revive), if any."""
    guarded, transition = resolved.guarded, resolved.transition
    if guarded is None or transition is None:
        return None
    layout = guarded.layout
    if transition.fenced and reply not in (0, None) and isinstance(reply, (int, bytes)):
        job, token = guarded.job, str(guarded.args[1]).encode()
        in_active = _in_zset(before, layout.active, job)
        attempts = _hash_field(before, layout.row(job), ATTEMPTS)
        if ledger.held(layout.queue, job) and not (in_active and attempts == token):
            return f"fence: {transition.verb} of {job!r} with token {token!r} succeeded (attempts {attempts!r})"
    if transition.moves is Moves.REVIVED and reply == 1:
        job = guarded.job
        if not _in_zset(before, layout.dead, job):
            return f"revive-dead-only: {job!r} was revived but was not dead"
    return None
