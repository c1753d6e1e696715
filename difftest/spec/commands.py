"""The spec as one declarative table: per verb its keys, arguments, derived keys, the fields it reads,
counters, replies, and how often the generator draws it.

The Lua host's guards, the native module's registration (checked by a test against `COMMAND INFO`),
the adapters, the value domains (difftest/spec/domains.py), the history generator, the judge, the
coverage labels and the mutant catalogue all read this table; keys are spelled in one place, `Layout`,
and read back in one, `parse_key`. Outside this module no judge, replay or campaign code quotes a verb
name or splices a key. `tests/test_verb_table.py` fails when a verb lacks an entry anywhere it must have one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum

# Durations are capped so that now + duration stays below 2^53: exact as a zset score (a double)
# and as a Lua number, and never an i64 overflow. See docs/contract-decisions.md.
MAX_DURATION_MS = 2**52
I64_MAX = 2**63 - 1


class Verb(StrEnum):
    """The transitions by name (a StrEnum: equal to, and hashed as, the plain string)."""

    ENQUEUE = "ENQUEUE"
    CLAIM = "CLAIM"
    EXTEND = "EXTEND"
    COMPLETE = "COMPLETE"
    FAIL = "FAIL"
    PROMOTE = "PROMOTE"
    SWEEP = "SWEEP"
    REVIVE = "REVIVE"
    PAUSE = "PAUSE"
    RESUME = "RESUME"


class ArgKind(Enum):
    """How an argument is checked before a transition runs."""

    BYTES = "bytes"  # any bytes: ids, payloads, error texts
    INT = "int"  # Valkey integer rules, with a minimum (and for durations a maximum)


@dataclass(frozen=True)
class Arg:
    name: str
    kind: ArgKind
    minimum: int = 0
    maximum: int = I64_MAX


class Rows(Enum):
    """Which job rows a transition reaches besides its declared keys (they are derived keys: the
    native module checks the caller's ACL on them itself)."""

    NONE = "none"
    JOB_ARG = "job-arg"  # the row of the id in its first argument
    PENDING_HEAD = "pending-head"  # CLAIM: the row of the id it pops
    DUE_DELAYED = "due-delayed"  # PROMOTE: the rows of the due members of delayed
    EXPIRED_ACTIVE = "expired-active"  # SWEEP: the rows of the expired members of active

    @property
    def by_score(self) -> bool:
        """The rows are picked in the score order of the set the transition takes from."""
        return self in (Rows.PENDING_HEAD, Rows.DUE_DELAYED, Rows.EXPIRED_ACTIVE)

    @property
    def bulk(self) -> bool:
        """Several rows in one call (PROMOTE's due members, SWEEP's expired ones)."""
        return self in (Rows.DUE_DELAYED, Rows.EXPIRED_ACTIVE)


@dataclass(frozen=True)
class Increment:
    """A counter a transition increments with HINCRBY (contract row D4): a row field, or a metrics
    hash's `count`."""

    field: bytes
    metrics: str | None = None  # the metrics hash (`failed`, `completed`); None: the rows' field


class Stamp(Enum):
    """N1: which row a successful call stamps with `lease_epoch` on the native side."""

    NONE = "none"
    CLAIMED = "claimed"  # the row of the id in the reply (CLAIM)
    JOB_ARG = "job-arg"  # the row of the id argument, when the reply is 1 (EXTEND)


class Moves(Enum):
    """What a successful reply tells the invariants' ledger."""

    NONE = "none"
    ENQUEUED = "enqueued"  # reply 1: the id is a job of the queue
    COMPLETED = "completed"  # reply 1: into done, metrics:completed + 1
    DEAD_LETTERED = "dead-lettered"  # reply `dead`: metrics:failed + 1
    SWEPT = "swept"  # reply [recovered, dead, ghosts, exempt]: metrics:failed + dead
    REVIVED = "revived"  # reply 1: out of dead, back to pending


@dataclass(frozen=True)
class Aim:
    """How often the generator draws a transition where the hints (its rough model of the queues) say
    there is work for it: `base`, plus each weight in `by` whose fact holds. The facts: pending (a
    queue not paused has pending ids), active (a lease is held), expired, due (a delayed id is due),
    dead, paused, claim_to_split (a split CLAIM is open and its queue not paused: D1), done_broken and
    dead_broken (with a lease held, that set is wrong-typed)."""

    base: int
    by: tuple[tuple[str, int], ...] = ()

    def weight(self, facts: dict[str, bool]) -> int:
        return self.base + sum(w for fact, w in self.by if facts[fact])


AIM_FACTS = ("pending", "active", "expired", "due", "dead", "paused", "claim_to_split", "done_broken", "dead_broken")


def _aim(base: int, **by: int) -> Aim:
    assert set(by) <= set(AIM_FACTS), set(by) - set(AIM_FACTS)
    return Aim(base, tuple(by.items()))


@dataclass(frozen=True)
class Transition:
    """One EMQ transition: its verb, its declared keys in order, its arguments, and what it reaches."""

    verb: Verb
    keys: tuple[str, ...]  # suffixes after the base `emq:{q}:`; "" is the base itself
    args: tuple[Arg, ...]
    reply_kinds: tuple[str, ...]  # the kinds of a reply that is not an error (coverage labels)
    scripted: bool = True  # False: the Lua host sends a plain command instead of a script
    rows: Rows = Rows.NONE
    reads_meta: bool = False  # CLAIM: the paused? read (the Lua host's own round trip)
    increments: tuple[Increment, ...] = ()
    metrics: tuple[str, ...] = ()  # the metrics hashes it may write
    stamps: Stamp = Stamp.NONE
    fenced: bool = False  # proves the lease by (id in active, attempts == token)
    moves: Moves = Moves.NONE
    splittable: bool = False  # the Lua host's two round trips may be split by other workers (D1)
    host_command: tuple[bytes, ...] = ()  # not scripted: the host's plain command after the meta key
    # the row fields its outcome reads (of the rows `rows` names): a value another writer left in one
    # is followed by a call of it (difftest/spec/domains.py, ROW_FIELDS); a counter it increments and
    # a fenced transition's attempts among them
    reads: tuple[bytes, ...] = ()
    reads_paused: bool = False  # its outcome reads meta's `paused` (CLAIM's pop, PAUSE's and RESUME's reply)
    takes_from: str = ""  # the set a job it moves leaves ("": none; ENQUEUE adds one)
    # its first write (the retired script's, or the host's command) is a deny-oom command (HSET, ZADD):
    # over the memory limit it is refused on both servers, writing nothing (docs/contract-decisions.md)
    first_write_grows: bool = False
    weight: int = 0  # the generator's fixed weight for it (a third of the transitions drawn)
    aim: Aim = Aim(0)  # the generator's weight by what the hints say is waiting (two thirds)

    @property
    def numkeys(self) -> int:
        return len(self.keys)

    @property
    def native_name(self) -> str:
        return f"EMQ.{self.verb}"

    @property
    def script_name(self) -> str:
        return f"{self.verb.lower()}.lua"

    @property
    def server_checked_flags(self) -> frozenset[bytes]:
        """The flags (`write`, `denyoom`) the module registers its command with, which the server
        checks before the command runs and when a transaction queues it: none for a scripted verb
        (EVALSHA has neither: a script is refused only at its first write, and so is the module's
        command), the host's plain command's own for PAUSE (HSET) and RESUME (HDEL)
        (docs/contract-decisions.md, "Two refusals at once")."""
        if self.scripted:
            return frozenset()
        return frozenset({b"write", b"denyoom"} if self.first_write_grows else {b"write"})


def _id(name: str = "id") -> Arg:
    return Arg(name, ArgKind.BYTES)


def _int(name: str, minimum: int, maximum: int = I64_MAX) -> Arg:
    return Arg(name, ArgKind.INT, minimum, maximum)


def _duration(name: str, minimum: int) -> Arg:
    return Arg(name, ArgKind.INT, minimum, MAX_DURATION_MS)


ATTEMPTS, STALLED, COUNT = b"attempts", b"stalled", b"count"
PAYLOAD, GROUP, LEASE_EPOCH, STATE, PAUSED = b"payload", b"group", b"lease_epoch", b"state", b"paused"
FAILED, COMPLETED = "failed", "completed"


@dataclass(frozen=True)
class Field:
    """A field of a queue's hash: a counter (an integer the transitions increment or compare) or not."""

    name: bytes
    counter: bool = False


# A job row's fields (the read ones in the order the generator draws them), meta's, a metrics hash's
ROW: tuple[Field, ...] = (
    Field(ATTEMPTS, counter=True), Field(STALLED, counter=True), Field(PAYLOAD), Field(GROUP), Field(LEASE_EPOCH),
    Field(STATE), Field(b"enqueued_at"), Field(b"last_error"), Field(b"finished_at"),
)  # fmt: skip
META: tuple[Field, ...] = (Field(PAUSED),)
METRICS: tuple[Field, ...] = (Field(COUNT, counter=True),)

TRANSITIONS: dict[str, Transition] = {
    t.verb: t
    for t in (
        Transition(
            Verb.ENQUEUE,
            ("pending", "delayed", ""),
            (_id(), Arg("payload", ArgKind.BYTES), _duration("delay_ms", 0)),
            ("added", "duplicate"),
            rows=Rows.JOB_ARG,
            moves=Moves.ENQUEUED,
            first_write_grows=True,
            weight=20,
            aim=_aim(20),
        ),
        Transition(
            Verb.CLAIM,
            ("pending", "active", ""),
            (_duration("lease_ms", 1),),
            ("claimed", "empty"),
            rows=Rows.PENDING_HEAD,
            reads_meta=True,
            increments=(Increment(ATTEMPTS),),
            stamps=Stamp.CLAIMED,
            splittable=True,
            reads=(ATTEMPTS, PAYLOAD, STATE),
            reads_paused=True,
            takes_from="pending",
            weight=18,
            aim=_aim(6, pending=24),
        ),
        Transition(
            Verb.EXTEND,
            ("active", ""),
            (_id(), _int("token", 0), _duration("lease_ms", 1)),
            ("extended", "fenced"),
            rows=Rows.JOB_ARG,
            stamps=Stamp.JOB_ARG,
            fenced=True,
            reads=(ATTEMPTS,),
            takes_from="active",
            first_write_grows=True,
            weight=8,
            aim=_aim(2, active=8),
        ),
        Transition(
            Verb.COMPLETE,
            ("active", "done", ""),
            (_id(), _int("token", 0)),
            ("completed", "fenced"),
            rows=Rows.JOB_ARG,
            increments=(Increment(COUNT, COMPLETED),),
            metrics=(COMPLETED,),
            fenced=True,
            moves=Moves.COMPLETED,
            reads=(ATTEMPTS, STATE),
            takes_from="active",
            weight=10,
            aim=_aim(3, active=15, done_broken=12),
        ),
        Transition(
            Verb.FAIL,
            ("active", "delayed", "dead", ""),
            (_id(), _int("token", 0), Arg("error", ArgKind.BYTES), _int("max_attempts", 1), _duration("backoff_ms", 0)),
            ("dead", "retry", "fenced"),
            rows=Rows.JOB_ARG,
            increments=(Increment(COUNT, FAILED),),
            metrics=(FAILED,),
            fenced=True,
            moves=Moves.DEAD_LETTERED,
            reads=(ATTEMPTS, STATE),
            takes_from="active",
            weight=10,
            aim=_aim(3, active=10, dead_broken=12),
        ),
        Transition(
            Verb.PROMOTE,
            ("delayed", "pending", ""),
            (_int("limit", 1),),
            ("promoted", "none-due"),
            rows=Rows.DUE_DELAYED,
            reads=(STATE,),
            takes_from="delayed",
            weight=8,
            aim=_aim(4, due=24),
        ),
        Transition(
            Verb.SWEEP,
            ("active", "pending", "dead", ""),
            (_int("max_stalled", 1), _int("limit", 1)),
            ("swept", "none-expired"),
            rows=Rows.EXPIRED_ACTIVE,
            increments=(Increment(STALLED), Increment(COUNT, FAILED)),
            metrics=(FAILED,),
            moves=Moves.SWEPT,
            reads=(STALLED, GROUP, LEASE_EPOCH, STATE),
            takes_from="active",
            weight=10,
            aim=_aim(4, expired=24),
        ),
        Transition(
            Verb.REVIVE,
            ("dead", "pending", ""),
            (_id(),),
            ("revived", "not-dead"),
            rows=Rows.JOB_ARG,
            moves=Moves.REVIVED,
            reads=(STATE,),
            takes_from="dead",
            weight=6,
            aim=_aim(2, dead=12),
        ),
        Transition(
            Verb.PAUSE,
            ("meta",),
            (),
            ("paused", "already"),
            scripted=False,
            host_command=(b"HSET", PAUSED, b"1"),
            reads_paused=True,
            first_write_grows=True,
            weight=4,
            aim=_aim(2, claim_to_split=12),
        ),
        Transition(
            Verb.RESUME,
            ("meta",),
            (),
            ("resumed", "already"),
            scripted=False,
            host_command=(b"HDEL", PAUSED),
            reads_paused=True,
            weight=4,
            aim=_aim(2, paused=12),
        ),
    )
}

VERBS: tuple[str, ...] = tuple(TRANSITIONS)
# the transitions the memory limit refuses (the rest drain the queue, or write nothing new)
REFUSED_OVER_THE_LIMIT: frozenset[str] = frozenset(str(verb) for verb, t in TRANSITIONS.items() if t.first_write_grows)
SETS: tuple[str, ...] = ("pending", "active", "delayed", "dead", "done")  # a job's homes, by its `state`
SWEEP_VERDICTS: tuple[str, ...] = ("recover", "die", "ghost", "exempt")  # SWEEP's reply, in order


def reply_kind(verb: str, reply: object) -> str:
    """The kind of a reply that is not an error or a refusal (coverage labels; the ledger).

    Each verb's kinds are `TRANSITIONS[verb].reply_kinds`: the first is the one that moved
    something, the last the one that moved nothing."""
    transition = TRANSITIONS[verb]
    moved, unmoved = transition.reply_kinds[0], transition.reply_kinds[-1]
    match transition.verb:
        case Verb.CLAIM:
            return moved if reply else unmoved
        case Verb.FAIL:
            if isinstance(reply, bytes) and reply.decode(errors="replace") in transition.reply_kinds[:2]:
                return reply.decode()
            return unmoved
        case Verb.PROMOTE:
            return moved if isinstance(reply, int) and not isinstance(reply, bool) and reply > 0 else unmoved
        case Verb.SWEEP:
            return moved if isinstance(reply, list) and any(reply) else unmoved
        case _:
            return moved if reply == 1 else unmoved


# -- keys ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Every key of one queue: the base `emq:{q}:` and what derives from it."""

    queue: bytes

    @property
    def base(self) -> bytes:
        return b"emq:{" + self.queue + b"}:"

    def key(self, suffix: str) -> bytes:
        """A declared key by its suffix in the table ("" is the base)."""
        return self.base + suffix.encode()

    @property
    def pending(self) -> bytes:
        return self.key("pending")

    @property
    def active(self) -> bytes:
        return self.key("active")

    @property
    def delayed(self) -> bytes:
        return self.key("delayed")

    @property
    def dead(self) -> bytes:
        return self.key("dead")

    @property
    def done(self) -> bytes:
        return self.key("done")

    @property
    def meta(self) -> bytes:
        return self.key("meta")

    @property
    def row_prefix(self) -> bytes:
        return self.base + b"job:"

    def row(self, job_id: bytes) -> bytes:
        return self.row_prefix + job_id

    def metrics(self, which: str) -> bytes:
        return self.base + b"metrics:" + which.encode()

    def declared(self, transition: Transition) -> list[bytes]:
        """The keys a transition declares for this queue, in the table's order."""
        return [self.key(suffix) for suffix in transition.keys]

    def derived(self) -> list[bytes]:
        """The queue-wide derived keys (meta and both metrics hashes)."""
        return [self.meta, self.metrics(FAILED), self.metrics(COMPLETED)]


@dataclass(frozen=True)
class KeyName:
    """A key read back into its queue and its part: a set's name, `meta`, `job:<id>` or
    `metrics:<which>` (whatever follows the base)."""

    queue: bytes
    rest: bytes

    @property
    def job(self) -> bytes | None:
        return self.rest[4:] if self.rest.startswith(b"job:") else None

    @property
    def metrics(self) -> str | None:
        return self.rest[8:].decode(errors="replace") if self.rest.startswith(b"metrics:") else None

    @property
    def set_name(self) -> str | None:
        name = self.rest.decode(errors="replace")
        return name if name in SETS else None


def parse_key(key: bytes) -> KeyName | None:
    """`emq:{q}:<rest>` read back; None for a key of no queue (q empty or with braces is none either).

    The one reader of the base: `queue_of_base` (the guards' layout check) and the domains' base
    classes read it through this."""
    if not key.startswith(b"emq:{"):
        return None
    close = key.find(b"}:", 5)
    if close <= 5:
        return None
    queue = key[5:close]
    if b"{" in queue or b"}" in queue:
        return None
    return KeyName(queue, key[close + 2 :])


def queue_of_base(base: bytes) -> bytes | None:
    """`emq:{q}:` → q, for a non-empty q without braces; anything else is not a base."""
    name = parse_key(base)
    return name.queue if name is not None and not name.rest else None


def base_key(queue: bytes) -> bytes:
    return Layout(queue).base


def queue_keys(transition: Transition, queue: bytes) -> list[bytes]:
    """The keys a transition declares for one queue, in the table's order."""
    return Layout(queue).declared(transition)


def row_key(queue: bytes, job_id: bytes) -> bytes:
    return Layout(queue).row(job_id)


def meta_key(queue: bytes) -> bytes:
    return Layout(queue).meta


def metrics_key(queue: bytes, which: str) -> bytes:
    return Layout(queue).metrics(which)
