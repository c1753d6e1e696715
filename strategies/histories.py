"""The history generator: a Hypothesis strategy that draws a whole history up front.

Hypothesis draws a list of step seeds (small tuples of integers); `build_history` turns them into
steps, in order, with a rough model of the queues (`hints`) to aim arguments where they matter.
Drawing everything first and replaying after keeps Hypothesis's cost per step low, and a list of
independent seeds shrinks well: deleting one seed deletes one step, and any list still decodes to a
valid history (claims stay paired, restarts close them). Tiny pools of queues, ids, tokens and
durations make transitions collide and deadlines meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from difftest.history.format import (
    Advance,
    BeginClaim,
    CallStep,
    EndClaim,
    History,
    RawWrite,
    Restart,
    Step,
)
from difftest.spec import domains
from difftest.spec.calls import Call
from difftest.spec.commands import SETS, TRANSITIONS, Layout, base_key, parse_key
from strategies.hints import QueueHints
from strategies.seeded import draw_from_the_seed_alone

draw_from_the_seed_alone()

QUEUES = (b"q", b"r")
IDS = (b"j1", b"j2", b"j3", b"\x00", b"\xff\xfe")
PAYLOADS = (b"p", b"", b"\x00\xff\r\n", "caf\u00e9".encode())
ERRORS = (b"boom", b"", b"\x00")
WORKERS = ("A", "B")
DURATIONS = (1, 5, 10, 50, 100)
ADVANCES = (1, 4, 5, 6, 9, 10, 11, 49, 50, 51, 99, 100, 101, 250)
TOKENS = (1, 1, 2, 2, 3, 0, 4)
# pools the step builders pick from on many steps, built once
DELAYS = (0, 0, 0, *DURATIONS)  # an ENQUEUE's delay: mostly none
BACKOFFS = (0, *DURATIONS)
EDGE_BYTES = tuple(domains.BYTES_EDGES.values())
I64_MAX = str(2**63 - 1).encode()
# every class of Valkey's integer form (difftest/spec/domains.py), those refused by their form first (so
# that a malformed integer shrinks to one), then those read as integers, which the argument's range decides
BAD_INTEGERS: tuple[bytes, ...] = tuple(
    c.raw for c in sorted(domains.INT_CLASSES.values(), key=lambda c: not isinstance(c.form, str))
)


# One user per key kind a transition reaches and per restricted permission (none, read only, write
# only), derived from the command table (strategies/domains.py); each mostly calls the transitions
# that reach the key it is restricted on.
USERS = domains.permission_users(QUEUES)
USER_PROBES: dict[str, tuple[str, ...]] = {
    user: tuple(verb for verb, t in TRANSITIONS.items() if r.kind in domains.reached_keys(t))
    for user, r in domains.RESTRICTIONS.items()
}
# the derived keys (rows, meta, metrics), which the native checks itself, more often than the
# declared sets, which the server checks alike for both executors
USER_KIND_WEIGHTS = {kind: 6 if kind == domains.ROWS_KEY else 1 if kind in SETS else 2 for kind in domains.KEY_KINDS}
USER_KINDS = tuple(kind for kind, weight in USER_KIND_WEIGHTS.items() for _ in range(weight))
# a caller who may read rows but not write them: EXTEND re-stamps the row it may only read (N2),
# SWEEP writes the rows of the leases it exempts (D7 held to the caller's permissions)
_READ_ROWS = domains.acl_user(domains.ROWS_KEY, "read")
USER_PROBES[_READ_ROWS] = (*USER_PROBES[_READ_ROWS], *["EXTEND"] * 4, *["SWEEP"] * 4)


@dataclass(frozen=True)
class HistoryShape:
    """What kinds of steps a history may hold; the defaults reach every contract row."""

    min_steps: int = 1
    max_steps: int = 40
    restarts: bool = True
    crashes: bool = True
    corruption: bool = True
    users: bool = True
    interleaving: bool = True
    malformed: bool = True
    upgrades: bool = True  # the state machine's Lua-era prefixes and scripts workers (strategies/machine.py)
    transactions: bool = True  # the state machine's MULTI/EXEC steps (strategies/machine.py)
    notifications: bool = True  # the state machine's notify steps: keyspace events compared (strategies/machine.py)
    memory: bool = True  # the state machine's memory limit steps (strategies/machine.py)
    replica_calls: bool = True  # calls to each server's read-only replica (embedded servers only)


# Small values and few of them: the shrinker minimises every one, and each try is a replay.
SEED_VALUES = 1 << 8  # every weight table below sums to at most this
SEED_WIDTH = 8  # choices one step makes; beyond them, they are derived from these


class Chooser:
    """One step's choices, read in order from its seed (each shrinks towards the first option)."""

    def __init__(self, seed: tuple[int, ...]) -> None:
        self.seed = seed
        self.used = 0

    def _next(self) -> int:
        value = self.seed[self.used % len(self.seed)] + self.used // len(self.seed)
        self.used += 1
        return value

    def pick(self, pool: tuple[Any, ...] | list[Any]) -> Any:
        return pool[self._next() % len(pool)]

    def spread(self, pool: tuple[Any, ...] | list[Any]) -> Any:
        """Like pick, but the seed value is mixed first: Hypothesis often draws a step's values
        alike, and picks from pools of coprime sizes then come in lockstep, leaving some
        combinations of class and target undrawn. 0 still picks the first (shrinks as pick)."""
        return pool[((self._next() * 0x9E3779B1) >> 11) % len(pool)]

    def integer(self, low: int, high: int) -> int:
        return low + self._next() % (high - low + 1)

    def chance(self, out_of: int) -> bool:
        """True one time in `out_of` (False when the seed value shrinks to 0)."""
        return self._next() % out_of == out_of - 1

    def aim(self, out_of: int) -> bool:
        """True but one time in `out_of`: whether to aim by the hints. Shrinking towards 0 turns
        aiming off, so a shrunk step means the same thing whatever steps were deleted before it."""
        return self._next() % out_of != 0

    def weighted(self, weights: tuple[tuple[str, int], ...]) -> str:
        n = self._next() % sum(w for _, w in weights)
        for name, weight in weights:
            if n < weight:
                return name
            n -= weight
        return weights[-1][0]


