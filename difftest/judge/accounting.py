"""The queue's accounting over a whole history, per executor: every job's life stage, step by step.

Each job that an ENQUEUE answered 1 for is followed through its life (pending, active, delayed, dead,
done) by what the transitions' replies say happened to it, and after every step held to the
keyspace: it must be in exactly the set its life says. What does not add up is a named finding
(`FINDINGS`), with the job's life as evidence. Pure: `follow` takes the accounts, the step and its
snapshots and returns the new accounts and the findings; nothing here reads a server.

A job the accounting cannot follow is excluded from then on, never judged: a raw write that names
its row or one of its queue's sets (corruption, other writers, TTLs), a script stopped half-way
(`Ledger.taint`, whose taints the accounting reads through `Ledger.held`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import immutables

from difftest.history.resolve import Guarded, Resolved
from difftest.spec.commands import ATTEMPTS, SETS, STALLED, Layout, Verb, parse_key
from difftest.spec.replies import ErrorReply, Refused, Reply
from difftest.spec.snapshot import Epochs, Snapshot, moved_members, written_since

FINDINGS = {
    "lost": "a job is in no set, though no transition removes it",
    "duplicated": "a job is in two sets, is claimed while its lease is held, or its lease is swept before its deadline",
    "recovered": "a job comes back to pending without a sweep of its expired lease, or is revived not dead",
    "unexpected": "a job is in a set or claimed without an enqueue, or moved where no transition put it",
    "token": "a claim hands out a fencing token not strictly greater than every earlier one of the job",
    "stale": "a completion, failure or extension by a token that is not the live lease's takes effect",
    "pause": "a claim succeeds while its queue is paused",
    "stalled": "a sweep recovers or dead-letters a counted expired lease without stalled + 1",
}
FULL_CHECK_BELOW = 32  # below this many lives every one is held to the keyspace at each step
LIFE_KEPT = 12  # the last events of a job's life kept as evidence
UNKNOWN = -1  # a live lease whose token another writer's `attempts` made unknown: any token may hold it


@dataclass(frozen=True)
class Life:
    """One job as the accounting knows it: its stage, its highest token and live lease, its story."""

    stage: str
    token: int = -1  # the highest fencing token a claim handed out (-1: never claimed)
    lease: int | None = None  # the live lease's token while active
    events: tuple[str, ...] = ()

    def then(self, event: str, stage: str | None = None, *, token: int | None = None,
             lease: int | bool | None = False, reset: bool = False) -> Life:  # fmt: skip
        """This life after `event` (lease False: unchanged; token: the highest, unless `reset`)."""
        return Life(
            self.stage if stage is None else stage,
            self.token if token is None else (token if reset else max(self.token, token)),
            self.lease if lease is False else lease,
            (*self.events[-(LIFE_KEPT - 1) :], event),
        )

    def story(self) -> str:
        return ", ".join(self.events)


Lives = immutables.Map[tuple[bytes, bytes], Life]


@dataclass(frozen=True)
class Accounts:
    """Every followed job's life, by (queue, id); a value (`follow` returns a new one)."""

    # a persistent map: a step changes a few lives of thousands without a copy of the others
    lives: Lives = field(default_factory=immutables.Map)
    # per queue, the snapshot its lives were last held to and found in place: the next step holds to
    # the keyspace only the lives the keys written since may have moved (snapshot.written_since)
    checked_on: immutables.Map[bytes, Snapshot] = field(default_factory=immutables.Map, compare=False)
    # each life's place in the order the lives began (a map keeps none): every life held to the
    # keyspace goes in that order, so that findings are worded in the same order run after run
    born: immutables.Map[tuple[bytes, bytes], int] = field(default_factory=immutables.Map, compare=False)

    def then(self, changed: dict[tuple[bytes, bytes], Life], checked_on: immutables.Map[bytes, Snapshot]) -> Accounts:
        """These accounts with the lives `changed` (a new one placed last) and `checked_on`."""
        if not changed:
            return Accounts(self.lives, checked_on, self.born)
        born = self.born
        new = [item for item in changed if item not in born]
        if new:
            placed = born.mutate()
            for item in new:
                placed[item] = len(placed)
            born = placed.finish()
        return Accounts(self.lives.update(changed), checked_on, born)


