"""The history generator: a Hypothesis state machine with one rule per transition and per fault step.

Each rule records the step it stands for (nothing touches a server while Hypothesis draws); at the
end of a run the machine hands its `History` to `on_history`, which the campaign replays on the two
servers as one pipeline per segment, the benchmark counts, and the suite's TestCase judges. The
rules keep a rough model of the queues (`strategies/hints.py`) for their preconditions and to aim
arguments where they matter; ids come from the `jobs` bundle, the leases workers believe they hold
(id and fencing token, as CLAIM answered them) from the `leases` bundle. Every choice inside a rule
is a Hypothesis draw that shrinks towards the first option, so the shrinker minimises choices and
deletes rules, not bytes of a decoder.

Adding a transition, a fault or a class of values is one method here (docs/extending.md, "Checklist 1: a fault step").
"""

from __future__ import annotations

import copy
import gc
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Never, TypeVar, cast

from hypothesis import HealthCheck, Verbosity, settings
from hypothesis import seed as seed_of
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    consumes,
    initialize,
    multiple,
    precondition,
    rule,
)

from difftest.coverage import labels
from difftest.history.format import (
    MAX_BULK,
    MAX_MS,
    REPLICA,
    REPLICA_IGNORES,
    REPLICA_OBEYS,
    Advance,
    BeginClaim,
    Bulk,
    CallStep,
    EndClaim,
    Exec,
    History,
    MemoryLimit,
    Multi,
    Notify,
    RawWrite,
    ReplicasRequired,
    Restart,
    Step,
)
from difftest.spec import domains
from difftest.spec.calls import Call
from difftest.spec.commands import REFUSED_OVER_THE_LIMIT, TRANSITIONS, Layout, Rows
from strategies import engine
from strategies.hints import QueueHints
from strategies.pools import (
    ADVANCES,
    BACKOFFS,
    DELAYS,
    DURATIONS,
    EDGE_BYTES,
    ERRORS,
    IDS,
    LONG_ADVANCES,
    PAYLOADS,
    QUEUES,
    READ_ROWS_USER,
    TOKENS,
    USER_KINDS,
    USER_PROBES,
    USERS,
    WORKERS,
)
from strategies.shape import HistoryShape
from strategies.steps import (
    at_a_bound,
    corruption,
    edged,
    long_step,
    malformed_once_or_twice,
    reader_row,
    then,
    transition_call,
    typed_step,
    value_step,
    valued,
)
from strategies.upgrade import lua_era, via_scripts

# How often each rule runs, per about 256 steps, from what the queues hold as far as the hints know:
# work that is waiting draws the transition that does it (a corrupt set the transition that meets it;
# an open split claim PAUSE and RESUME, D1). A restart costs the servers ~12 ms and an advance ~1 ms
# until they read the new time, against ~0.1 ms for a call: both are rare enough that a campaign
# spends its time on transitions, often enough that a default campaign reaches D7.
RULE_WEIGHTS: dict[str, int | aimed | Callable[[QueueMachine], int]] = {}
# a generated history starts on the last millisecond of a second (the frozen clock's 00:00:00.999),
# so its first steps see the clock's sub-second part at 999: a conversion of the servers' TIME (seconds,
# microseconds) to milliseconds that is off at that boundary (a `/ 999` for `/ 1000`, which agrees on every
# other millisecond) is caught; from the usual .000 start the advances seldom land on .999 (a generated Lua
# mutant of the kind survived 2,760 histories, mutants/README.md)
START_MS = labels.CLOCK_ORIGINS["2026"]  # (DEFAULT_START_MS + 999: one origin, held by the labels)
# where else a history's clock may start (`clock_origin`), each on a second's last millisecond too:
# the first second of 1970, the last second before 2^31 s (2038) and before 2^32 s (2106), and a
# year before the last moment the format allows (9999); the labels are difftest/coverage/labels.py's
CLOCK_ORIGINS: dict[str, int] = {name: start for name, start in labels.CLOCK_ORIGINS.items() if start != START_MS}
DEFAULT_SHAPE = HistoryShape()


@dataclass(frozen=True)
class aimed:
    """A transition's weight by what the hints say is waiting (`transition_weights`): the rule
    choice works out all ten from one pass over the hints, and only when what they say changed."""

    verb: str


class on_shape:
    """A precondition on the history's shape alone (`HistoryShape.<flag>`): the rule choice decides
    it once per machine class and shape, not every step."""

    __slots__ = ("flag",)

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def allows(self, shape: HistoryShape) -> bool:
        return bool(getattr(shape, self.flag))

    def __call__(self, m: QueueMachine) -> bool:
        return self.allows(m.shape)


_Rule = TypeVar("_Rule", bound=Callable[..., object])  # a rule's function, as @rule left it


def weight(how_often: int | aimed | Callable[[QueueMachine], int]) -> Callable[[_Rule], _Rule]:
    """A rule's weight: a number, a transition weighted by the hints (`aimed(verb)`), or a function of
    the machine's state."""

    def record(function: _Rule) -> _Rule:
        RULE_WEIGHTS[function.__name__] = how_often
        return function

    return record


# the order a rule choice shrinks towards: the first is a plain ENQUEUE
RULE_ORDER = {name: n for n, name in enumerate((
    "enqueue", "claim", "complete", "fail", "extend", "sweep", "promote", "revive", "pause", "resume",
    "advance", "advance_to_deadline", "begin_claim", "end_claim", "corrupt", "other_writers_value",
    "wrong_typed_key", "long_lived_job", "restricted_call", "malformed_call", "upgrade", "scripts_worker_call",
    "restart", "crash", "resp3_call", "transaction", "notify", "another_database", "other_writers_ttl",
    "other_writers_fields", "server_condition", "replica_call", "long_advance", "clock_origin",
    "production_size", "bulk",
))}  # fmt: skip