def _pick(draw: Chooser, pool: tuple[Any, ...]) -> Any:
    return draw.pick(pool)


def _edged(draw: Chooser, pool: tuple[bytes, ...]) -> bytes:
    """Mostly the pool's values; now and then bytes at an edge (empty, spaces, CR/LF, NUL, invalid
    UTF-8, braces, large)."""
    if draw.chance(12):
        return bytes(draw.spread(EDGE_BYTES))
    return bytes(draw.pick(pool))


def _held(draw: Chooser, hints: QueueHints, job: bytes | None = None) -> tuple[bytes, int | bytes]:
    """Mostly an id a worker holds with its current token; sometimes a stale token that is close to
    it (one less, one more, its leading digits, ten times it: a fence must compare the whole
    number); sometimes any id, any token."""
    if job is not None or (draw.aim(4) and hints.active):
        job = job if job is not None else draw.pick(sorted(hints.active))
        token = hints.attempts.get(job, 1)
        if draw.chance(6):
            close = (token - 1, token + 1, str(token)[:-1] or "0", token * 10)
            return job, draw.pick(close) if token >= 10 else token - 1
        return job, token
    return _edged(draw, IDS), _pick(draw, TOKENS)


def _at_a_bound(draw: Chooser, call: Call) -> Call:
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