EMPTY = Accounts()
Held = Callable[[bytes, bytes], bool]  # whether a job is still followed: Ledger.held
Finder = Callable[[str, bytes, str, "Life | None"], None]
_REFUSED = (ErrorReply, Refused)


@lru_cache(maxsize=1024)
def _set_keys(queue: bytes) -> tuple[tuple[str, bytes], ...]:
    """Each set's name and key of one queue (the check looks them up for every followed job)."""
    layout = Layout(queue)
    return tuple((name, layout.key(name)) for name in SETS)


def stages_of(snapshot: Snapshot, layout: Layout, job: bytes) -> list[str]:
    """The sets that hold the job, in SETS order."""
    found = []
    get = snapshot.get
    for name, key in _set_keys(layout.queue):
        entry = get(key)
        if entry is not None and entry.kind == "zset" and isinstance(entry.value, Mapping) and job in entry.value:
            found.append(name)
    return found


def _score(snapshot: Snapshot, key: bytes, job: bytes) -> float | None:
    entry = snapshot.get(key)
    if entry is None or entry.kind != "zset" or not isinstance(entry.value, Mapping) or job not in entry.value:
        return None
    try:
        return float(entry.value[job])
    except ValueError:
        return None


def _field(snapshot: Snapshot, key: bytes, name: bytes) -> bytes | None:
    entry = snapshot.get(key)
    if entry is None or entry.kind != "hash" or not isinstance(entry.value, dict):
        return None
    return entry.value.get(name)


def _int(raw: object) -> int | None:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, bytes) and raw.lstrip(b"-").isdigit():
        return int(raw)
    return None


def paused(snapshot: Snapshot, layout: Layout) -> bool:
    """The queue's meta says paused (any value of `paused`: the host's read and the module's)."""
    return _field(snapshot, layout.meta, b"paused") is not None


def follow(
    accounts: Accounts,
    held: Callable[[bytes, bytes], bool],
    resolved: Resolved,
    before: Snapshot,
    reply: Reply,
    after: Snapshot,
    now_ms: int,
    *,
    exempt: Epochs | None = None,
    run_id: bytes | None = None,
    decided_late: bool = False,
) -> tuple[Accounts, list[str]]:
    """One executor's step accounted: the accounts after it, and each finding (`accounting:<name>: ...`).

    `held(queue, id)`: whether the job is still followed (the ledger's taints). `exempt`, `run_id`:
    the native side's lease epochs before the step and its run_id (a sweep's expired lease whose
    epoch is not the run_id is exempt, D7: recovered without a stall); None for the scripts.
    `decided_late`: the claim decided on a `paused?` read made earlier (the Lua host's split claim,
    D1), so pause is not held against it."""
    if resolved.is_raw:
        return rewritten(accounts, resolved.step.command, resolved.index), []  # type: ignore[union-attr]
    guarded, transition = resolved.guarded, resolved.transition
    if guarded is None or transition is None or not resolved.sends_transition:
        return accounts, []
    layout, queue = guarded.layout, guarded.layout.queue
    verb = transition.verb
    if isinstance(reply, _REFUSED):
        return accounts, []  # nothing moved: the keyspace check below would see the same as before
    step = _Step(accounts.lives, held, queue, f"#{resolved.index} {verb}")
    if verb is Verb.ENQUEUE and reply == 1:
        _enqueued(step, guarded)
    elif verb is Verb.CLAIM and isinstance(reply, list) and reply:
        _claimed(step, layout, reply, before, after, decided_late)
    elif transition.fenced and reply not in (0, None):
        _fenced(step, verb, guarded, reply)
    elif verb is Verb.REVIVE and reply == 1:
        _revived(step, guarded.job)
    if after is not before or step.changed:
        _held_to_keyspace(step, verb, layout, before, after, now_ms, exempt, run_id,
                          accounts.checked_on.get(queue), accounts.born)  # fmt: skip
        checked_on = accounts.checked_on.set(queue, after)
    elif not step.changed:
        return accounts, step.findings
    else:
        checked_on = accounts.checked_on
    return accounts.then(step.changed, checked_on), step.findings


