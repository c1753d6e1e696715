"""The step builders the machine's rules share: a transition's call aimed by the hints, a call with one
thing wrong, another writer's corruption, a value or a type another writer left and the transition that
reads it. Each reads its choices from a `Choices` (the machine's draws), each shrinking towards the first
option, so a shrunk step means the plainest thing: not aimed, no edge value, the first queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeAlias, TypeVar

from difftest.history.format import Advance, CallStep, RawWrite, Step
from difftest.spec import domains
from difftest.spec.calls import Call
from difftest.spec.commands import SETS, TRANSITIONS, Layout, base_key, parse_key
from strategies.hints import QueueHints
from strategies.pools import (
    BACKOFFS,
    BAD_INTEGERS,
    DELAYS,
    DURATIONS,
    EDGE_BYTES,
    ERRORS,
    I64_MAX,
    IDS,
    PAYLOADS,
    QUEUES,
    TOKENS,
)

_Drawn = TypeVar("_Drawn")
# a call's argument as a step builder makes it: Call.of sends each as given
Arg: TypeAlias = bytes | str | int


class Choices(Protocol):
    """The choices a step builder makes, in order; each shrinks towards the first option (the
    machine's `Draws`: one Hypothesis integer choice each)."""

    def pick(self, pool: tuple[_Drawn, ...] | list[_Drawn]) -> _Drawn:
        """One of the pool (shrinks to the first)."""

    def spread(self, pool: tuple[_Drawn, ...] | list[_Drawn]) -> _Drawn:
        """One of the pool, where values drawn together must not come in lockstep (shrinks as pick)."""

    def integer(self, low: int, high: int) -> int:
        """One in [low, high] (shrinks to low)."""

    def chance(self, out_of: int) -> bool:
        """True one time in `out_of` (False when shrunk)."""

    def aim(self, out_of: int) -> bool:
        """True but one time in `out_of`: whether to aim by the hints (shrunk: not aimed)."""

    def weighted(self, weights: tuple[tuple[str, int], ...]) -> str:
        """A name by its weight (shrinks to the first)."""


def edged(draw: Choices, pool: tuple[bytes, ...]) -> bytes:
    """Mostly the pool's values; now and then bytes at an edge (empty, spaces, CR/LF, NUL, invalid
    UTF-8, braces, large)."""
    if draw.chance(12):
        return bytes(draw.spread(EDGE_BYTES))
    return bytes(draw.pick(pool))


def valued(draw: Choices, pool: tuple[bytes, ...]) -> bytes:
    """A payload or an error text of one call: as `edged`, and now and then a megabyte's
    (`domains.MEGABYTE`: production's documents and stack traces; never a bulk's, whose every call
    would carry it)."""
    if draw.chance(256):  # about one history in thirty: a walk of a megabyte's row costs ~0.3 s a history
        return domains.MEGABYTE
    return edged(draw, pool)


def held(draw: Choices, hints: QueueHints, job: bytes | None = None) -> tuple[bytes, int | bytes | str]:
    """Mostly an id a worker holds with its current token; sometimes a stale token that is close to
    it (one less, one more, its leading digits, ten times it: a fence must compare the whole
    number); sometimes any id, any token."""
    if job is not None or (draw.aim(4) and hints.active):
        job = job if job is not None else draw.pick(sorted(hints.active))
        token = hints.attempts.get(job, 1)
        if draw.chance(6):
            close: tuple[int | str, ...] = (token - 1, token + 1, str(token)[:-1] or "0", token * 10)
            return job, draw.pick(close) if token >= 10 else token - 1
        return job, token
    return edged(draw, IDS), draw.pick(TOKENS)


def at_a_bound(draw: Choices, call: Call) -> Call:
    """The call with one integer argument at one of its bounds, or one past it (docs/contract-decisions.md:
    every minimum and maximum is inclusive)."""
    transition = TRANSITIONS[call.verb]
    ints = [i for i, a in enumerate(transition.args) if a.kind.value == "int"]
    if not ints:
        return call
    position = draw.spread(ints)
    edge = draw.spread(domains.BOUND_EDGES)
    rest = list(call.rest)
    rest[transition.numkeys + position] = domains.bound_value(call.verb, transition.args[position].name, edge)
    return Call(call.verb, call.numkeys, tuple(rest))


def transition_call(
    draw: Choices, verb: str, queue: bytes, hints: QueueHints, now: int, job: bytes | None = None
) -> Call:
    """A call with arguments that collide: held ids with their tokens, dead ids to revive (`job`:
    the id argument is that one, with the token the hints believe it has)."""
    make = _ARGUMENTS.get(verb)
    if make is not None:
        args = make(draw, hints, now, job)
    else:
        args = ()
        hints.paused = verb == "PAUSE"
    call = Call.of(verb, queue, *args)
    return at_a_bound(draw, call) if draw.chance(16) else call


# A transition's arguments drawn, and the hints told what the call will do (each below: the draws in the
# order they were always made, so a seed draws the same histories)
_Arguments: TypeAlias = Callable[[Choices, QueueHints, int, bytes | None], tuple[Arg, ...]]


def _enqueue_args(draw: Choices, hints: QueueHints, now: int, job: bytes | None) -> tuple[Arg, ...]:
    job, delay = job if job is not None else edged(draw, IDS), draw.pick(DELAYS)
    args = (job, valued(draw, PAYLOADS), delay)
    hints.enqueue(job, now, delay)
    return args


def _claim_args(draw: Choices, hints: QueueHints, now: int, job: bytes | None) -> tuple[Arg, ...]:
    lease = draw.pick(DURATIONS)
    hints.claim(now, lease)
    return (lease,)


def _extend_args(draw: Choices, hints: QueueHints, now: int, job: bytes | None) -> tuple[Arg, ...]:
    job, token = held(draw, hints, job)
    lease = draw.pick(DURATIONS)
    if isinstance(token, int):
        hints.extend(job, token, now, lease)
    return (job, token, lease)


def _complete_args(draw: Choices, hints: QueueHints, now: int, job: bytes | None) -> tuple[Arg, ...]:
    job, token = held(draw, hints, job)
    if isinstance(token, int):
        hints.complete(job, token)
    return (job, token)


def _fail_args(draw: Choices, hints: QueueHints, now: int, job: bytes | None) -> tuple[Arg, ...]:
    job, token = held(draw, hints, job)
    max_attempts, backoff = draw.integer(1, 3), draw.pick(BACKOFFS)
    if isinstance(token, int) and token >= 1 and (draw.chance(3) or (b"dead" in hints.broken and draw.aim(2))):
        # exactly exhausted (the dead-letter path and its boundary), or one short of it
        max_attempts = token + 1 if token >= 10 and draw.chance(2) else token
    args = (job, token, valued(draw, ERRORS), max_attempts, backoff)
    if isinstance(token, int):
        hints.fail(job, token, max_attempts, now, backoff)
    return args


def _promote_args(draw: Choices, hints: QueueHints, now: int, job: bytes | None) -> tuple[Arg, ...]:
    limit = draw.integer(1, 3)
    hints.promote(now, limit)
    return (limit,)


def _sweep_args(draw: Choices, hints: QueueHints, now: int, job: bytes | None) -> tuple[Arg, ...]:
    max_stalled, limit = draw.integer(1, 3), draw.integer(1, 3)
    expired = sum(1 for deadline in hints.active.values() if deadline <= now)
    if expired >= 2 and draw.chance(2):
        limit = expired - 1  # fewer than are expired: the limit is what stops the sweep
    hints.sweep(now, max_stalled, limit)
    return (max_stalled, limit)


def _revive_args(draw: Choices, hints: QueueHints, now: int, job: bytes | None) -> tuple[Arg, ...]:
    dead = sorted(hints.dead)
    if job is None:
        job = draw.pick(dead) if draw.aim(2) and dead else edged(draw, IDS)
    hints.revive(job, now)
    return (job,)


# the transitions with arguments (PAUSE and RESUME have none)
_ARGUMENTS: dict[str, _Arguments] = {
    "ENQUEUE": _enqueue_args, "CLAIM": _claim_args, "EXTEND": _extend_args, "COMPLETE": _complete_args,
    "FAIL": _fail_args, "PROMOTE": _promote_args, "SWEEP": _sweep_args, "REVIVE": _revive_args,
}  # fmt: skip


def malformed(draw: Choices, call: Call, shape: bool = True) -> Call:
    """The same call at one class of one argument rule (docs/contract-decisions.md, difftest/spec/domains.py): an
    integer of a class of the integer form, the numkeys or the argument count, or one key's layout
    (the base's queue name, a derived key's suffix, another queue's key). A class may be the accepted
    side of its rule (an integer that fits, a queue name with NUL or spaces): the call then runs.
    Without `shape`, never the numkeys or the argument count (the call's shape must stay right)."""
    transition = TRANSITIONS[call.verb]
    int_positions = [i for i, a in enumerate(transition.args) if a.kind.value == "int"]
    kinds: tuple[str, ...] = ("int", "numkeys", "argc", "layout") if int_positions else ("numkeys", "argc", "layout")
    if not shape:  # (the shape kept: a second rule broken in a call whose first left it right)
        kinds = tuple(kind for kind in kinds if kind not in ("numkeys", "argc"))
    choice = draw.pick(kinds)
    rest = list(call.rest)
    if choice == "int":
        position = transition.numkeys + draw.pick(int_positions)
        rest[position] = draw.spread(BAD_INTEGERS)
        return Call(call.verb, call.numkeys, tuple(rest))
    if choice in ("numkeys", "argc"):
        classes = [c for c in domains.shape_classes(transition) if c.startswith(choice)]
        numkeys, changed = domains.shaped(transition, call.rest, draw.spread(classes))
        return Call(call.verb, numkeys, changed)
    return laid_out(draw, call)


def malformed_once_or_twice(draw: Choices, call: Call) -> Call:
    """`malformed`, and one time in three a second rule broken too where the first left the call's
    shape right (which refusal wins is the guards' order: `edge:faults:*`)."""
    call = malformed(draw, call)
    transition = TRANSITIONS[call.verb]
    well_shaped = (call.numkeys == str(transition.numkeys).encode()
                   and len(call.rest) == transition.numkeys + len(transition.args))  # fmt: skip
    if draw.chance(3) and well_shaped:
        call = malformed(draw, call, shape=False)
    return call


def laid_out(draw: Choices, call: Call) -> Call:
    """The call with one key position of one layout class (the other keys stay the queue's)."""
    transition = TRANSITIONS[call.verb]
    name = parse_key(call.rest[0])
    queue = name.queue if name is not None else QUEUES[0]
    other = next(q for q in QUEUES if q != queue)
    position = draw.spread(domains.layout_positions(transition))
    cls = draw.spread(domains.layout_classes(transition, position))
    keys = domains.laid_out(transition, queue, position, cls, other)
    return Call(call.verb, call.numkeys, (*keys, *call.rest[transition.numkeys :]))


# "group" twice: SWEEP meets it only on a lease that expires before it ends (D8), the rarest of them;
# it is aimed at pending rows too, which keep it when claimed
# "lease-end-set": with a lease held, a set the lease's end writes (FAIL, COMPLETE, SWEEP, a retry's
# delay) made wrong-typed: the check that must come before the first write is then exercised
CORRUPTIONS = ("set-wrong-type", "row-counter", "metrics-counter", "group", "ghost", "drop-row",
               "foreign-epoch", "group", "lease-end-set")  # fmt: skip
# which hinted ids each corruption is aimed at, so that it lands where a transition will read
AIMS = {"row-counter": ("pending", "active"), "group": ("active", "pending"), "foreign-epoch": ("active",),
        "drop-row": ("active", "pending", "delayed"), "set-wrong-type": ("active", "delayed", "pending")}  # fmt: skip


def near_edge(draw: Choices, field: bytes) -> bytes:
    """A counter another writer left a few below an edge production's counters cross (2^31, 2^32,
    2^53, i64: `domains.COUNTER_EDGES_OF`), for the history's own increments to cross."""
    return domains.below_edge(draw.pick(domains.COUNTER_EDGES_OF[field]), draw.pick(domains.COUNTER_EDGE_GAPS))


def corruption(draw: Choices, queue: bytes, hints: QueueHints) -> RawWrite:
    base = base_key(queue)
    kind = draw.pick(CORRUPTIONS)
    aimed = sorted({j for where in AIMS.get(kind, ()) for j in getattr(hints, where)})
    job = draw.pick(aimed) if draw.aim(4) and aimed else draw.pick(IDS)
    if kind in ("group", "foreign-epoch") and hints.active and draw.chance(2):
        job = hints.first_to_expire()  # the lease the next SWEEP selects first (D7, D8)
    row = base + b"job:" + job
    if kind in ("set-wrong-type", "lease-end-set"):
        if kind == "lease-end-set" and hints.active:
            key = base + draw.pick((b"dead", b"done", b"delayed", b"dead"))  # dead: FAIL's and SWEEP's
        else:
            sets = (b"pending", b"active", b"delayed", b"dead", b"done", b"meta")
            key = row if draw.chance(2) else draw.pick(tuple(base + name for name in sets))
        if key != row:
            hints.broken.add(key[len(base) :])
        return RawWrite((b"SET", key, b"junk"))
    if kind == "row-counter":
        if hints.pending and draw.chance(2):
            # the row the next CLAIM pops, its attempts not a counter CLAIM can increment (D4)
            return RawWrite((b"HSET", base + b"job:" + hints.head(), b"attempts", draw.pick((b"abc", I64_MAX))))
        field = draw.pick((b"attempts", b"stalled"))
        value = near_edge(draw, field) if draw.chance(3) else draw.pick((b"abc", I64_MAX, b"7"))
        return RawWrite((b"HSET", row, field, value))
    if kind == "metrics-counter":
        which = draw.pick((b"metrics:failed", b"metrics:completed"))
        value = near_edge(draw, b"count") if draw.chance(2) else draw.pick((b"x", I64_MAX))
        return RawWrite((b"HSET", base + which, b"count", value))
    if kind == "group":
        return RawWrite((b"HSET", row, b"group", b"g"))
    if kind == "ghost":
        # half of them in dead: only REVIVE meets a ghost there, and only if it is aimed at it
        key = b"dead" if draw.chance(2) else draw.pick((b"pending", b"active", b"delayed", b"dead"))
        ghost = b"ghost-" + draw.pick(IDS)
        where = getattr(hints, key.decode())
        if isinstance(where, dict):
            where[ghost] = 0  # due or expired at once: the next PROMOTE or SWEEP meets it
        else:
            where.add(ghost)
        return RawWrite((b"ZADD", base + key, b"0", ghost))
    if kind == "drop-row":
        return RawWrite((b"DEL", row))
    return RawWrite((b"HSET", row, b"lease_epoch", b"0" * 40))


def reader_row(draw: Choices, verb: str, hints: QueueHints) -> bytes | None:
    """The id whose row `verb` reads next, as far as the hints know (None: none to aim at)."""
    match verb:
        case "CLAIM":
            return hints.head() if hints.pending else None
        case "EXTEND" | "COMPLETE" | "FAIL":
            return draw.pick(sorted(hints.active)) if hints.active else None
        case "SWEEP":
            return hints.first_to_expire() if hints.active else None
        case "PROMOTE":
            return min(hints.delayed, key=lambda j: (hints.delayed[j], j)) if hints.delayed else None
        case "REVIVE":
            return draw.pick(sorted(hints.dead)) if hints.dead else None
    return draw.pick(sorted(hints.rows)) if hints.rows else None


def then(draw: Choices, verb: str, queue: bytes, hints: QueueHints, now: int, job: bytes | None) -> list[Step]:
    """The transition that reads what the step before left (a SWEEP first waits for its lease)."""
    steps: list[Step] = []
    if verb == "SWEEP" and job is not None and job in hints.active and hints.active[job] > now:
        steps.append(Advance(hints.active[job] - now))
        now = hints.active[job]
    forced = job if job is not None and TRANSITIONS[verb].rows.value == "job-arg" else None
    steps.append(CallStep(transition_call(draw, verb, queue, hints, now, forced)))
    return steps


def value_step(draw: Choices, queue: bytes, hints: QueueHints, now: int) -> list[Step]:
    """A value another writer left in a field a transition reads (or a score in a set it reads in
    order), then that transition: the values of difftest/spec/domains.py, aimed at the row, the meta
    or the metrics hash the reader reaches next."""
    layout = Layout(queue)
    target = draw.spread(("row", "row", "row", "row", "meta", "count", "count", "score"))
    if target == "meta":
        value = domains.field_value(draw.spread, "paused")
        flag = domains.META_FIELD
        write = (b"HDEL", layout.meta, flag) if value is None else (b"HSET", layout.meta, flag, value)
        hints.paused = value is not None
        return [RawWrite(write), *then(draw, draw.pick(domains.META_READERS), queue, hints, now, None)]
    if target == "count":
        value = domains.field_value(draw.spread, "count")
        which = draw.pick(tuple(domains.COUNT_READERS))
        key = layout.metrics(which)
        write = (b"HDEL", key, b"count") if value is None else (b"HSET", key, b"count", value)
        verb = draw.pick(domains.COUNT_READERS[which])
        return [RawWrite(write), *then(draw, verb, queue, hints, now, reader_row(draw, verb, hints))]
    if target == "score":
        name = draw.pick(tuple(domains.SCORE_READERS))
        verb = draw.pick(domains.SCORE_READERS[name])
        members = getattr(hints, name)
        job = draw.pick(sorted(members)) if members and draw.aim(4) else draw.pick(IDS)
        score = draw.spread(tuple(domains.SCORE_CLASSES.values()))
        if isinstance(members, dict) and job in members:
            members[job] = now  # due or expired as far as the hints can tell
        return [RawWrite((b"ZADD", layout.key(name), score, job)), *then(draw, verb, queue, hints, now, job)]
    field = draw.spread(tuple(domains.ROW_FIELDS))
    if field == b"attempts" and hints.active and draw.aim(3):
        return _respelled_token(draw, queue, hints, now)
    value = domains.field_value(draw.spread, field.decode())
    verb = draw.pick(domains.ROW_FIELDS[field])
    job = reader_row(draw, verb, hints)
    if job is None:
        job = draw.pick(IDS)
    row = layout.row(job)
    write = (b"HDEL", row, field) if value is None else (b"HSET", row, field, value)
    if field == b"attempts":
        token = domains.lenient_integer(value)  # the token a worker would present for it
        if token is not None and token >= 0:
            hints.attempts[job] = token
    return [RawWrite(write), *then(draw, verb, queue, hints, now, job)]


# Another spelling of the same number: what a tool that reads and writes the counter back as text can
# leave (a leading zero, spaces, a sign); a fence that compares numbers, not the bytes, passes it
RESPELLINGS = (b"0%d", b" %d", b"%d ", b"+%d")


def _respelled_token(draw: Choices, queue: bytes, hints: QueueHints, now: int) -> list[Step]:
    """A held lease's `attempts` rewritten by another writer as another spelling of the same number,
    then its holder's fenced call with its token: the scripts compare the bytes, so the fence fails."""
    job = draw.pick(sorted(hints.active))
    token = hints.attempts.get(job, 1)
    respelled = draw.pick(RESPELLINGS) % token
    verb = draw.pick(tuple(verb for verb in domains.ROW_FIELDS[b"attempts"] if TRANSITIONS[verb].fenced))
    return [
        RawWrite((b"HSET", Layout(queue).row(job), b"attempts", respelled)),
        *then(draw, verb, queue, hints, now, job),
    ]


# Counters past one digit, as a job claimed, failed, swept and revived ten times and more leaves them
LONG_COUNTERS = (9, 10, 11, 99, 100, 1000)


def long_step(draw: Choices, queue: bytes, hints: QueueHints, now: int) -> list[Step]:
    """A long-lived job: its attempts or stalled set past one digit (what many cycles of claim,
    fail, sweep and revive leave), then the transition that reads it: a CLAIM of it, a fenced call
    with its token or a stale token close to it, a SWEEP of it with max_stalled at the edge."""
    layout = Layout(queue)
    counter = int(draw.pick(LONG_COUNTERS))
    choice = draw.pick(("claim", "fence", "fence", "sweep"))
    if choice == "claim" and hints.pending:
        job = hints.head()
        return [RawWrite((b"HSET", layout.row(job), b"attempts", str(counter).encode())),
                *then(draw, "CLAIM", queue, hints, now, job)]  # fmt: skip
    if choice == "sweep" and hints.active:
        job = hints.first_to_expire()
        steps: list[Step] = [RawWrite((b"HSET", layout.row(job), b"stalled", str(counter).encode()))]
        if hints.active[job] > now:
            steps.append(Advance(hints.active[job] - now))
        max_stalled = draw.pick((counter + 1, counter + 2, counter))
        steps.append(CallStep(Call.of("SWEEP", queue, max_stalled, draw.integer(1, 3))))
        hints.stalled[job] = counter
        hints.sweep(max(now, hints.active[job]), max_stalled, 3)
        return steps
    if not hints.active:
        return []
    job = draw.pick(sorted(hints.active))
    hints.attempts[job] = counter
    verb = draw.pick(("EXTEND", "COMPLETE", "FAIL"))
    return [RawWrite((b"HSET", layout.row(job), b"attempts", str(counter).encode())),
            *then(draw, verb, queue, hints, now, job)]  # fmt: skip


def typed_step(draw: Choices, queue: bytes, hints: QueueHints, now: int) -> list[Step]:
    """A key a transition writes made of another type just before that transition: for every verb
    and every key it reaches, derived keys included (difftest/spec/domains.py)."""
    layout = Layout(queue)
    verb = draw.weighted(domains.PLAIN_VERB_WEIGHTS)
    kind = draw.spread(domains.written_keys(TRANSITIONS[verb]))
    job = reader_row(draw, verb, hints)
    if kind == domains.ROWS_KEY:
        if job is None:
            job = draw.pick(IDS)
        key = layout.row(job)
    else:
        key = layout.key(kind)
        if kind in SETS:
            hints.broken.add(kind.encode())
    wrong = draw.spread(domains.WRONG_TYPES)
    writes: list[Step] = [RawWrite(c) for c in domains.wrong_type_commands(key, kind, wrong)]
    return [*writes, *then(draw, verb, queue, hints, now, job)]