def _transition_call(
    draw: Chooser, verb: str, queue: bytes, hints: QueueHints, now: int, job: bytes | None = None
) -> Call:
    """A call with arguments that collide: held ids with their tokens, dead ids to revive (`job`:
    the id argument is that one, with the token the hints believe it has)."""
    args: tuple[Any, ...]
    if verb == "ENQUEUE":
        job, delay = job if job is not None else _edged(draw, IDS), draw.pick(DELAYS)
        args = (job, _edged(draw, PAYLOADS), delay)
        hints.enqueue(job, now, delay)
    elif verb == "CLAIM":
        lease = _pick(draw, DURATIONS)
        args = (lease,)
        hints.claim(now, lease)
    elif verb == "EXTEND":
        job, token = _held(draw, hints, job)
        lease = _pick(draw, DURATIONS)
        args = (job, token, lease)
        if isinstance(token, int):
            hints.extend(job, token, now, lease)
    elif verb == "COMPLETE":
        job, token = _held(draw, hints, job)
        args = (job, token)
        if isinstance(token, int):
            hints.complete(job, token)
    elif verb == "FAIL":
        job, token = _held(draw, hints, job)
        max_attempts, backoff = draw.integer(1, 3), draw.pick(BACKOFFS)
        if isinstance(token, int) and token >= 1 and (draw.chance(3) or (b"dead" in hints.broken and draw.aim(2))):
            # exactly exhausted (the dead-letter path and its boundary), or one short of it
            max_attempts = token + 1 if token >= 10 and draw.chance(2) else token
        args = (job, token, _edged(draw, ERRORS), max_attempts, backoff)
        if isinstance(token, int):
            hints.fail(job, token, max_attempts, now, backoff)
    elif verb == "PROMOTE":
        limit = draw.integer(1, 3)
        args = (limit,)
        hints.promote(now, limit)
    elif verb == "SWEEP":
        max_stalled, limit = draw.integer(1, 3), draw.integer(1, 3)
        expired = sum(1 for deadline in hints.active.values() if deadline <= now)
        if expired >= 2 and draw.chance(2):
            limit = expired - 1  # fewer than are expired: the limit is what stops the sweep
        args = (max_stalled, limit)
        hints.sweep(now, max_stalled, limit)
    elif verb == "REVIVE":
        dead = sorted(hints.dead)
        if job is None:
            job = draw.pick(dead) if draw.aim(2) and dead else _edged(draw, IDS)
        args = (job,)
        hints.revive(job, now)
    else:
        args = ()
        hints.paused = verb == "PAUSE"
    call = Call.of(verb, queue, *args)
    return _at_a_bound(draw, call) if draw.chance(16) else call


PLAIN_VERB_WEIGHTS = (
    ("ENQUEUE", 20), ("CLAIM", 18), ("COMPLETE", 10), ("FAIL", 10), ("SWEEP", 10),
    ("EXTEND", 8), ("PROMOTE", 8), ("REVIVE", 6), ("PAUSE", 4), ("RESUME", 4),
)  # fmt: skip


def aimed_verb_weights(
    *,
    pending: bool,
    active: bool,
    expired: bool,
    due: bool,
    dead: bool,
    paused: bool,
    claims_open: bool,
    done_broken: bool,
    dead_broken: bool,
) -> tuple[tuple[str, int], ...]:
    """Transitions weighted by what the queues hold (as far as the hints know): work that is waiting
    draws the transition that does it; a corrupt set with a lease held draws the transition that
    meets it (dead: FAIL's dead-letter path; done: COMPLETE); an open split claim draws PAUSE and
    RESUME (D1). The seed-list generator and the state machine both aim by it."""
    return (
        ("ENQUEUE", 20),
        ("CLAIM", 6 + 24 * pending),
        ("COMPLETE", 3 + 15 * active + 12 * done_broken),
        ("FAIL", 3 + 10 * active + 12 * dead_broken),
        ("EXTEND", 2 + 8 * active),
        ("SWEEP", 4 + 24 * expired),
        ("PROMOTE", 4 + 24 * due),
        ("REVIVE", 2 + 12 * dead),
        ("PAUSE", 2 + 12 * (claims_open and not paused)),
        ("RESUME", 2 + 12 * paused),
    )


def _verb(draw: Chooser, hints: QueueHints, now: int, claims_open: bool) -> str:
    """A transition weighted by what the queue holds (`aimed_verb_weights`), or by fixed weights."""
    if not draw.aim(3):
        return draw.weighted(PLAIN_VERB_WEIGHTS)
    active = bool(hints.active)
    weights = aimed_verb_weights(
        pending=bool(hints.pending and not hints.paused), active=active,
        expired=any(t <= now for t in hints.active.values()), due=any(t <= now for t in hints.delayed.values()),
        dead=bool(hints.dead), paused=hints.paused, claims_open=claims_open,
        done_broken=active and b"done" in hints.broken, dead_broken=active and b"dead" in hints.broken,
    )  # fmt: skip
    return draw.weighted(weights)


def _advance(draw: Chooser, hints: dict[bytes, QueueHints], now: int) -> int:
    """Often exactly at, one before or one after the next lease or delay deadline."""
    upcoming = sorted(d - now for q in hints.values() for d in q.deadlines() if d - now > 1)
    if draw.aim(3) and upcoming:
        return upcoming[0] + int(draw.pick((0, -1, 1)))
    return int(_pick(draw, ADVANCES))