class _Step:
    """One step's accounting under way: the lives before it, those it changed, what it found."""

    __slots__ = ("at", "changed", "findings", "held", "lives", "queue")

    def __init__(self, lives: Lives, held: Held, queue: bytes, at: str) -> None:
        self.lives, self.held, self.queue, self.at = lives, held, queue, at
        self.changed: dict[tuple[bytes, bytes], Life] = {}
        self.findings: list[str] = []

    def followed(self, job: bytes) -> Life | None:
        """The job's life so far in this step, None when it is not followed (any more)."""
        item = (self.queue, job)
        life = self.changed.get(item) or self.lives.get(item)
        return life if life is not None and self.held(self.queue, job) else None

    def find(self, name: str, job: bytes, detail: str, life: Life | None) -> None:
        at = self.at
        story = life.story() if life is not None else "never enqueued"
        if life is None or not life.events or not life.events[-1].startswith(at + " "):
            story += f", then {at}"  # (the step's own event is already the life's last)
        self.findings.append(f"accounting:{name}: {job!r} of {self.queue!r} {detail} (life: {story})")


def _enqueued(step: _Step, guarded: Guarded) -> None:
    """An ENQUEUE that answered 1: a new life, pending or delayed (again while followed: duplicated)."""
    job, queue = guarded.job, step.queue
    if step.held(queue, job):
        stage = "pending" if int(guarded.args[2]) == 0 else "delayed"
        known = step.followed(job)
        if known is not None:
            step.find("duplicated", job, f"enqueued again while {known.stage}", known)
        step.changed[(queue, job)] = Life(stage, events=(f"{step.at} -> {stage}",))


def _claimed(step: _Step, layout: Layout, reply: list[Reply], before: Snapshot, after: Snapshot,
             decided_late: bool) -> None:  # fmt: skip
    """A claim that handed out a job: from pending, not while paused, with a token above its earlier ones."""
    claimed, token = reply[0], _int(reply[2]) if len(reply) > 2 else None
    if not isinstance(claimed, bytes):
        return
    job, queue, find = claimed, step.queue, step.find
    # the token as the row stores it: the scripts' reply carries it as a Lua number, which
    # is not exact past 2^53 (contract row N5); HINCRBY's stored value is
    stored = _int(_field(after, layout.row(job), ATTEMPTS))
    token = stored if stored is not None else token
    if not decided_late and paused(before, layout):
        find("pause", job, "was claimed while the queue is paused", step.followed(job))
    life = step.followed(job)
    if life is None and step.held(queue, job) and (queue, job) not in step.lives:
        find("unexpected", job, "was claimed but never enqueued", None)
    elif life is not None:
        if life.stage == "active":
            find("duplicated", job, f"was claimed again while its lease (token {life.lease}) is held", life)
        elif life.stage != "pending":
            find("unexpected", job, f"was claimed from {life.stage}", life)
        if token is None or token <= life.token:
            find("token", job, f"was handed token {reply[2]!r}, not above its earlier {life.token}", life)
        step.changed[(queue, job)] = life.then(
            f"{step.at} token {token} -> active",
            "active",
            token=max(life.token, token if token is not None else life.token),
            lease=token,
        )