VERBS = tuple(TRANSITIONS)
# Production's size (issue 37): how many calls a bulk step holds and how far a PROMOTE's or a SWEEP's
# limit reaches in a history of that size, by class (low, high, weight; uniform within a class, so
# log-uniform over all: each class weighted as its octaves), the plainest first: queues of thousands,
# batches of hundreds. A history draws them only where its size dimension is on (`production_size`,
# its first rule: about one history in twenty, so that the catalogue's size mutants are met without
# the class corpus at the default budget: docs/design-notes.md).
SIZE_CLASSES = ((2, 31, 4), (32, 255, 3), (256, 2_047, 3), (2_048, 4_095, 1))
# the bulk calls one generated history holds at most (a history's cost, whatever Hypothesis's target
# phase makes of its choices: about 5 s); queues of 10,000 and more are the class corpus's
BULK_BUDGET = 8_192
SIZE_WEIGHTS = tuple((str(n), weight) for n, (_, _, weight) in enumerate(SIZE_CLASSES))
# what a bulk step does: a producer's fill (pending, or delayed and due together), a fleet of workers
# claiming at once (leases that expire together), completing or failing what a fill brought
BULK_KINDS = (("enqueue", 3), ("claim", 3), ("complete", 2), ("fail", 2))
CLOCK_STEPS_BACK = (1, 1_000, 60_000, 3_600_000)  # how far a restart's clock may step back (ms)
# a replica's own limit where replicas run and the memory limit is on: ignored (production's
# default) twice as often as obeyed or none
REPLICA_LIMITS_DRAWN = (None, REPLICA_IGNORES, REPLICA_IGNORES, REPLICA_OBEYS)
# the verbs whose first write is deny-oom (the memory limit refuses them there)
DENY_OOM_FIRST = tuple(verb for verb in TRANSITIONS if verb in REFUSED_OVER_THE_LIMIT)
FENCED_VERBS = tuple(verb for verb, t in TRANSITIONS.items() if t.fenced)
# the transitions a transaction may hold: every one but CLAIM, whose Lua host reads `paused?` first
IN_MULTI = tuple(verb for verb, t in TRANSITIONS.items() if not t.reads_meta)
# the notify rule's flags (`notify-keyspace-events`): every event on both channels first (what it
# shrinks to), then one channel, then only the classes the transitions fire (hash and zset), then
# with new-key events and key misses (the misses set aside by the judge: reads, docs/contract-decisions.md)
NOTIFY_FLAGS = ("KEA", "KA", "EA", "Khz", "KEAnm")
# what a rule with a target returns when it adds nothing (one for all steps, not one a step)
NOTHING: MultipleResults[Never] = multiple()
CALLS = 118  # transitions per 256 steps
PLAIN_WEIGHTS = dict(domains.PLAIN_VERB_WEIGHTS)  # the command table's
PLAIN_TOTAL = sum(PLAIN_WEIGHTS.values())


# What `aimed_verb_weights` reads of the hints, each a bool: pending, active, expired, due, dead,
# paused, claims_open, done_broken, dead_broken
AimedKey = tuple[bool, bool, bool, bool, bool, bool, bool, bool, bool]


def hints_key(m: QueueMachine) -> AimedKey:
    """What the transitions' weights read of both queues' hints, in one pass (this runs every step:
    plain tests and assignments, each fact looked at no more than it must be)."""
    pending = active = expired = due = dead = paused = done_broken = dead_broken = False
    now = m.now
    for h in m.hints.values():
        if h.paused:
            paused = True  # and its pending ids wait: no CLAIM takes them
        elif h.pending:
            pending = True
        held = h.active
        if held:
            active = True
            if not expired and min(held.values()) <= now:
                expired = True
            broken = h.broken
            if broken:
                done_broken = done_broken or b"done" in broken
                dead_broken = dead_broken or b"dead" in broken
        delayed = h.delayed
        if delayed and not due and min(delayed.values()) <= now:
            due = True
        if h.dead:
            dead = True
    return (pending, active, expired, due, dead, paused, bool(m.open_claims), done_broken, dead_broken)


_AIMED: dict[Hashable, dict[str, int]] = {}  # at most 2**9 keys


def transition_weights(key: tuple[Hashable, ...]) -> dict[str, int]:
    """Every transition's weight per 256 steps for what the hints say (`hints_key`): 118 in 256 steps
    are transitions, a third by fixed weights, two thirds by `aimed_verb_weights`. A pure function of
    the key, so worked out once per key, not once per step."""
    weights = _AIMED.get(key)
    if weights is None:
        pending, active, expired, due, dead, paused, claims_open, done_broken, dead_broken = cast(AimedKey, key)
        aimed_now = dict(
            domains.aimed_verb_weights(pending=pending, active=active, expired=expired, due=due, dead=dead,
                                       paused=paused, claims_open=claims_open, done_broken=done_broken,
                                       dead_broken=dead_broken)
        )  # fmt: skip
        total = sum(aimed_now.values())
        weights = {
            v: max(1, round(CALLS * (PLAIN_WEIGHTS[v] / PLAIN_TOTAL / 3 + 2 * w / total / 3)))
            for v, w in aimed_now.items()
        }
        _AIMED[key] = weights
    return weights


class QueueDraws(engine.Draws):
    """The choices a rule makes inside its body (strategies.steps.Choices), and the queue it acts on."""

    __slots__ = ()

    def queue(self) -> bytes:
        """Mostly the first queue: transitions collide more (the second shrinks to the first)."""
        return QUEUES[1] if self.index(4) == 3 else QUEUES[0]


@dataclass(frozen=True)
class Lease:
    """A lease as a worker believes it holds it: the id CLAIM answered and its attempts (the token)."""

    queue: bytes
    job: bytes
    token: int