def _malformed(draw: Chooser, call: Call) -> Call:
    """The same call at one class of one argument rule (docs/contract-decisions.md, difftest/spec/domains.py): an
    integer of a class of the integer form, the numkeys or the argument count, or one key's layout
    (the base's queue name, a derived key's suffix, another queue's key). A class may be the accepted
    side of its rule (an integer that fits, a queue name with NUL or spaces): the call then runs."""
    transition = TRANSITIONS[call.verb]
    int_positions = [i for i, a in enumerate(transition.args) if a.kind.value == "int"]
    kinds = ("int", "numkeys", "argc", "layout") if int_positions else ("numkeys", "argc", "layout")
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
    return _laid_out(draw, call)


def _laid_out(draw: Chooser, call: Call) -> Call:
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


def _corruption(draw: Chooser, queue: bytes, hints: QueueHints) -> RawWrite:
    base = base_key(queue)
    kind = draw.pick(CORRUPTIONS)
    aimed = sorted({j for where in AIMS.get(kind, ()) for j in getattr(hints, where)})
    job = draw.pick(aimed) if draw.aim(4) and aimed else _pick(draw, IDS)
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
        return RawWrite((b"HSET", row, field, draw.pick((b"abc", I64_MAX, b"7"))))
    if kind == "metrics-counter":
        which = draw.pick((b"metrics:failed", b"metrics:completed"))
        return RawWrite((b"HSET", base + which, b"count", draw.pick((b"x", I64_MAX))))
    if kind == "group":
        return RawWrite((b"HSET", row, b"group", b"g"))
    if kind == "ghost":
        # half of them in dead: only REVIVE meets a ghost there, and only if it is aimed at it
        key = b"dead" if draw.chance(2) else draw.pick((b"pending", b"active", b"delayed", b"dead"))
        ghost = b"ghost-" + _pick(draw, IDS)
        where = getattr(hints, key.decode())
        if isinstance(where, dict):
            where[ghost] = 0  # due or expired at once: the next PROMOTE or SWEEP meets it
        else:
            where.add(ghost)
        return RawWrite((b"ZADD", base + key, b"0", ghost))
    if kind == "drop-row":
        return RawWrite((b"DEL", row))
    return RawWrite((b"HSET", row, b"lease_epoch", b"0" * 40))


def _reader_row(draw: Chooser, verb: str, hints: QueueHints) -> bytes | None:
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


def _then(draw: Chooser, verb: str, queue: bytes, hints: QueueHints, now: int, job: bytes | None) -> list[Step]:
    """The transition that reads what the step before left (a SWEEP first waits for its lease)."""
    steps: list[Step] = []
    if verb == "SWEEP" and job is not None and job in hints.active and hints.active[job] > now:
        steps.append(Advance(hints.active[job] - now))
        now = hints.active[job]
    forced = job if job is not None and TRANSITIONS[verb].rows.value == "job-arg" else None
    steps.append(CallStep(_transition_call(draw, verb, queue, hints, now, forced)))
    return steps


def _value_step(draw: Chooser, queue: bytes, hints: QueueHints, now: int) -> list[Step]:
    """A value another writer left in a field a transition reads (or a score in a set it reads in
    order), then that transition: the values of strategies/domains.py, aimed at the row, the meta
    or the metrics hash the reader reaches next."""
    layout = Layout(queue)
    target = draw.spread(("row", "row", "row", "row", "meta", "count", "count", "score"))
    if target == "meta":
        value = domains.field_value(draw.spread, "paused")
        flag = domains.META_FIELD
        write = (b"HDEL", layout.meta, flag) if value is None else (b"HSET", layout.meta, flag, value)
        hints.paused = value is not None
        return [RawWrite(write), *_then(draw, draw.pick(domains.META_READERS), queue, hints, now, None)]
    if target == "count":
        value = domains.field_value(draw.spread, "count")
        which = draw.pick(tuple(domains.COUNT_READERS))
        key = layout.metrics(which)
        write = (b"HDEL", key, b"count") if value is None else (b"HSET", key, b"count", value)
        verb = draw.pick(domains.COUNT_READERS[which])
        return [RawWrite(write), *_then(draw, verb, queue, hints, now, _reader_row(draw, verb, hints))]
    if target == "score":
        name = draw.pick(tuple(domains.SCORE_READERS))
        verb = draw.pick(domains.SCORE_READERS[name])
        members = getattr(hints, name)
        job = draw.pick(sorted(members)) if members and draw.aim(4) else _pick(draw, IDS)
        score = draw.spread(tuple(domains.SCORE_CLASSES.values()))
        if isinstance(members, dict) and job in members:
            members[job] = now  # due or expired as far as the hints can tell
        return [RawWrite((b"ZADD", layout.key(name), score, job)), *_then(draw, verb, queue, hints, now, job)]
    field = draw.spread(tuple(domains.ROW_FIELDS))
    value = domains.field_value(draw.spread, field.decode())
    verb = draw.pick(domains.ROW_FIELDS[field])
    job = _reader_row(draw, verb, hints)
    if job is None:
        job = _pick(draw, IDS)
    row = layout.row(job)
    write = (b"HDEL", row, field) if value is None else (b"HSET", row, field, value)
    if field == b"attempts":
        token = domains.lenient_integer(value)  # the token a worker would present for it
        if token is not None and token >= 0:
            hints.attempts[job] = token
    return [RawWrite(write), *_then(draw, verb, queue, hints, now, job)]