def _fenced(step: _Step, verb: Verb, guarded: Guarded, reply: Reply) -> None:
    """A fenced call (complete, fail, extend) that took effect: only by the live lease's token."""
    job, token = guarded.job, _int(guarded.args[1])
    life = step.followed(job)
    if life is None:
        return
    at, item = step.at, (step.queue, job)
    if life.stage != "active" or life.lease is None or (token != life.lease and life.lease != UNKNOWN):
        live = f"the live lease's {life.lease}" if life.stage == "active" else f"no live lease ({life.stage})"
        step.find("stale", job, f"{verb} with token {token} took effect, {live}", life)
    if verb is Verb.COMPLETE:
        step.changed[item] = life.then(f"{at} token {token} -> done", "done", lease=None)
    elif verb is Verb.FAIL and reply in (b"dead", b"retry"):
        stage = "dead" if reply == b"dead" else "delayed"
        step.changed[item] = life.then(f"{at} token {token} -> {stage}", stage, lease=None)
    else:
        step.changed[item] = life.then(f"{at} token {token}")


def _revived(step: _Step, job: bytes) -> None:
    """A REVIVE that answered 1: the job back to pending, from dead only."""
    life = step.followed(job)
    if life is not None:
        if life.stage != "dead":
            step.find("recovered", job, f"was revived from {life.stage}", life)
        step.changed[(step.queue, job)] = life.then(f"{step.at} -> pending", "pending", lease=None)


def _held_to_keyspace(step: _Step, verb: Verb, layout: Layout, before: Snapshot, after: Snapshot, now_ms: int,
                      exempt: Epochs | None, run_id: bytes | None, checked_on: Snapshot | None,
                      born: immutables.Map[tuple[bytes, bytes], int]) -> None:  # fmt: skip
    """The keyspace: every followed job of the queue where its life says (the multi-member moves of
    PROMOTE and SWEEP are read from it, each checked as the transition allows). Where the keys written
    since `checked_on` (the snapshot the queue's lives were last found in place on) are known, only
    the lives this step changed and the jobs those keys moved are looked at; should that find
    anything, every life is looked at again, as without them (the findings then worded and ordered
    as ever)."""
    candidates = _moved_since(step, layout, after, checked_on)
    if candidates is not None:
        changed, findings = dict(step.changed), list(step.findings)
        _lives_in_place(step, verb, layout, before, after, now_ms, exempt, run_id, candidates)
        if len(step.findings) == len(findings):
            step.findings.extend(_strangers(step.lives, step.changed, step.held, step.queue, layout, before, after,
                                            step.at))  # fmt: skip
            return
        step.changed, step.findings = changed, findings
    lives, changed = step.lives, step.changed
    merged = lives.update(changed) if changed else lives
    # in the order the lives began (a new one last: this step's enqueue)
    newcomers = {item: len(born) + i for i, item in enumerate(item for item in changed if item not in born)}
    everyone = sorted(merged.items(), key=lambda pair: born.get(pair[0], newcomers.get(pair[0], 0)))
    _lives_in_place(step, verb, layout, before, after, now_ms, exempt, run_id, everyone)
    step.findings.extend(_strangers(lives, step.changed, step.held, step.queue, layout, before, after, step.at))


def _moved_since(step: _Step, layout: Layout, after: Snapshot,
                 checked_on: Snapshot | None) -> list[tuple[tuple[bytes, bytes], Life]] | None:  # fmt: skip
    """The lives of the queue that may not be in place in `after` though they were in `checked_on`:
    those this step changed, and the jobs whose membership of one of the queue's sets changed since
    (None: the keys written since are not known)."""
    if len(step.lives) <= FULL_CHECK_BELOW:
        return None  # (a few lives: each looked at costs less than working out which to look at)
    written = written_since(after, checked_on) if checked_on is not None else None
    if written is None or checked_on is None:
        return None
    jobs = {job for queue, job in step.changed if queue == step.queue}
    for _, key in _set_keys(layout.queue):
        if key in written:
            jobs.update(moved_members(checked_on.get(key), after.get(key)))
    found = []
    for job in jobs:
        item = (step.queue, job)
        known = step.changed.get(item) or step.lives.get(item)
        if known is not None:
            found.append((item, known))
    return found