class QueueMachine(RuleBasedStateMachine):
    """Two queues, two workers that may split a CLAIM, restricted users, one frozen clock."""

    jobs = Bundle("jobs")
    leases = Bundle("leases")

    # what the weighted rule choice reads of the class (strategies/engine.py, `_RulePlan`)
    draws_type = QueueDraws
    aim_key = staticmethod(hints_key)
    aimed_weights = staticmethod(transition_weights)

    @classmethod
    def rule_rank(cls, name: str) -> int:
        """Where the rule comes in the order a rule choice shrinks towards (`RULE_ORDER`)."""
        return RULE_ORDER[name]

    @classmethod
    def rule_weight(cls, name: str) -> engine.Weight:
        """The rule's weight (`@weight`): a number, an aimed transition's verb, or a function."""
        how_often = RULE_WEIGHTS[name]
        return how_often.verb if isinstance(how_often, aimed) else how_often

    @classmethod
    def shape_allows(cls, precondition: object, shape: HistoryShape) -> bool | None:
        """Whether the shape alone allows the rule (`on_shape`); None: the state decides."""
        return precondition.allows(shape) if isinstance(precondition, on_shape) else None

    def __init__(
        self, shape: HistoryShape = DEFAULT_SHAPE, on_history: Callable[[History], None] | None = None
    ) -> None:
        super().__init__()
        self.shape = shape
        self.on_history = on_history
        self.steps: list[Step] = []
        self.hints = {queue: QueueHints() for queue in QUEUES}
        self.now = 0
        self.open_claims: list[str] = []
        self.calls_replica = False  # the history calls a replica (`replica_call`): replicas run for it
        self.replica_limit: str | None = None  # the replicas' own limit a server-condition block set
        self.upgraded = False  # the history's calls so far ran through the scripts (the upgrade rule ran)
        self.notifying = False  # keyspace notifications are on (the notify rule switched them)
        # leases the module's SWEEP exempts (D7), as far as the hints know: held across a restart, or
        # taken by the scripts; a caller's permissions on the rows then meet the exemption's writes
        self.exempt: dict[bytes, set[bytes]] = {queue: set() for queue in QUEUES}
        self.run_draws: QueueDraws | None = None  # the run's choices (strategies/engine.py hands them)
        engine.weigh_rules(self)
        self.db = 0  # the database the history's steps run in (`another_database`)
        self.start_ms = START_MS  # where the history's clock starts (`clock_origin`)
        # keys another writer gave a TTL, with their expiry on the machine's clock (`other_writers_ttl`)
        self.ttls: dict[tuple[bytes, bytes], int] = {}
        self.sized = False  # the history's size dimension is on (`production_size`): bulk steps, large limits
        self.fills: list[tuple[bytes, bytes, int]] = []  # each bulk ENQUEUE: its queue, ids' prefix, count
        self.bulk_calls = 0  # the calls of its bulk steps so far (at most BULK_BUDGET)

    # -- what the machine hands on ---------------------------------------------------------------

    def history(self) -> History:
        """The steps recorded so far, every split claim closed (its worker's second round trip)."""
        ended = (*self.steps, *(EndClaim(w) for w in self.open_claims))
        return History(ended, self.start_ms, users=dict(USERS) if self.shape.users else {}, db=self.db)

    def teardown(self) -> None:
        if engine.cut_short():
            return  # the run ran out of choices (an overrun): Hypothesis discards it, so no replay
        # every run Hypothesis keeps is a history, even one without a step (a run whose only rule moved
        # it to another database; on the public API, a run that stopped before its first rule): dropped,
        # such a run left a batch short of its budget, and the mutant runner's null run void (seed
        # 20261202, batch 0; on the public API, 540 histories of 600)
        if self.on_history is not None:
            self.on_history(self.history())

    # -- helpers the rules share -----------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The next lease or delay deadline more than a millisecond away, as the hints know it."""
        # plain loops, no list: the advance rule's precondition asks this every step
        after = self.now + 1
        upcoming: int | None = None
        for h in self.hints.values():
            for deadlines in (h.active, h.delayed):
                for d in deadlines.values():
                    if d > after and (upcoming is None or d < upcoming):
                        upcoming = d
        return upcoming

    def deadline_ahead(self) -> bool:
        """Whether there is a next deadline (`next_deadline() is not None`), without finding it: the
        advance rule's precondition asks every step, the rule itself only when it runs."""
        after = self.now + 1
        for h in self.hints.values():
            if (h.active and max(h.active.values()) > after) or (h.delayed and max(h.delayed.values()) > after):
                return True
        return False

    def some(self, holds: Callable[[QueueHints], bool]) -> bool:
        """Whether a queue's hints say so (the rule weights read them)."""
        return any(holds(hints) for hints in self.hints.values())

    def a_lease_is_held(self) -> bool:
        """Whether a queue's hints hold a lease (`some`, without a function per step)."""
        for hints in self.hints.values():  # noqa: SIM110 (a loop: no generator per step)
            if hints.active:
                return True
        return False

    def _wait(self, ms: int) -> None:
        """A clock advance, joined with the one just before it: one wait for the clock, not two."""
        self.now += ms
        if self.steps and isinstance(self.steps[-1], Advance) and self.steps[-1].ms >= 0:
            ms += self.steps.pop().ms  # type: ignore[union-attr]
        self.steps.append(Advance(ms))

    def _add(self, made: list[Step]) -> None:
        for step in made:
            if isinstance(step, Advance):
                self._wait(step.ms)
            else:
                self.steps.append(step)

    def _call(self, call: Call, draws: QueueDraws, user: str | None = None) -> None:
        self.steps.append(CallStep(at_a_bound(draws, call) if draws.chance(16) else call, user))

    def draws(self) -> QueueDraws:
        """The choices of the rule running now (each one Hypothesis draw): one QueueDraws for the
        whole run, handed over before its first rule runs (a run draws from one ConjectureData)."""
        assert self.run_draws is not None, "run the machine with run_machine, or engine.runnable(its class)"
        return self.run_draws

    def _fenced(self, draws: QueueDraws, lease: Lease) -> tuple[bytes, bytes, int | bytes]:
        """The queue, id and token a fenced call presents. Mostly a lease that is still held: the one
        drawn if it is, else (its worker lost it to a sweep or a restart) the one another worker
        holds now, as the hints know it; sometimes the drawn lease however stale (a zombie worker);
        sometimes an id and token of no lease at all. And one time in six, the live token's close
        neighbours (one less, one more, its leading digits, ten times it: a fence compares the
        whole number)."""
        hints = self.hints[lease.queue]
        queue, job, token = lease.queue, lease.job, lease.token
        if not hints.fenced(job, token):
            if draws.aim(4) and hints.active:
                job = draws.pick(sorted(hints.active))
                token = hints.attempts.get(job, 1)
            elif not draws.aim(3):
                return queue, edged(draws, IDS), draws.pick(TOKENS)
        if draws.chance(6):
            close = (token - 1, token + 1, str(token)[:-1] or "0", token * 10)
            return queue, job, draws.pick(close) if token >= 10 else max(token - 1, 0)
        return queue, job, token

    def _wait_for_first(self, deadlines: dict[bytes, int], draws: QueueDraws) -> None:
        """Mostly, a worker that waits until the first deadline (at it, or one after)."""
        upcoming = [d for d in deadlines.values() if d > self.now]
        if upcoming and draws.aim(3):
            self._wait(min(upcoming) - self.now + draws.pick((0, 1)))

    # -- the initial state -----------------------------------------------------------------------

    @initialize(target=jobs)
    def ids(self) -> MultipleResults[bytes]:
        """The tiny pool of ids the transitions collide on."""
        return multiple(*IDS)

    # -- one rule per transition -----------------------------------------------------------------

    @weight(aimed("ENQUEUE"))
    @rule(target=jobs, job=jobs)
    def enqueue(self, job: bytes) -> bytes | MultipleResults[bytes]:
        draws = self.draws()
        queue = draws.queue()
        new = draws.chance(12)
        if new:  # bytes at an edge: empty, spaces, CR/LF, NUL, invalid UTF-8, braces, large
            job = bytes(draws.pick(EDGE_BYTES))
        delay = draws.pick(DELAYS)
        self.hints[queue].enqueue(job, self.now, delay)
        self._call(Call.of("ENQUEUE", queue, job, valued(draws, PAYLOADS), delay), draws)
        return job if new else NOTHING

    @weight(aimed("CLAIM"))
    @rule(target=leases)
    def claim(self) -> Lease | MultipleResults[Lease]:
        draws = self.draws()
        queue = draws.queue()
        hints = self.hints[queue]
        lease_ms = draws.pick(DURATIONS)
        taken = None if hints.paused or not hints.pending else hints.head()
        hints.claim(self.now, lease_ms)
        self.exempt[queue].discard(taken or b"")
        self._call(Call.of("CLAIM", queue, lease_ms), draws)
        return Lease(queue, taken, hints.attempts.get(taken, 1)) if taken is not None else NOTHING

    @weight(aimed("EXTEND"))
    @rule(lease=leases)
    def extend(self, lease: Lease) -> None:
        draws = self.draws()
        queue, job, token = self._fenced(draws, lease)
        lease_ms = draws.pick(DURATIONS)
        if isinstance(token, int):
            self.hints[queue].extend(job, token, self.now, lease_ms)
            self.exempt[queue].discard(job)  # re-stamped, if the fence held
        self._call(Call.of("EXTEND", queue, job, token, lease_ms), draws)

    @weight(aimed("COMPLETE"))
    @rule(lease=consumes(leases))
    def complete(self, lease: Lease) -> None:
        draws = self.draws()
        queue, job, token = self._fenced(draws, lease)
        if isinstance(token, int):
            self.hints[queue].complete(job, token)
        self._call(Call.of("COMPLETE", queue, job, token), draws)

    @weight(aimed("FAIL"))
    @rule(lease=consumes(leases))
    def fail(self, lease: Lease) -> None:
        draws = self.draws()
        queue, job, token = self._fenced(draws, lease)
        hints = self.hints[queue]
        max_attempts, backoff = draws.integer(1, 3), draws.pick(BACKOFFS)
        if isinstance(token, int) and token >= 1 and (draws.chance(3) or (b"dead" in hints.broken and draws.aim(2))):
            # exactly exhausted (the dead-letter path and its boundary), or one short of it
            max_attempts = token + 1 if token >= 10 and draws.chance(2) else token
        if isinstance(token, int):
            hints.fail(job, token, max_attempts, self.now, backoff)
        self._call(Call.of("FAIL", queue, job, token, valued(draws, ERRORS), max_attempts, backoff), draws)

    @weight(aimed("PROMOTE"))
    @rule()
    def promote(self) -> None:
        draws = self.draws()
        queue = draws.queue()
        limit = draws.integer(1, 3)
        if self.sized:  # a batch of hundreds or thousands: mostly every job due
            due = sum(1 for deadline in self.hints[queue].delayed.values() if deadline <= self.now)
            if due > 3 and draws.aim(4):
                limit = due + draws.pick((0, 1))
            elif draws.chance(2):
                limit = self._size(draws)
        self.hints[queue].promote(self.now, limit)
        self._call(Call.of("PROMOTE", queue, limit), draws)

    @weight(aimed("SWEEP"))
    @rule()
    def sweep(self) -> None:
        draws = self.draws()
        queue = draws.queue()
        hints = self.hints[queue]
        max_stalled, limit = draws.integer(1, 3), draws.integer(1, 3)
        expired = sum(1 for deadline in hints.active.values() if deadline <= self.now)
        if self.sized:  # a batch of hundreds or thousands: mostly every lease expired
            if expired > 3 and draws.aim(4):
                limit = expired + draws.pick((0, 1))
            elif draws.chance(2):
                limit = self._size(draws)
        if expired >= 2 and draws.chance(2):
            limit = expired - 1  # fewer than are expired: the limit is what stops the sweep
        # a sweeper whose permissions on the rows are restricted, now and then, where an expired lease
        # is one the module exempts: the exemption's row write meets them (D7 held to the caller's
        # permissions); ordinary sweeps otherwise take such leases long before a restricted caller
        exempting = self.shape.users and any(hints.active.get(j, self.now + 1) <= self.now for j in self.exempt[queue])
        user = domains.acl_user(domains.ROWS_KEY, draws.pick(domains.PERMS)) if exempting and draws.chance(4) else None
        hints.sweep(self.now, max_stalled, limit)
        self._call(Call.of("SWEEP", queue, max_stalled, limit), draws, user)

    @weight(aimed("REVIVE"))
    @rule(job=jobs)
    def revive(self, job: bytes) -> None:
        draws = self.draws()
        queue = draws.queue()
        dead = sorted(self.hints[queue].dead)
        if dead and draws.aim(2):
            job = draws.pick(dead)
        self.hints[queue].revive(job, self.now)
        self._call(Call.of("REVIVE", queue, job), draws)

    @weight(aimed("PAUSE"))
    @rule()
    def pause(self) -> None:
        draws = self.draws()
        queue = draws.queue()
        self.hints[queue].paused = True
        self._call(Call.of("PAUSE", queue), draws)

    @weight(aimed("RESUME"))
    @rule()
    def resume(self) -> None:
        draws = self.draws()
        queue = draws.queue()
        self.hints[queue].paused = False
        self._call(Call.of("RESUME", queue), draws)

    # -- the clock -------------------------------------------------------------------------------

    @weight(13)
    @rule(ms=st.sampled_from(ADVANCES))
    def advance(self, ms: int) -> None:
        self._wait(ms)

    @weight(2)
    @precondition(lambda self: self.start_ms + self.now + LONG_ADVANCES[-1] <= MAX_MS)
    @rule(ms=st.sampled_from(LONG_ADVANCES))
    def long_advance(self, ms: int) -> None:
        """The clock moved by five seconds, a minute, an hour, a day or a week: a worker paused by a deploy, a
        queue left over a weekend; every lease and delay is long past."""
        self._wait(ms)

    @weight(4)
    @precondition(lambda self: not self.steps and self.start_ms == START_MS)
    @rule(origin=st.sampled_from(tuple(CLOCK_ORIGINS)))
    def clock_origin(self, origin: str) -> None:
        """The history's clock starts elsewhere than in 2026 (CLOCK_ORIGINS: 1970, just before 2^31 and
        2^32 seconds, the year 9999), so that scores, deadlines and the millisecond conversion meet
        the numbers production's clocks show and cross. A producer enqueues there at once."""
        self.start_ms = CLOCK_ORIGINS[origin]
        draws = self.draws()
        queue = draws.queue()
        self._call(transition_call(draws, "ENQUEUE", queue, self.hints[queue], self.now), draws)

    # -- production's size -----------------------------------------------------------------------

    def _size(self, draws: QueueDraws, most: int = MAX_BULK) -> int:
        """A bulk's count or a batch's limit: a size class (SIZE_CLASSES), then a number in it."""
        low, high, _ = SIZE_CLASSES[int(draws.weighted(SIZE_WEIGHTS))]
        return max(1, min(draws.integer(low, high), most))

    def _bulk(self, template: Call, count: int) -> None:
        """A bulk step of at most the calls left of the history's BULK_BUDGET."""
        count = min(count, BULK_BUDGET - self.bulk_calls)
        self.bulk_calls += count
        self.steps += Bulk(template, count).steps()

    def _fill(self, draws: QueueDraws, queue: bytes) -> None:
        """A producer's bulk ENQUEUE of fresh ids (`f<n>.<i>`): pending, or delayed and due together."""
        count = self._size(draws, BULK_BUDGET - self.bulk_calls)
        prefix = b"f%d." % len(self.fills)
        delay = draws.pick(DELAYS)
        hints = self.hints[queue]
        for part in range(count):
            hints.enqueue(prefix + str(part).encode(), self.now, delay)
        self.fills.append((queue, prefix, count))
        self._bulk(Call.of("ENQUEUE", queue, prefix, edged(draws, PAYLOADS), delay), count)

    @weight(12)
    @precondition(lambda self: not self.steps and not self.sized)
    @precondition(on_shape("sizes"))
    @rule()
    def production_size(self) -> None:
        """The history is one at production's size: it opens with a producer's bulk ENQUEUE of up to
        thousands of jobs, and draws bulk steps and batches of hundreds to thousands from here on."""
        self.sized = True
        draws = self.draws()
        self._fill(draws, draws.queue())

    @weight(12)
    @precondition(lambda self: self.sized and self.bulk_calls < BULK_BUDGET)
    @rule()
    def bulk(self) -> None:
        """A bulk step: a fill, a fleet's CLAIMs (leases expiring together), or COMPLETEs or FAILs of
        a fill's ids with the token a first claim gave them (those it did not claim: fenced)."""
        draws = self.draws()
        queue = draws.queue()
        hints = self.hints[queue]
        # a backlog draws a fleet sized for it, mostly (its leases expire together: a SWEEP's batch)
        kind = "claim" if len(hints.pending) > 3 and draws.aim(2) else draws.weighted(BULK_KINDS)
        fills = [fill for fill in self.fills if fill[0] == queue]
        if kind == "enqueue" or (kind in ("complete", "fail") and not fills):
            self._fill(draws, queue)
            return
        if kind == "claim":  # mostly as many as are pending: a fleet sized for the backlog
            count = len(hints.pending) if hints.pending and draws.aim(2) else self._size(draws)
            count, lease_ms = min(count, MAX_BULK), draws.pick(DURATIONS)
            count = min(count, BULK_BUDGET - self.bulk_calls)
            hints.claim_many(self.now, lease_ms, count)
            self._bulk(Call.of("CLAIM", queue, lease_ms), count)
            return
        _, prefix, filled = draws.pick(fills)
        count = self._size(draws, min(filled, BULK_BUDGET - self.bulk_calls))
        ids = [prefix + str(part).encode() for part in range(count)]
        if kind == "complete":
            for job in ids:
                hints.complete(job, 1)
            template = Call.of("COMPLETE", queue, prefix, 1)
        else:
            max_attempts, backoff = draws.integer(1, 2), draws.pick(BACKOFFS)
            for job in ids:
                hints.fail(job, 1, max_attempts, self.now, backoff)
            template = Call.of("FAIL", queue, prefix, 1, edged(draws, ERRORS), max_attempts, backoff)
        self._bulk(template, count)

    @weight(25)
    @precondition(deadline_ahead)  # the function itself: one call a step, not two
    @rule(off_by=st.sampled_from((0, -1, 1)))
    def advance_to_deadline(self, off_by: int) -> None:
        """To the next lease or delay deadline: at it, one before, or one after."""
        upcoming = self.next_deadline()
        assert upcoming is not None  # the precondition
        self._wait(upcoming - self.now + off_by)

    # -- faults ----------------------------------------------------------------------------------

    @weight(1)
    @precondition(on_shape("upgrades"))
    @precondition(lambda self: not self.upgraded and bool(self.steps))
    @rule()
    def upgrade(self) -> None:
        """The module takes over on the native server here: every call so far ran through the scripts
        on both servers (rows without `lease_epoch` in every set), every call from now on runs on it
        (about one history in seven; docs/contract-decisions.md, "Upgrades and the mixed fleet")."""
        self.steps = lua_era(self.steps)
        self.upgraded = True
        for q in QUEUES:
            self.exempt[q] |= set(self.hints[q].active)

    @weight(4)
    @precondition(on_shape("upgrades"))
    @rule(verb=st.sampled_from(VERBS))
    def scripts_worker_call(self, verb: str) -> None:
        """A mixed fleet: during a rolling upgrade a worker still calls the scripts on the native
        server, beside workers that call the module (mostly with a lease it holds)."""
        draws = self.draws()
        queue = draws.queue()
        active = self.hints[queue].active
        held = draws.pick(sorted(active)) if TRANSITIONS[verb].fenced and active and draws.aim(4) else None
        hints = self.hints[queue]
        taken = hints.head() if verb == "CLAIM" and hints.pending and not hints.paused else None
        call = transition_call(draws, verb, queue, hints, self.now, held)
        self.steps.append(via_scripts(CallStep(call)))
        if taken is not None:
            self.exempt[queue].add(taken)  # no lease_epoch: the module's SWEEP exempts it

    @weight(3)
    @rule(verb=st.sampled_from(VERBS))
    def resp3_call(self, verb: str) -> None:
        """A worker whose connection speaks RESP3 (HELLO 3): its replies compared with their RESP3
        types on both servers (mostly with a lease some worker holds)."""
        draws = self.draws()
        queue = draws.queue()
        hints = self.hints[queue]
        held = draws.pick(sorted(hints.active)) if TRANSITIONS[verb].fenced and hints.active and draws.aim(4) else None
        taken = hints.head() if verb == "CLAIM" and hints.pending and not hints.paused else None
        call = transition_call(draws, verb, queue, hints, self.now, held)
        self.steps.append(CallStep(call, protocol=3))
        if taken is not None:
            self.exempt[queue].discard(taken)  # stamped by the module's CLAIM

    @weight(2)
    @precondition(on_shape("transactions"))
    @rule()
    def transaction(self) -> None:
        """One to three transitions sent inside MULTI/EXEC on both servers, each compared as its
        element of EXEC's reply (mostly with a lease some worker holds)."""
        draws = self.draws()
        queue = draws.queue()
        hints = self.hints[queue]
        calls = draws.integer(1, 3)
        # one in four (where the world has server conditions): the memory limit or writes denied
        # switched on between MULTI and EXEC, before the call at `switch_at` is queued, lifted after
        # EXEC (the server checks queued commands when queued, and all of them at EXEC); the hints
        # then stay (which calls wrote is the servers' to say)
        switch: Callable[[bool], Step] | None = None
        if self.shape.memory and draws.chance(4):
            switch = draws.pick((MemoryLimit, ReplicasRequired))
            hints = copy.deepcopy(hints)
        switch_at = draws.integer(0, calls) if switch is not None else -1
        # one in four on a RESP3 connection (every call in it, and EXEC's reply, in RESP3's types)
        self.steps.append(Multi(protocol=3 if draws.chance(4) else 2))
        for position in range(calls + 1):
            if position == switch_at and switch is not None:
                self.steps.append(switch(True))
            if position == calls:
                break
            verb = draws.pick(IN_MULTI)
            fenced = TRANSITIONS[verb].fenced and hints.active and draws.aim(4)
            held = draws.pick(sorted(hints.active)) if fenced else None
            self.steps.append(CallStep(transition_call(draws, verb, queue, hints, self.now, held)))
        self.steps.append(Exec())
        if switch is not None:
            self.steps.append(switch(False))

    def _condition_call(self, draws: QueueDraws, queue: bytes, refused: frozenset[str] | None,
                        verbs: tuple[str, ...] = VERBS) -> Call:  # fmt: skip
        """A transition of any of `verbs`, mostly with a lease some worker holds; the hints move unless
        the verb is `refused` (None: every verb, none writes; the memory limit refuses the verbs whose
        first write grows the keyspace, `REFUSED_OVER_THE_LIMIT`)."""
        hints = self.hints[queue]
        verb = draws.pick(verbs)
        written = refused is not None and verb not in refused
        held = draws.pick(sorted(hints.active)) if TRANSITIONS[verb].fenced and hints.active and draws.aim(4) else None
        taken = hints.head() if verb == "CLAIM" and hints.pending and not hints.paused and written else None
        call = transition_call(draws, verb, queue, hints if written else copy.deepcopy(hints), self.now, held)
        if taken is not None:
            self.exempt[queue].discard(taken)  # stamped by the module's CLAIM
        return call

    # (in another database, eight times as often: a condition block there is a pair of conditions)
    @weight(lambda self: 8 if self.db or self.calls_replica else 1)
    @precondition(on_shape("memory"))
    @rule()
    def server_condition(self) -> None:
        """Server conditions that refuse scripts at their first write, switched on together on both
        servers, one to three meetings with them, then lifted. Half the blocks the memory limit alone
        (maxmemory below the used memory, noeviction: draining goes on, growth is refused), a quarter
        every write denied for want of replicas (min-replicas-to-write: NOREPLICAS wherever a
        transition would write), a quarter both at once (which refusal wins: docs/contract-decisions.md,
        "Two refusals at once"). Each meeting is a call as the admin, or by a restricted user, or on a
        RESP3 connection, or a transaction of one or two calls (where a PAUSE or RESUME refused when
        queued discards the whole transaction)."""
        draws = self.draws()
        queue = draws.queue()
        which = draws.integer(0, 3)
        memory, denied = which != 2, which >= 2
        if draws.chance(4):
            # another writer's hash where the module's gate asks whether writes are denied (its probe,
            # SETRANGE emq:{q}:probe 0 "", answers WRONGTYPE then): the gate must not take that for a denial
            self.steps.append(RawWrite((b"HSET", Layout(queue).base + b"probe", b"owner", b"ops")))
        # where replicas run, they have a limit of their own a third of the time, ignored (as production's
        # replicas do by default) or obeyed, and a meeting may be a call to the replica
        replica_limit = draws.pick(REPLICA_LIMITS_DRAWN) if memory and self.calls_replica else None
        switches: tuple[Callable[[bool], Step], ...] = (
            *((lambda on: MemoryLimit(on, replica_limit if on else None),) if memory else ()),
            *((ReplicasRequired,) if denied else ()),
        )  # fmt: skip
        self.steps.extend(switch(True) for switch in switches)
        self.replica_limit = replica_limit
        # over the limit alone the verbs whose first write grows the keyspace are refused; with writes
        # denied every verb is, wherever it would write (None: the hints move for none)
        refused = REFUSED_OVER_THE_LIMIT if memory and not denied else None
        for _ in range(draws.integer(1, 3)):
            self._meet_condition(draws, queue, refused)
        self.steps.extend(switch(False) for switch in switches)
        self.replica_limit = None

    def _meet_condition(self, draws: QueueDraws, queue: bytes, refused: frozenset[str] | None) -> None:
        """One meeting with the server conditions on: a call as the admin (half the time), by a
        restricted user of any permission class, on RESP3, or inside a transaction; the hints move
        only for an admin's call the conditions let write."""
        # (where the replicas obey a limit of their own, a meeting goes to them one time in two)
        obeyed = self.replica_limit == REPLICA_OBEYS
        how = draws.integer(6, 9) if obeyed and draws.chance(2) else draws.integer(0, 9 if self.calls_replica else 5)
        verbs: tuple[str, ...]
        if how >= 6:  # a worker pointed at the replica: nothing written there, the hints stay
            # under a limit, one time in two a verb whose first write is deny-oom (where the replica's
            # own limit, obeyed or ignored, decides between OOM and READONLY)
            verbs = DENY_OOM_FIRST if self.replica_limit is not None and draws.chance(2) else VERBS
            self.steps.append(CallStep(self._condition_call(draws, queue, None, verbs), target=REPLICA))
        elif how == 3 and self.shape.users:
            if draws.aim(2):
                # the one first write on a key the module checks itself (ENQUEUE's row), by a caller who
                # may only read it: the memory limit and the ACL meet at that write (which wins)
                user, verbs = READ_ROWS_USER, ("ENQUEUE",)
            else:
                user, verbs = domains.acl_user(draws.pick(USER_KINDS), draws.pick(domains.PERMS)), VERBS
            protocol = 3 if draws.chance(4) else 2
            self.steps.append(CallStep(self._condition_call(draws, queue, None, verbs), user, protocol=protocol))
        elif how == 4:
            self.steps.append(CallStep(self._condition_call(draws, queue, refused), protocol=3))
        elif how == 5 and self.shape.transactions:
            self.steps.append(Multi(protocol=3 if draws.chance(4) else 2))
            for _ in range(draws.integer(1, 2)):
                self.steps.append(CallStep(self._condition_call(draws, queue, None, IN_MULTI)))
            self.steps.append(Exec())
        else:
            self.steps.append(CallStep(self._condition_call(draws, queue, refused)))

    @weight(12)
    @precondition(on_shape("replica_calls"))
    @precondition(lambda self: self.calls_replica or not self.steps)  # a replica call first, or none
    @rule()
    def replica_call(self) -> None:
        """A worker whose call goes to its server's read-only replica: refused where the script would
        write, answered where it would not, nothing written there (docs/contract-decisions.md, "A read-only
        replica as a call target"). Replicas start only for the histories that call one: this history
        draws its first such call as its first step (about one in sixteen), then more now and then."""
        draws = self.draws()
        queue = draws.queue()
        self.calls_replica = True
        # one time in three on a RESP3 connection
        protocol = 3 if draws.chance(3) else 2
        if self.steps and self.shape.transactions and draws.chance(3):
            # a transaction sent to the replica: a PAUSE or RESUME in it is refused when queued
            self.steps.append(Multi(target=REPLICA, protocol=protocol))
            for _ in range(draws.integer(1, 2)):
                self.steps.append(CallStep(self._condition_call(draws, queue, None, IN_MULTI)))
            self.steps.append(Exec())
            return
        call = CallStep(self._condition_call(draws, queue, None), target=REPLICA, protocol=protocol)
        if self.shape.memory and self.steps and draws.chance(4):
            # one in four under the memory limit with the replicas' own limit, ignored or obeyed (the
            # replica answers READONLY or OOM first)
            limit = MemoryLimit(True, draws.pick((REPLICA_IGNORES, REPLICA_OBEYS)))
            self.steps.extend((limit, call, MemoryLimit(False)))
            return
        self.steps.append(call)

    @weight(12)
    @precondition(on_shape("interleaving"))
    @precondition(lambda self: len(self.open_claims) < len(WORKERS))
    @rule()
    def begin_claim(self) -> None:
        """A worker's CLAIM split in two round trips: the host's paused read now, the claim later."""
        draws = self.draws()
        queue = draws.queue()
        worker = draws.pick(tuple(w for w in WORKERS if w not in self.open_claims))
        self.open_claims.append(worker)
        self.steps.append(BeginClaim(worker, transition_call(draws, "CLAIM", queue, self.hints[queue], self.now)))

    @weight(12)
    @precondition(lambda self: bool(self.open_claims))
    @rule()
    def end_claim(self) -> None:
        draws = self.draws()
        worker = draws.pick(tuple(self.open_claims))
        self.open_claims.remove(worker)
        self.steps.append(EndClaim(worker))

    def _restart(self, draws: QueueDraws, crash: bool, queue: bytes) -> None:
        self.steps += [EndClaim(w) for w in self.open_claims]
        self.open_claims.clear()
        self.steps.append(Restart(crash=crash))
        if draws.chance(4):
            # restarted onto a clock that stepped back (NTP): a millisecond, a second, a minute or an
            # hour behind the one the server left (never before 1970); leases and delays then run longer
            back = min(draws.pick(CLOCK_STEPS_BACK), self.now)
            if back:
                self.steps.append(Advance(-back))
                self.now -= back
        self.exempt = {q: set(self.hints[q].active) for q in QUEUES}
        active = self.hints[queue].active
        if active and draws.chance(3):
            # a worker that held a lease across the restart renews it (N1: the new run_id)
            held = draws.pick(sorted(active))
            self.steps.append(CallStep(transition_call(draws, "EXTEND", queue, self.hints[queue], self.now, held)))
            self.exempt[queue].discard(held)

    @weight(3)
    @precondition(on_shape("restarts"))
    @rule()
    def restart(self) -> None:
        """The native server shuts down and starts again from its AOF (a new run_id); the Lua server,
        the reference, keeps its keyspace (docs/design-notes.md, "A restart restarts the native server")."""
        draws = self.draws()
        queue = draws.queue()
        self._restart(draws, False, queue)

    @weight(3)
    @precondition(on_shape("crashes"))
    @rule()
    def crash(self) -> None:
        """The native server killed (SIGKILL) and started again from its AOF (the Lua server runs on)."""
        draws = self.draws()
        queue = draws.queue()
        self._restart(draws, True, queue)

    @weight(lambda self: 4 if self.calls_replica or self.db else 1)  # (more often beside a replica or a database)
    @precondition(on_shape("notifications"))
    @rule()
    def notify(self) -> None:
        """Keyspace notifications switched on both servers (mostly every event on both channels), or
        off again: from there each step's events are compared (docs/contract-decisions.md, "Keyspace
        notifications"). Rare: a step under them costs a marker and a subscriber's read a side."""
        draws = self.draws()
        self.notifying = not self.notifying
        self.steps.append(Notify(draws.pick(NOTIFY_FLAGS) if self.notifying else ""))

    @weight(14)
    @precondition(on_shape("corruption"))
    @rule()
    def corrupt(self) -> None:
        """Another writer breaks a key: a wrong type, a counter, a ghost member, a dropped row."""
        draws = self.draws()
        queue = draws.queue()
        self.steps.append(corruption(draws, queue, self.hints[queue]))

    @weight(14)
    @precondition(on_shape("corruption"))
    @rule()
    def other_writers_value(self) -> None:
        """A value another writer left in a field (or a score) a transition reads, then that one."""
        draws = self.draws()
        queue = draws.queue()
        self._add(value_step(draws, queue, self.hints[queue], self.now))

    @weight(9)
    @precondition(on_shape("corruption"))
    @rule()
    def wrong_typed_key(self) -> None:
        """A key a transition writes made of another type, then that transition."""
        draws = self.draws()
        queue = draws.queue()
        self._add(typed_step(draws, queue, self.hints[queue], self.now))

    @weight(6)
    @precondition(on_shape("corruption"))
    @precondition(a_lease_is_held)
    @rule()
    def long_lived_job(self) -> None:
        """Counters past one digit (what many cycles of claim, fail, sweep and revive leave), then
        the transition that reads them, on a queue where a lease is held."""
        draws = self.draws()
        queue = draws.queue()
        if not self.hints[queue].active:
            queue = next(q for q in QUEUES if self.hints[q].active)
        self._add(long_step(draws, queue, self.hints[queue], self.now))

    @weight(17)
    @precondition(on_shape("users"))
    @rule()
    def restricted_call(self) -> None:
        """A caller restricted on one key kind (none, read only, write only), mostly calling what
        reaches that key, with a held token where it needs one."""
        draws = self.draws()
        queue = draws.queue()
        user = domains.acl_user(draws.pick(USER_KINDS), draws.pick(domains.PERMS))
        probes = USER_PROBES.get(user, ())
        exempting = [q for q in QUEUES if self.exempt[q] & self.hints[q].active.keys()]
        if "SWEEP" in probes and exempting and draws.aim(2):
            # a lease the module's SWEEP exempts: its writes (pending, the row) meet the caller's
            # permissions (D7 held to the caller's permissions, docs/contract-decisions.md)
            verb, queue = "SWEEP", exempting[0]
        else:
            verb = draws.pick(probes) if probes and draws.aim(2) else draws.pick(VERBS)
        fenced = TRANSITIONS[verb].fenced
        if (fenced or verb == "SWEEP") and not self.hints[queue].active:
            queue = next((q for q in QUEUES if self.hints[q].active), queue)
        hints = self.hints[queue]
        if verb == "SWEEP" and not hints.active and not hints.paused and draws.aim(2):
            # no lease to meet: a worker takes one first, enqueued first if need be (the sweep below
            # waits for it to expire); without this most restricted sweeps met nothing at all
            if not hints.pending:
                self._call(transition_call(draws, "ENQUEUE", queue, hints, self.now), draws)
            self._call(transition_call(draws, "CLAIM", queue, hints, self.now), draws)
        active = hints.active
        held = draws.pick(sorted(active)) if fenced and active else None
        if verb == "SWEEP" and active:
            exempt = [active[j] for j in self.exempt[queue] if j in active]
            first = min(exempt or active.values())  # the caller's permissions meet an expired lease
            if first > self.now:
                self._wait(first - self.now)
        call = transition_call(draws, verb, queue, self.hints[queue], self.now, held)
        # one time in four on a RESP3 connection: the permission and the protocol meet
        self.steps.append(CallStep(call, user, protocol=3 if draws.chance(4) else 2))

    @weight(10)
    @precondition(on_shape("malformed"))
    @rule(verb=st.sampled_from(VERBS))
    def malformed_call(self, verb: str) -> None:
        """A call with one thing wrong: its shape, a key's layout, an integer's grammar; one time in
        three a second thing too (the guards' order says which refusal wins)."""
        draws = self.draws()
        queue = draws.queue()
        call = malformed_once_or_twice(draws, transition_call(draws, verb, queue, self.hints[queue], self.now))
        self.steps.append(CallStep(call))

    # -- where production runs: another database, other writers' TTLs and fields ------------------

    @weight(12)
    @precondition(lambda self: not self.steps and not self.db)
    @rule()
    def another_database(self) -> None:
        """The queues live in a database other than 0: every step of the history runs there on both
        servers, the workers', the users' and the harness's connections alike (the header's `db`);
        the walks cover every database, so a write that lands in another is a divergence. A producer
        enqueues there at once: the run holds a step even if this is its only rule."""
        draws = self.draws()
        self.db = draws.pick(OTHER_DATABASES)
        queue = draws.queue()
        self._call(transition_call(draws, "ENQUEUE", queue, self.hints[queue], self.now), draws)
        if self.shape.replica_calls and draws.chance(3):
            # one in three such histories calls a replica there too (the replica's connection selects it)
            self.calls_replica = True
            self.steps.append(CallStep(self._condition_call(draws, queue, None), target=REPLICA))
        if self.shape.notifications and draws.chance(4):
            # one in four with keyspace notifications on from the start (the subscriber's database too)
            self.notifying = True
            self.steps.append(Notify(draws.pick(NOTIFY_FLAGS)))

    @weight(6)
    @precondition(on_shape("corruption"))
    @rule()
    def other_writers_ttl(self) -> None:
        """Another writer gives a key a transition reaches a TTL (PEXPIRE, PEXPIREAT) or takes one
        away (PERSIST); mostly the clock then runs to its expiry (at it: still there; one past: gone,
        on both servers' frozen clock) and that transition runs: each must keep, drop or meet the TTL
        as the scripts do (docs/contract-decisions.md, "Keys with a TTL")."""
        draws = self.draws()
        queue = draws.queue()
        hints = self.hints[queue]
        verb = draws.pick(VERBS)
        key, job = self._reached_key(draws, verb, queue)
        held = [k for k in self.ttls if k[0] == queue]
        if held and draws.chance(3):
            _, key = draws.pick(held)
            del self.ttls[(queue, key)]
            self.steps.append(RawWrite((b"PERSIST", key)))
        else:
            ttl = draws.pick(TTLS)
            if draws.chance(2):
                self.steps.append(RawWrite((b"PEXPIREAT", key, b"%d" % (self.start_ms + self.now + ttl))))
            else:
                self.steps.append(RawWrite((b"PEXPIRE", key, b"%d" % ttl)))
            self.ttls[(queue, key)] = self.now + ttl
            if ttl <= TTLS[-2] and draws.aim(2):
                self._wait(ttl + draws.pick((0, 1)))  # to its expiry, or just past it
        for (q, k), at in list(self.ttls.items()):
            if at < self.now:  # gone: as far as the hints know, what it held went with it
                del self.ttls[(q, k)]
                _forget(self.hints[q], Layout(q), k)
        self._add(then(draws, verb, queue, hints, self.now, job))

    @weight(6)
    @precondition(on_shape("corruption"))
    @rule()
    def other_writers_fields(self) -> None:
        """An operator or a dashboard adds a field of its own to `meta` or to the row the next
        transition reaches (raw HSET), then that transition: every one keeps the field, as the
        scripts' HSET, HDEL and ZADD do. Mostly, where a lease is held, a lease holder's call that
        writes its row (COMPLETE, FAIL, EXTEND): the writes a job's own fields go through most."""
        draws = self.draws()
        queue = draws.queue()
        layout = Layout(queue)
        held = bool(self.hints[queue].active)
        verb = draws.pick(FENCED_VERBS) if held and draws.aim(2) else draws.pick(VERBS)
        transition = TRANSITIONS[verb]
        job = reader_row(draws, verb, self.hints[queue]) if transition.rows is not Rows.NONE else None
        on_meta = job is None or (transition.reads_meta and draws.chance(2))
        key = layout.meta if on_meta else layout.row(job or draws.pick(IDS))
        field = draws.pick(domains.FOREIGN_FIELDS)
        self.steps.append(RawWrite((b"HSET", key, field, draws.pick(domains.FOREIGN_VALUES))))
        self._add(then(draws, verb, queue, self.hints[queue], self.now, job))

    def _reached_key(self, draws: QueueDraws, verb: str, queue: bytes) -> tuple[bytes, bytes | None]:
        """A key `verb` reaches on `queue` (a set, meta, a metrics hash, or the row it reads next),
        and the row's id when it is a row."""
        layout = Layout(queue)
        kind = draws.pick(domains.reached_keys(TRANSITIONS[verb]))
        if kind == domains.ROWS_KEY:
            job = reader_row(draws, verb, self.hints[queue]) or draws.pick(IDS)
            return layout.row(job), job
        if kind.startswith("metrics:"):
            return layout.metrics(kind.removeprefix("metrics:")), None
        return layout.key(kind), None