# Counters past one digit, as a job claimed, failed, swept and revived ten times and more leaves them
LONG_COUNTERS = (9, 10, 11, 99, 100, 1000)


def _long_step(draw: Chooser, queue: bytes, hints: QueueHints, now: int) -> list[Step]:
    """A long-lived job: its attempts or stalled set past one digit (what many cycles of claim,
    fail, sweep and revive leave), then the transition that reads it: a CLAIM of it, a fenced call
    with its token or a stale token close to it, a SWEEP of it with max_stalled at the edge."""
    layout = Layout(queue)
    counter = int(draw.pick(LONG_COUNTERS))
    choice = draw.pick(("claim", "fence", "fence", "sweep"))
    if choice == "claim" and hints.pending:
        job = hints.head()
        return [RawWrite((b"HSET", layout.row(job), b"attempts", str(counter).encode())),
                *_then(draw, "CLAIM", queue, hints, now, job)]  # fmt: skip
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
            *_then(draw, verb, queue, hints, now, job)]  # fmt: skip


def _typed_step(draw: Chooser, queue: bytes, hints: QueueHints, now: int) -> list[Step]:
    """A key a transition writes made of another type just before that transition: for every verb
    and every key it reaches, derived keys included (strategies/domains.py)."""
    layout = Layout(queue)
    verb = draw.weighted(PLAIN_VERB_WEIGHTS)
    kind = draw.spread(domains.written_keys(TRANSITIONS[verb]))
    job = _reader_row(draw, verb, hints)
    if kind == domains.ROWS_KEY:
        if job is None:
            job = _pick(draw, IDS)
        key = layout.row(job)
    else:
        key = layout.key(kind)
        if kind in SETS:
            hints.broken.add(kind.encode())
    wrong = draw.spread(domains.WRONG_TYPES)
    writes: list[Step] = [RawWrite(c) for c in domains.wrong_type_commands(key, kind, wrong)]
    return [*writes, *_then(draw, verb, queue, hints, now, job)]


# Weights per 256 steps. A restart costs ~12 ms of server start-up and an advance ~1 ms until
# the servers read the new time, against ~0.1 ms for a call: both are kept rare enough that a
# campaign spends its time on transitions, often enough that a default campaign reaches D7.
STEP_WEIGHTS = (
    ("call", 118), ("advance", 38), ("begin", 12), ("end", 12), ("corrupt", 14),
    ("user", 17), ("malformed", 10), ("restart", 6), ("value", 14), ("typed", 9), ("long", 6),
)  # fmt: skip


# steps that write what the next transition reads, then run it (issue 18's classes)
COMPOUND_STEPS = {"value": _value_step, "typed": _typed_step, "long": _long_step}

STEP_SEED = st.tuples(*[st.integers(0, SEED_VALUES - 1)] * SEED_WIDTH)