def _lives_in_place(step: _Step, verb: Verb, layout: Layout, before: Snapshot, after: Snapshot, now_ms: int,
                    exempt: Epochs | None, run_id: bytes | None,
                    lives: Iterable[tuple[tuple[bytes, bytes], Life]]) -> None:  # fmt: skip
    """Each of `lives` (of any queue: the step's are held) where the keyspace has it."""
    changed, find, at = step.changed, step.find, step.at
    for item, known in lives:
        if item[0] != step.queue or not step.held(*item):
            continue
        job = item[1]
        homes = stages_of(after, layout, job)
        if len(homes) == 1 and homes[0] == known.stage:
            continue
        if not homes:
            find("lost", job, f"is in no set (its life says {known.stage})", known)
            continue
        if len(homes) > 1:
            find("duplicated", job, f"is in {' and '.join(homes)}", known)
            continue
        home = homes[0]
        if verb is Verb.PROMOTE and known.stage == "delayed" and home == "pending":
            due = _score(before, layout.delayed, job)
            if due is not None and due > now_ms:
                find("unexpected", job, f"was promoted before its due time {due:.0f} (now {now_ms})", known)
            changed[item] = known.then(f"{at} -> pending", "pending")
        elif verb is Verb.SWEEP and known.stage == "active" and home in ("pending", "dead"):
            step.findings.extend(_swept(known, job, home, layout, before, after, now_ms, exempt, run_id, find))
            changed[item] = known.then(f"{at} -> {home}", home, lease=None)
        elif home == "pending" and known.stage in ("active", "dead", "done", "delayed"):
            find("recovered", job, f"went from {known.stage} to pending", known)
        else:
            find("unexpected", job, f"went from {known.stage} to {home}", known)


def rewritten(accounts: Accounts, command: tuple[bytes, ...], index: int) -> Accounts:
    """After a raw write: a followed job whose row's `attempts` another writer set or deleted has
    no known tokens any more (the next claim starts them again, and its live lease is unknown until
    then); any other write changes nothing here (what it excludes, the ledger's taints say)."""
    verb = command[0].upper() if command else b""
    if verb not in (b"HSET", b"HMSET", b"HDEL") or len(command) < 3:
        return accounts
    fields = command[2::2] if verb != b"HDEL" else command[2:]
    if ATTEMPTS not in fields:
        return accounts
    name = parse_key(command[1])
    if name is None or name.job is None:
        return accounts
    item = (name.queue, name.job)
    life = accounts.lives.get(item)
    if life is None:
        return accounts
    event = f"#{index} raw {verb.decode()} attempts"
    lease = UNKNOWN if life.stage == "active" else None
    return accounts.then({item: life.then(event, token=-1, lease=lease, reset=True)}, accounts.checked_on)


def _swept(life: Life, job: bytes, home: str, layout: Layout, before: Snapshot, after: Snapshot, now_ms: int,
           exempt: Epochs | None, run_id: bytes | None, find: Finder) -> list[str]:  # fmt: skip
    """A lease a sweep took: it must have expired, and be counted as a stall unless exempt (D7)."""
    deadline = _score(before, layout.active, job)
    if deadline is not None and deadline > now_ms:
        find("duplicated", job, f"was swept to {home} before its lease's deadline {deadline:.0f} (now {now_ms})", life)
        return []
    row = layout.row(job)
    if exempt is not None and home == "pending":
        epoch = exempt.get(row)
        if epoch is None or epoch != run_id:
            return []  # D7: a lease of another run (or none stamped) is exempt, stalled unchanged
    was, now = _int(_field(before, row, STALLED)) or 0, _int(_field(after, row, STALLED))
    if now is None or now != was + 1:
        find("stalled", job, f"was swept to {home} with stalled {was} -> {now}", life)
    return []