# The databases a history's queues move to (the last one of the servers' 16 is an edge of its own)
OTHER_DATABASES = (1, 2, 15)
# TTLs another writer gives (ms): a millisecond, lease-sized ones the clock passes, one it never does
TTLS = (1, 10, 100, 250, 10_000_000)


def _forget(hints: QueueHints, layout: Layout, key: bytes) -> None:
    """What the hints drop when `key` expired: a set's members, or a row (its id a ghost now)."""
    base = layout.base
    name = key[len(base) :]
    if name.startswith(b"job:"):
        hints.rows.discard(name[4:])
    elif name in (b"pending", b"delayed", b"active", b"dead", b"done"):
        getattr(hints, name.decode()).clear()
    elif name == b"meta":
        hints.paused = False


def machine_settings(max_examples: int, max_steps: int, database: ExampleDatabase | None = None,
                     **overrides: Any) -> settings:  # fmt: skip
    """The settings a run of the machine uses (quiet: the campaign saves and prints a failure itself)."""
    # (Any: Hypothesis's settings take each keyword as its own type, which one dict cannot say)
    options: dict[str, Any] = {
        "max_examples": max_examples, "stateful_step_count": max_steps, "deadline": None, "database": database,
        "suppress_health_check": list(HealthCheck), "report_multiple_bugs": False, "print_blob": False,
        "verbosity": Verbosity.quiet,
    }  # fmt: skip
    options.update(overrides)
    return settings(**options)