@st.composite
def histories(draw: Any, shape: HistoryShape = HistoryShape()) -> History:
    """A whole history: transitions on two queues, clock advances across deadlines, restarts and
    crashes, corruptions, restricted users, split CLAIMs with steps between, malformed calls."""
    # runs of seeds: a flat list would average six steps, too few to build up state; runs of runs
    # average about twenty-five, and the shrinker still deletes any one seed on its own
    runs = draw(
        st.lists(st.lists(STEP_SEED, min_size=1, max_size=10), min_size=1, max_size=max(1, shape.max_steps // 5))
    )
    seeds = [seed for run in runs for seed in run]
    while len(seeds) < shape.min_steps:
        seeds.append((0,) * SEED_WIDTH)
    return build_history(seeds[: shape.max_steps], shape)


def _wait(steps: list[Step], ms: int) -> None:
    """A clock advance, joined with the one just before it: one wait for the clock, not two."""
    last = steps[-1] if steps else None
    if isinstance(last, Advance):
        steps.pop()
        ms += last.ms
    steps.append(Advance(ms))


def build_history(seeds: list[tuple[int, ...]], shape: HistoryShape = HistoryShape()) -> History:
    """The history a list of step seeds stands for (pure and deterministic)."""
    steps: list[Step] = []
    open_claims: list[str] = []
    enabled = {
        "restart": shape.restarts or shape.crashes,
        "corrupt": shape.corruption,
        "value": shape.corruption,
        "typed": shape.corruption,
        "long": shape.corruption,
        "user": shape.users,
        "begin": shape.interleaving,
        "end": shape.interleaving,
        "malformed": shape.malformed,
    }
    kinds = tuple((k, w) for k, w in STEP_WEIGHTS if enabled.get(k, True))
    hints = {queue: QueueHints() for queue in QUEUES}
    now = 0
    for seed in seeds:
        draw = Chooser(seed)
        kind = draw.weighted(kinds)
        queue = QUEUES[0] if not draw.chance(4) else QUEUES[1]  # mostly one queue: more collisions
        if kind == "advance":
            ms = _advance(draw, hints, now)
            now += ms
            _wait(steps, ms)
        elif kind == "restart":
            steps += [EndClaim(w) for w in open_claims]
            open_claims.clear()
            crash = shape.crashes and (not shape.restarts or draw.chance(2))
            steps.append(Restart(crash=crash))
            active = hints[queue].active
            if active and draw.chance(3):
                # a worker that held a lease across the restart renews it (N1: the new run_id)
                held = draw.pick(sorted(active))
                steps.append(CallStep(_transition_call(draw, "EXTEND", queue, hints[queue], now, held)))
        elif kind == "corrupt":
            steps.append(_corruption(draw, queue, hints[queue]))
        elif kind in ("value", "typed", "long"):
            for made in COMPOUND_STEPS[kind](draw, queue, hints[queue], now):
                if isinstance(made, Advance):
                    now += made.ms
                    _wait(steps, made.ms)
                else:
                    steps.append(made)
        elif kind == "begin":
            idle = [w for w in WORKERS if w not in open_claims]
            if idle:
                worker = _pick(draw, tuple(idle))
                open_claims.append(worker)
                claim = _transition_call(draw, "CLAIM", queue, hints[queue], now)
                steps.append(BeginClaim(worker, claim))
        elif kind == "end":
            if open_claims:
                worker = _pick(draw, tuple(open_claims))
                open_claims.remove(worker)
                steps.append(EndClaim(worker))
        else:
            user = domains.acl_user(draw.spread(USER_KINDS), draw.spread(domains.PERMS)) if kind == "user" else None
            # a restricted user mostly calls what reaches the key it is restricted on (with a held
            # token where it needs one): EXTEND with read-only rows reaches N2, COMPLETE with
            # write-only metrics the metrics check; otherwise any transition
            probes = USER_PROBES.get(user or "", ())
            probe = draw.spread(probes) if probes and draw.aim(2) else None
            verb = probe or _verb(draw, hints[queue], now, bool(open_claims))
            # a probe of a fenced transition holds a lease (on the queue that has one): the caller's
            # permissions then decide
            if probe and TRANSITIONS[verb].fenced and not hints[queue].active:
                queue = next((q for q in QUEUES if hints[q].active), queue)
            active = hints[queue].active
            held = draw.pick(sorted(active)) if probe and active and TRANSITIONS[verb].fenced else None
            if probe == "SWEEP" and active:
                # a probe of SWEEP meets an expired lease (exempt, after a restart: D7 held to the
                # caller's permissions)
                first = min(active.values())
                if first > now:
                    _wait(steps, first - now)
                    now = first
            call = _transition_call(draw, verb, queue, hints[queue], now, held)
            if kind == "malformed":
                call = _malformed(draw, call)
            steps.append(CallStep(call, user))
    steps += [EndClaim(w) for w in open_claims]
    return History(tuple(steps), users=dict(USERS) if shape.users else {})