def _strangers(lives: Lives, changed: dict[tuple[bytes, bytes], Life], held: Held,
               queue: bytes, layout: Layout, before: Snapshot, after: Snapshot, at: str) -> list[str]:  # fmt: skip
    """Members of the queue's sets that no enqueue made and the step brought in (present before:
    already reported, or brought by what excluded them)."""
    found = []
    keys = _set_keys(queue)
    for name, key in keys:
        entry, was = after.get(key), before.get(key)
        if entry is None or entry is was or entry.kind != "zset" or not isinstance(entry.value, Mapping):
            continue
        # only a member new to the set can be a stranger (one it held before is skipped below): the
        # whole set is gone through, in its order, only when one of those is
        members = entry.value
        new = [job for job in moved_members(was, entry) if job in members]
        if not any((queue, job) not in lives and (queue, job) not in changed for job in new):
            continue
        for job in entry.value:
            item = (queue, job)
            if item in lives or item in changed or not held(queue, job):
                continue
            if any(job in (e.value if e is not None and isinstance(e.value, Mapping) else ()) for e in
                   (before.get(k) for _, k in keys)):  # fmt: skip
                continue
            found.append(f"accounting:unexpected: {job!r} of {queue!r} appeared in {name} without an enqueue "
                         f"(life: never enqueued, then {at})")  # fmt: skip
    return found


def labels(records: Iterable[Any]) -> Counter[str]:
    """`accounting:<check>` for each check a replay's records exercised (the native side's replies;
    pure, cheap): the keyspace checks (lost, duplicated, unexpected) once a followed job moved,
    `recovered` at a sweep's recovery or a revive, `stalled` at a counted stall, `token` at a job
    claimed again, `stale` at a fenced call on a claimed job, `pause` at a claim while paused."""
    reached: Counter[str] = Counter()
    enqueued: set[tuple[bytes, bytes]] = set()
    claimed: set[tuple[bytes, bytes]] = set()
    paused_queues: set[bytes] = set()
    for record in records:
        resolved = record.resolved
        guarded, transition, reply = resolved.guarded, resolved.transition, record.native_reply
        if guarded is None or transition is None or not resolved.sends_transition or isinstance(reply, _REFUSED):
            continue
        queue, verb = guarded.layout.queue, transition.verb
        if verb is Verb.PAUSE:
            paused_queues.add(queue)
        elif verb is Verb.RESUME:
            paused_queues.discard(queue)
        elif verb is Verb.ENQUEUE and reply == 1:
            enqueued.add((queue, guarded.job))
        elif verb is Verb.CLAIM:
            if queue in paused_queues:
                reached["accounting:pause"] += 1
            if isinstance(reply, list) and reply and isinstance(reply[0], bytes):
                item = (queue, reply[0])
                if item in claimed:
                    reached["accounting:token"] += 1
                claimed.add(item)
        elif transition.fenced and (queue, guarded.job) in claimed:
            reached["accounting:stale"] += 1
        elif verb is Verb.SWEEP and isinstance(reply, list) and len(reply) == 4:
            if any(isinstance(n, int) and n > 0 for n in reply[:2]):
                reached["accounting:stalled"] += 1
            if isinstance(reply[0], int) and reply[0] > 0:
                reached["accounting:recovered"] += 1
        elif verb is Verb.REVIVE and reply == 1:
            reached["accounting:recovered"] += 1
        if enqueued and reply not in (0, None, []):
            for name in ("lost", "duplicated", "unexpected"):
                reached[f"accounting:{name}"] += 1
    return reached


__all__ = ["EMPTY", "FINDINGS", "Accounts", "Life", "follow", "labels", "paused", "stages_of"]