# CPython's collector makes a young-generation pass every 700 net allocations of containers, and
# drawing keeps most of what it allocates (Hypothesis's choice nodes, spans and tree nodes live until
# the run ends): at 700, the collector took about 15% of the CPU of drawing, two passes a history and
# a full pass every hundred, each full pass walking everything Hypothesis keeps (40 ms at 300
# histories). While the machine runs, drawing and `on_history` alike (which replays and judges in a
# campaign: its passes walk the same survivors), a pass every 10,000 allocations: measured in
# `bench/bench_replay.py`, the replay's own passes at 700 cost 6% of the compared steps/s (no-restarts
# mix, 4,016 against 4,247), nearly all in full passes (4 against 1). The histories are the same
# whenever the collector runs (Hypothesis reads weak references to drawn values only when it shrinks).
DRAWING_GC_THRESHOLD = 10_000


def run_machine(
    shape: HistoryShape, on_history: Callable[[History], None], the_settings: settings, seed: int | None = None
) -> None:
    """Run the machine as Hypothesis's test: every history it draws goes to `on_history`, which
    raises to report a failure (Hypothesis then shrinks the run and calls it again on smaller ones).
    With a seed, the histories depend on the seed alone. The engine's hooks (strategies/engine.py)
    on now decide how it draws."""
    caller = gc.get_threshold()

    # (Hypothesis keys the example database by this function's source: keep it as it is)
    def history_machine() -> QueueMachine:
        return QueueMachine(shape, on_history)

    runnable = engine.runnable(QueueMachine)

    def sourced_machine() -> RuleBasedStateMachine:  # the machine that takes its draws from st.data()
        return runnable(shape, on_history)  # type: ignore[call-arg]

    made = history_machine if runnable is QueueMachine else sourced_machine
    factory: Callable[[], RuleBasedStateMachine] = seed_of(seed)(made) if seed is not None else made
    if caller[0]:
        gc.set_threshold(max(caller[0], DRAWING_GC_THRESHOLD), caller[1], caller[2])
    try:
        # at least one rule after the initialize rules (which record no step)
        engine.run(factory, the_settings, len(runnable.setup_state().initializers))
    finally:
        gc.set_threshold(*caller)
