"""Value domains derived from the command table and docs/contract-decisions.md, not from literals: the bounds of
every integer argument, the values other writers leave in the fields a transition reads, the keys each
transition reaches (for wrong types and permission classes), ids, payloads and errors at their edges,
every class of the argument rules (shape, each key's layout, the integer form) from both sides, and the
generator's weight for each transition.

Every per-verb table here is derived from the command table (difftest/spec/commands.py): a verb added
there is in each of them.

The generator (strategies/steps.py) draws from these with small weight; `difftest/coverage/labels.py`
names what a replay reached with the same classifiers (`bound:*`, `value:*`, `edge:*`, `wrongtype:*`, `acl:*`,
`long:*` labels).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from difftest.spec import guards
from difftest.spec.commands import (
    AIM_FACTS,
    I64_MAX,
    META,
    METRICS,
    PAUSED,
    ROW,
    SETS,
    TRANSITIONS,
    ArgKind,
    Field,
    Layout,
    Rows,
    Transition,
    parse_key,
    queue_of_base,
)

# The largest counter both executors still read exactly: a Lua number is a double (docs/contract-decisions.md,
# "Lua number precision"); a counter of 2^53 - 1 incremented is 2^53, still exact.
EXACT_EDGE = 2**53 - 1
# The edges production's counters cross (issue 37): a signed and an unsigned 32-bit integer, a double's
# last exact integer and one past it, i64's end. A counter another writer left a few below an edge (a
# queue migrated from an older system, a count kept for years) is crossed by the history's own
# increments. Which counters each edge is drawn for: the metrics counts at every edge; `attempts` up to
# 2^53 (past it the retired CLAIM's reply is the nearest double, which N5 allows); `stalled` at the 32-bit
# edges only (the retired SWEEP compares it with max_stalled through doubles, outside the contract past
# 2^53: docs/contract-decisions.md, "Lua number precision").
COUNTER_EDGES: dict[str, int] = {"2^31": 2**31, "2^32": 2**32, "2^53": 2**53, "i64": I64_MAX}
COUNTER_EDGES_OF: dict[bytes, tuple[str, ...]] = {
    b"count": ("2^31", "2^32", "2^53", "i64"),
    b"attempts": ("2^31", "2^32", "2^53"),
    b"stalled": ("2^31", "2^32"),
}
COUNTER_EDGE_GAPS = (1, 2, 3)  # how far below an edge another writer leaves a counter


def below_edge(edge: str, gap: int) -> bytes:
    """A counter `gap` below an edge (COUNTER_EDGES): the next `gap` increments reach it."""
    return str(COUNTER_EDGES[edge] - gap).encode()


def crossed_edges(before: int, after: int) -> list[str]:
    """The edges (COUNTER_EDGES) a counter crossed from `before` to `after`: below before, reached after."""
    return [name for name, edge in COUNTER_EDGES.items() if before < edge <= after]


# -- argument bounds ------------------------------------------------------------------------------

BOUND_EDGES = ("min", "below-min", "max", "above-max")


def bound_value(verb: str, arg: str, edge: str) -> bytes:
    """An integer argument at one of its bounds or one past it (both bounds are inclusive)."""
    spec = next(a for a in TRANSITIONS[verb].args if a.name == arg)
    value = {"min": spec.minimum, "below-min": spec.minimum - 1, "max": spec.maximum, "above-max": spec.maximum + 1}
    return str(value[edge]).encode()


def bound_edge(verb: str, arg: str, raw: bytes) -> str | None:
    """Which bound an argument's bytes sit at (None: none, or not an integer of canonical form)."""
    for edge in BOUND_EDGES:
        if raw == bound_value(verb, arg, edge):
            return edge
    return None


INT_ARGS: tuple[tuple[str, str], ...] = tuple(
    (verb, a.name) for verb, t in TRANSITIONS.items() for a in t.args if a.kind is ArgKind.INT
)

# -- values other writers leave --------------------------------------------------------------------

# What another tool or an older version may have left in a field: None is the field absent.
# Counters get every integer form and its neighbours; flags and texts the forms that tell a
# present-but-empty field from an absent one. Counters leave out i64 min and values past
# 2^53 - 1 other than i64 max: there the retired scripts round (docs/contract-decisions.md).
FIELD_VALUE_CLASSES: dict[str, bytes | None] = {
    "absent": None,
    "empty": b"",
    "zero": b"0",
    "multi-digit": b"10",
    "text": b"yes",
    "negative": b"-1",
    "negative-zero": b"-0",
    "leading-zero": b"007",
    "plus-sign": b"+5",
    "spaces": b" 5 ",
    "fraction": b"1.5",
    "exact-edge": str(EXACT_EDGE).encode(),
    "i64-max": str(I64_MAX).encode(),
}
TEXT_CLASSES = ("absent", "empty", "zero", "text", "spaces")
COUNTER_CLASSES = tuple(FIELD_VALUE_CLASSES)

# The fields a transition reads (the command table's `reads`, `reads_paused` and `increments`), with
# the transitions that read them (a value another writer left is followed by one of them) and the
# value classes each may hold.


def _row_readers(field: bytes) -> tuple[str, ...]:
    """The transitions that read a row field, in the order the generator draws them: those that read
    one row (their id argument's, the pending head's) first, then those that read rows in bulk
    (PROMOTE's due members, SWEEP's expired ones), each in the table's order."""
    readers = [verb for verb, t in TRANSITIONS.items() if field in t.reads]
    return tuple(sorted(readers, key=lambda verb: TRANSITIONS[verb].rows.bulk))


ROW_FIELDS: dict[bytes, tuple[str, ...]] = {f.name: _row_readers(f.name) for f in ROW if _row_readers(f.name)}
META_FIELD = PAUSED
META_READERS: tuple[str, ...] = tuple(verb for verb, t in TRANSITIONS.items() if t.reads_paused)
# a metrics hash's count, by the hash: the transitions that increment it
COUNT_READERS: dict[str, tuple[str, ...]] = {
    which: tuple(verb for verb, t in TRANSITIONS.items() if which in (i.metrics for i in t.increments))
    for which in dict.fromkeys(i.metrics for t in TRANSITIONS.values() for i in t.increments if i.metrics)
}
_READ: tuple[Field, ...] = (
    *(f for f in ROW if f.name in ROW_FIELDS),
    *(METRICS if COUNT_READERS else ()),
    *(META if META_READERS else ()),
)
# every field read, counters first: counters get every integer form, the others the text forms
FIELD_CLASSES: dict[str, tuple[str, ...]] = {
    f.name.decode(): COUNTER_CLASSES if f.counter else TEXT_CLASSES for f in sorted(_READ, key=lambda f: not f.counter)
}


# Fields of their own that an operator or a dashboard adds to `meta` and to rows (no transition
# reads them; every transition keeps them, as the scripts' HSET, HDEL and ZADD do), and their values.
# A field is foreign when it is none of the queue's own (the command table's ROW and META).
QUEUE_ROW_FIELDS = frozenset(f.name for f in ROW)
QUEUE_META_FIELDS = frozenset(f.name for f in META)
FOREIGN_FIELDS: tuple[bytes, ...] = (b"owner", b"note", b"dashboard:seen_at", b"priority", b"\xff\x00")
FOREIGN_VALUES: tuple[bytes, ...] = (b"ops", b"", b"1", b"\x00\xff")


def field_value(draw_pick: Callable[[tuple[str, ...]], str], field: str) -> bytes | None:
    """A value of one of the field's classes, chosen by `draw_pick`."""
    return FIELD_VALUE_CLASSES[draw_pick(FIELD_CLASSES[field])]


# Scores other writers leave in a set the next transition reads in order (and PROMOTE copies).
SCORE_CLASSES: dict[str, bytes] = {
    "fraction": b"1.5",
    "negative": b"-5",
    "-inf": b"-inf",
    "+inf": b"+inf",
    "zero": b"0",
    "exponent": b"1e3",
}
# a set whose order a transition picks its rows in: the transitions that do
SCORE_READERS: dict[str, tuple[str, ...]] = {
    name: tuple(verb for verb, t in TRANSITIONS.items() if t.rows.by_score and t.takes_from == name)
    for name in dict.fromkeys(t.takes_from for t in TRANSITIONS.values() if t.rows.by_score)
}


def value_class(value: bytes | None) -> str:
    """The class of a field's value as FIELD_VALUE_CLASSES names it ("other" for the rest)."""
    for name, example in FIELD_VALUE_CLASSES.items():
        if value == example:
            return name
    return "other"


def lenient_integer(value: bytes | None) -> int | None:
    """What a careless reader would take the value for (the token a worker would present)."""
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


# -- the generator's weight for each transition ----------------------------------------------------

# The fixed weights (the command table's `weight`), heaviest first and in the table's order among
# equals: the order a weighted draw shrinks towards
PLAIN_VERB_WEIGHTS: tuple[tuple[str, int], ...] = tuple(
    sorted(((verb, t.weight) for verb, t in TRANSITIONS.items()), key=lambda weighed: -weighed[1])
)


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
    """Transitions weighted by what the queues hold as far as the generator's hints know (the command
    table's `aim`): work that is waiting draws the transition that does it; a corrupt set with a lease
    held draws the transition that meets it (dead: FAIL's dead-letter path; done: COMPLETE); an open
    split claim draws PAUSE and RESUME (D1). In the table's order."""
    facts = {"pending": pending, "active": active, "expired": expired, "due": due, "dead": dead, "paused": paused,
             "claim_to_split": claims_open and not paused, "done_broken": done_broken,
             "dead_broken": dead_broken}  # fmt: skip
    assert set(facts) == set(AIM_FACTS)
    return tuple((verb, t.aim.weight(facts)) for verb, t in TRANSITIONS.items())


# -- ids, payloads and errors at their edges -------------------------------------------------------

# A payload or an error text of a megabyte (issue 37: production's documents and stack traces), drawn
# for single calls only; a CLAIM's reply carries it back. The server's own edge, `proto-max-bulk-len`
# (512 MiB by default), is not drawn: a history at it would move gigabytes a step.
MEGABYTE = b"m" * 2**20

BYTES_EDGES: dict[str, bytes] = {
    "empty": b"",
    "leading-space": b" j1",
    "trailing-space": b"j1 ",
    "crlf": b"j1\r\n",
    "nul": b"j\x001",
    "invalid-utf8": b"\xc3\x28",
    "braces": b"{j1}",
    "large": b"j" * 4096,
    # as production spells them (issue 36): a UUID, colons and capitals, valid UTF-8 of several scripts,
    # and digits only: the default clock's start as text, the score of a job enqueued then
    "uuid": b"018f3c2e-7b1a-7cc0-9b1e-3f2a4c5d6e7f",
    "colons-capitals": b"Order:EU:42",
    "utf8-scripts": "\u4f5c\u4e1a-\u0437\u0430\u0434\u0430\u0447\u0430-\u00df-\u03b4".encode(),
    "digits": b"1767225600999",
}


def bytes_class(value: bytes) -> str | None:
    for name, example in BYTES_EDGES.items():
        if value == example:
            return name
    return None


# -- keys each transition reaches -------------------------------------------------------------------

ROWS_KEY = "job:*"


def reached_keys(transition: Transition) -> tuple[str, ...]:
    """The key kinds a transition reads or writes (its declared sets, meta, rows, metrics), by the
    suffix after the base; "job:*" stands for the rows."""
    kinds = [k for k in transition.keys if k]
    if transition.reads_meta:
        kinds.append("meta")
    if transition.rows is not Rows.NONE:
        kinds.append(ROWS_KEY)
    kinds += [f"metrics:{which}" for which in transition.metrics]
    return tuple(dict.fromkeys(kinds))


def written_keys(transition: Transition) -> tuple[str, ...]:
    """The key kinds a transition may write: what reached_keys names, but a meta it only reads (CLAIM's,
    which it does not declare)."""
    return tuple(k for k in reached_keys(transition) if not (k == "meta" and k not in transition.keys))


KEY_KINDS: tuple[str, ...] = tuple(dict.fromkeys(k for t in TRANSITIONS.values() for k in reached_keys(t)))

# The types a key can be made that is not its own: every key is a zset or a hash.
WRONG_TYPES = ("string", "list", "set", "other-container")


def key_type(kind: str) -> str:
    return "zset" if kind in SETS else "hash"


def wrong_type_commands(key: bytes, kind: str, wrong: str) -> tuple[tuple[bytes, ...], ...]:
    """Raw commands that leave `key` of the type `wrong` in place of its own."""
    if wrong == "string":
        return ((b"SET", key, b"junk"),)
    made = {
        "list": (b"RPUSH", key, b"junk"),
        "set": (b"SADD", key, b"junk"),
        "other-container": (b"HSET", key, b"junk", b"1") if key_type(kind) == "zset" else (b"ZADD", key, b"1", b"junk"),
    }[wrong]
    return ((b"DEL", key), made)


# -- permission classes ------------------------------------------------------------------------------

PERMS = ("none", "read", "write")  # and "both": any caller granted the whole queue


def acl_user(kind: str, perm: str) -> str:
    return f"acl-{kind.replace(':', '-').replace('*', 'any')}-{perm}"


def _pattern(queue: bytes, kind: str) -> str:
    return Layout(queue).base.decode("latin-1") + kind


def permission_users(queues: tuple[bytes, ...]) -> dict[str, tuple[str, ...]]:
    """One user per key kind and restricted permission: every key of each queue granted (the base
    too: every transition declares it), but that kind only `perm` (none: not granted at all)."""
    users: dict[str, tuple[str, ...]] = {}
    for kind in KEY_KINDS:
        for perm in PERMS:
            rules: list[str] = []
            for queue in queues:
                rules.append(f"~{_pattern(queue, '')}")
                rules += [f"~{_pattern(queue, other)}" for other in KEY_KINDS if other != kind]
                if perm != "none":
                    rules.append(f"%{perm[0].upper()}~{_pattern(queue, kind)}")
            users[acl_user(kind, perm)] = tuple(rules)
    return users


@dataclass(frozen=True)
class Restriction:
    kind: str
    perm: str


RESTRICTIONS: dict[str, Restriction] = {
    acl_user(kind, perm): Restriction(kind, perm) for kind in KEY_KINDS for perm in PERMS
}


DECLARED = "declared"


def acl_key(kind: str) -> str:
    """How a key kind is named in `acl:*` labels: the declared sets as one, "declared" (the server
    checks them before either executor runs, alike for both); meta, rows and metrics each by name
    (derived keys: the native checks them itself, where a script's `redis.call` would)."""
    return DECLARED if kind in SETS else kind


def acl_keys(transition: Transition) -> tuple[str, ...]:
    return tuple(dict.fromkeys(acl_key(kind) for kind in reached_keys(transition)))


def acl_labels() -> tuple[str, ...]:
    """`acl:<verb>:<key>:<perm>` for every key each transition reaches and every permission."""
    return tuple(
        f"acl:{verb}:{kind}:{perm}"
        for verb, t in TRANSITIONS.items()
        for kind in acl_keys(t)
        for perm in (*PERMS, "both")
    )


def acl_reached(transition: Transition, restriction: Restriction) -> list[str]:
    """The `acl:*` labels a call of the transition by a restricted user reaches."""
    restricted = restriction.kind in reached_keys(transition)
    return [
        f"acl:{transition.verb}:{kind}:"
        + (restriction.perm if restricted and acl_key(restriction.kind) == kind else "both")
        for kind in acl_keys(transition)
    ]


# -- the argument rules at their class boundaries (docs/contract-decisions.md, "Argument rules") -------------
#
# Each rule of the three checks (shape, layout, integers), from both sides: the classes a call can
# break it by, and for the layout and the integers the classes that look broken but are accepted.
# The generator breaks one rule of a call at a time (strategies/steps.py, `malformed`); the
# coverage table names what a replay sent (`edge:shape:*`, `edge:layout:*`, `edge:int:*`) with
# `argument_edges` below, only where the call reached the check (the first failing check wins).

NOTINT, OVERFLOW, ARG = "NOTINT", "OVERFLOW", "ARG"  # the error codes the decisions give
I64_MIN = -(2**63)


@dataclass(frozen=True)
class IntClass:
    """Bytes at one boundary of Valkey's integer form (string2ll), and what the form makes of them:
    the integer they read as, or the error their form earns whatever the argument (NOTINT, OVERFLOW)."""

    raw: bytes
    form: int | str


INT_CLASSES: dict[str, IntClass] = {
    # digits only, nothing else: the accepted side, then everything else Lua's tonumber or a lenient
    # parser would take (spaces, a newline, a decimal point, an exponent, hex, inf, underscores, a
    # non-ASCII digit) and what no parser takes (empty, text, a NUL inside)
    "plain": IntClass(b"7", 7),
    "empty": IntClass(b"", NOTINT),
    "text": IntClass(b"seven", NOTINT),
    "leading-space": IntClass(b" 7", NOTINT),
    "trailing-space": IntClass(b"7 ", NOTINT),
    "trailing-newline": IntClass(b"7\n", NOTINT),
    "nul-inside": IntClass(b"7\x007", NOTINT),
    "trailing-nul": IntClass(b"7\x00", NOTINT),  # a C string's reader would stop at the NUL and see 7
    "fraction": IntClass(b"7.0", NOTINT),
    "exponent": IntClass(b"7e0", NOTINT),
    "hex": IntClass(b"0x7", NOTINT),
    "inf": IntClass(b"inf", NOTINT),
    "underscore": IntClass(b"1_0", NOTINT),
    "unicode-digit": IntClass("\uff17".encode(), NOTINT),  # a fullwidth 7: a digit to Python's int()
    # an optional `-`, no `+`
    "negative": IntClass(b"-7", -7),
    "minus-only": IntClass(b"-", NOTINT),
    "double-minus": IntClass(b"--7", NOTINT),
    "plus-sign": IntClass(b"+7", NOTINT),
    # no leading zeros, but `0` itself; `-0` refused
    "zero": IntClass(b"0", 0),
    "leading-zero": IntClass(b"07", NOTINT),
    "zeros": IntClass(b"00", NOTINT),
    "negative-zero": IntClass(b"-0", NOTINT),
    "negative-leading-zero": IntClass(b"-07", NOTINT),
    # the edges of i64, and lengths: of the form but outside i64 however long; the form is read first
    "nineteen-digits": IntClass(b"1" + b"0" * 18, 10**18),
    "i64-max": IntClass(str(I64_MAX).encode(), I64_MAX),
    "above-i64-max": IntClass(str(I64_MAX + 1).encode(), OVERFLOW),
    "i64-min": IntClass(str(I64_MIN).encode(), I64_MIN),
    "below-i64-min": IntClass(str(I64_MIN - 1).encode(), OVERFLOW),
    "twenty-digits": IntClass(b"1" + b"0" * 19, OVERFLOW),
    "many-digits": IntClass(b"9" * 4096, OVERFLOW),
    "many-digits-negative": IntClass(b"-" + b"9" * 40, OVERFLOW),
    "many-digits-then-text": IntClass(b"9" * 40 + b"x", NOTINT),
    "many-leading-zeros": IntClass(b"0" * 40 + b"7", NOTINT),
}


def int_class(raw: bytes) -> str | None:
    """The integer class these bytes are (None: none of them)."""
    for name, cls in INT_CLASSES.items():
        if raw == cls.raw:
            return name
    return None


def int_outcome(verb: str, arg: str, cls: str) -> str | None:
    """What the decisions say an argument of this class earns: an error code, or None (accepted):
    the form first (NOTINT, OVERFLOW), then the argument's own minimum and maximum (ARG)."""
    form = INT_CLASSES[cls].form
    if isinstance(form, str):
        return form
    spec = next(a for a in TRANSITIONS[verb].args if a.name == arg)
    return None if spec.minimum <= form <= spec.maximum else ARG


# Shape: numkeys must be the command's exact key count (string2ll's form, so `03` and `+3` are not
# it), and exactly the command's arguments follow the keys. Every class is refused (EMQ SHAPE).
NUMKEYS_CLASSES: dict[str, Callable[[int], bytes]] = {
    "numkeys-one-less": lambda n: str(n - 1).encode(),
    "numkeys-one-more": lambda n: str(n + 1).encode(),
    "numkeys-zero": lambda n: b"0",
    "numkeys-negative": lambda n: str(-n).encode(),
    "numkeys-not-an-integer": lambda n: b"keys",
    "numkeys-empty": lambda n: b"",
    "numkeys-leading-zero": lambda n: b"0" + str(n).encode(),
    "numkeys-plus-sign": lambda n: b"+" + str(n).encode(),
    "numkeys-trailing-space": lambda n: str(n).encode() + b" ",
    "numkeys-overflow": lambda n: b"9" * 25,
}
ARGC_CLASSES: dict[str, Callable[[tuple[bytes, ...], int], tuple[bytes, ...]]] = {
    "argc-one-short": lambda rest, n: rest[:-1],
    "argc-one-extra": lambda rest, n: (*rest, b"extra"),
    "argc-keys-only": lambda rest, n: rest[:n],
    "argc-none": lambda rest, n: (),
}
SHAPE_CLASSES: tuple[str, ...] = (*NUMKEYS_CLASSES, *ARGC_CLASSES)


def shape_classes(transition: Transition) -> tuple[str, ...]:
    """The shape classes of a transition: all but "argc-keys-only" for one without arguments."""
    return tuple(c for c in SHAPE_CLASSES if c != "argc-keys-only" or transition.args)


def shaped(transition: Transition, rest: tuple[bytes, ...], cls: str) -> tuple[bytes, tuple[bytes, ...]]:
    """A well-formed call's numkeys and rest with its shape broken by one class."""
    n = transition.numkeys
    if cls in NUMKEYS_CLASSES:
        return NUMKEYS_CLASSES[cls](n), rest
    return str(n).encode(), ARGC_CLASSES[cls](rest, n)


def shape_class(transition: Transition, numkeys: bytes, rest: tuple[bytes, ...]) -> str | None:
    """The shape class a call was sent with (None: its shape is right, or no class names it). Where
    two classes make the same bytes (PAUSE's numkeys one less is zero) the first in order names it."""
    n = transition.numkeys
    if numkeys != str(n).encode():
        return next((c for c, make in NUMKEYS_CLASSES.items() if make(n) == numkeys), None)
    expected = n + len(transition.args)
    if len(rest) == expected:
        return None
    lengths = {"argc-one-short": expected - 1, "argc-one-extra": expected + 1, "argc-keys-only": n, "argc-none": 0}
    return next((c for c in ARGC_CLASSES if lengths[c] == len(rest)), None)


# Layout: the base key `emq:{q}:` with q non-empty and free of braces, every other key the base and
# its suffix. The base's classes (for PAUSE/RESUME, the base the meta key is built on) break one
# rule of its form each, or look odd and are accepted (q of any other bytes); "other-queue" is a
# base of another queue than the other keys'. A derived key's classes keep the base and break its
# suffix, or keep the suffix on another queue's base.
BASE = "base"
BASE_CLASSES: dict[str, Callable[[bytes], bytes]] = {
    "empty-queue": lambda q: b"emq:{}:",
    "open-brace": lambda q: b"emq:{" + q + b"{}:",
    "close-brace": lambda q: b"emq:{" + q + b"}}:",
    "braces": lambda q: b"emq:{{" + q + b"}}:",
    "no-prefix": lambda q: b"{" + q + b"}:",
    "wrong-prefix": lambda q: b"EMQ:{" + q + b"}:",
    "no-braces": lambda q: b"emq:" + q + b":",
    "no-colon": lambda q: b"emq:{" + q + b"}",
}
ACCEPTED_QUEUES: dict[str, Callable[[bytes], bytes]] = {
    "nul": lambda q: q + b"\x00",
    "spaces": lambda q: b" " + q + b" ",
    "prefix-inside": lambda q: b"emq:" + q,
    "colon": lambda q: q + b":x",
    "invalid-utf8": lambda q: q + b"\xff",
    "glob": lambda q: q + b"*?[a]\\",  # a pattern's characters (SCAN MATCH, ACL key patterns)
    "long": lambda q: q + b"q" * (LONG_QUEUE - len(q)),
    # as production names queues (issue 36): capitals and dots, several scripts, digits only
    "capitals": lambda q: b"Billing.EU-" + q.upper(),
    "utf8-scripts": lambda q: "\u4f5c\u4e1a-\u041e\u0447\u0435\u0440\u0435\u0434\u044c-".encode() + q,
    "digits": lambda q: b"%d" % int.from_bytes(q[:8], "big"),  # (of its first bytes: a long name too)
}
LONG_QUEUE = 4096
OTHER_QUEUE = "other-queue"
SUFFIX_CLASSES: dict[str, Callable[[str, str], bytes]] = {
    "no-suffix": lambda suffix, other: b"",
    "truncated": lambda suffix, other: suffix[:-1].encode(),
    "trailing-nul": lambda suffix, other: suffix.encode() + b"\x00",
    "trailing-space": lambda suffix, other: suffix.encode() + b" ",
    "case": lambda suffix, other: suffix.upper().encode(),
    "other-suffix": lambda suffix, other: other.encode(),
}
SUFFIXES: tuple[str, ...] = tuple(dict.fromkeys(k for t in TRANSITIONS.values() for k in t.keys if k))


def _has_base(transition: Transition) -> bool:
    return "" in transition.keys


def layout_classes(transition: Transition, position: str) -> tuple[str, ...]:
    """The classes of one key position of a transition (BASE, or a derived key's suffix)."""
    if position == BASE:
        shared = (OTHER_QUEUE,) if sum(1 for k in transition.keys if k) >= 2 else ()
        return (*BASE_CLASSES, *ACCEPTED_QUEUES, *shared)
    return (*SUFFIX_CLASSES, *((OTHER_QUEUE,) if _has_base(transition) else ()))


def layout_positions(transition: Transition) -> tuple[str, ...]:
    return (BASE, *(k for k in transition.keys if k))


def layout_labels() -> tuple[str, ...]:
    """`edge:layout:<position>:<class>`: each position with the classes some transition gives it."""
    positions = (BASE, *SUFFIXES)
    return tuple(
        f"edge:layout:{position}:{cls}"
        for position in positions
        for cls in dict.fromkeys(
            c for t in TRANSITIONS.values() if position in layout_positions(t) for c in layout_classes(t, position)
        )
    )


def _other_suffix(transition: Transition, suffix: str) -> str:
    """Another key's suffix for this one: the transition's next declared key, or another set."""
    declared = [k for k in transition.keys if k and k != suffix]
    return declared[0] if declared else next(s for s in SETS if s != suffix)


def laid_out(transition: Transition, queue: bytes, position: str, cls: str, other: bytes) -> tuple[bytes, ...]:
    """The transition's keys on `queue` with one position of the class `cls` (`other`: another
    queue's name, for "other-queue")."""
    base = Layout(queue).base
    if position == BASE:
        if cls in BASE_CLASSES:
            base = BASE_CLASSES[cls](queue)
        elif cls in ACCEPTED_QUEUES:
            base = Layout(ACCEPTED_QUEUES[cls](queue)).base
        else:  # other-queue: every derived key on `other`, the base on `queue`
            return tuple(base if not k else Layout(other).key(k) for k in transition.keys)
        return tuple(base + k.encode() for k in transition.keys)
    keys = [base + k.encode() for k in transition.keys]
    index = transition.keys.index(position)
    if cls == OTHER_QUEUE:
        keys[index] = Layout(other).key(position)
    else:
        keys[index] = base + SUFFIX_CLASSES[cls](position, _other_suffix(transition, position))
    return tuple(keys)


def base_class(base: bytes) -> str | None:
    """The class of a base key's form (None: a plain base, or none that BASE_CLASSES names): the
    accepted queue's (`queue_of_base`, the guards' reading), else the rule of the form it breaks."""
    accepted = queue_of_base(base)
    if accepted is not None:
        return queue_class(accepted)
    if not base.startswith(b"emq:"):
        if base[:4].lower() == b"emq:":
            return "wrong-prefix"
        return "no-prefix" if base.startswith(b"{") else None
    if not base.startswith(b"emq:{"):
        return "no-braces"
    if not base.endswith(b"}:") or len(base) < len(b"emq:{}:"):
        return "no-colon" if base.endswith(b"}") else None
    queue = base[len(b"emq:{") : -len(b"}:")]
    if not queue:
        return "empty-queue"
    if b"{" in queue:
        return "braces" if b"}" in queue else "open-brace"
    return "close-brace" if b"}" in queue else None


def queue_class(queue: bytes) -> str | None:
    """The accepted class of a queue name (None: a plain name)."""
    if len(queue) >= LONG_QUEUE:
        return "long"
    if b"\x00" in queue:
        return "nul"
    if b"*" in queue:
        return "glob"
    if queue.startswith(b" ") and queue.endswith(b" "):
        return "spaces"
    if queue.startswith(b"emq:"):
        return "prefix-inside"
    if b":" in queue:
        return "colon"
    try:
        name = queue.decode()
    except UnicodeDecodeError:
        return "invalid-utf8"
    if name.isascii() and name.isdigit():
        return "digits"
    if not name.isascii():
        return "utf8-scripts"
    if name != name.lower():
        return "capitals"
    return None


def _queue_of(key: bytes, suffix: str) -> bytes | None:
    """The queue of a key that is some queue's base and `suffix`, else None."""
    name = parse_key(key)
    return name.queue if name is not None and name.rest == suffix.encode() else None


def layout_reached(transition: Transition, keys: tuple[bytes, ...]) -> list[tuple[str, str]]:
    """The (position, class) pairs a call's keys were sent with (pure; the keys are the call's
    declared keys, the shape already right)."""
    reached: list[tuple[str, str]] = []
    if _has_base(transition):
        base: bytes | None = keys[transition.keys.index("")]
    else:  # PAUSE/RESUME: the base the one key is built on
        meta = transition.keys[0].encode()
        base = keys[0][: -len(meta)] if keys[0].endswith(meta) else None
    form = base_class(base) if base is not None else None
    if form is not None:
        reached.append((BASE, form))
    if form in BASE_CLASSES:
        return reached
    queue = queue_of_base(base) if base is not None else None
    derived = [(k, key) for k, key in zip(transition.keys, keys, strict=True) if k]
    queues = [_queue_of(key, k) for k, key in derived]
    if _has_base(transition) and queue is not None and len(derived) >= 2:
        others = set(queues)
        if len(others) == 1 and None not in others and queue not in others:
            return [*reached, (BASE, OTHER_QUEUE)]
    for index, ((suffix, key), of) in enumerate(zip(derived, queues, strict=True)):
        if of is not None:
            # of another queue than the base's, where every other derived key is of the base's
            besides = [q for i, q in enumerate(queues) if i != index]
            if queue is not None and of != queue and all(q == queue for q in besides):
                reached.append((suffix, OTHER_QUEUE))
            continue
        name = parse_key(key)
        if name is None or (queue is not None and name.queue != queue):
            continue
        other = _other_suffix(transition, suffix)
        cls = next((c for c, make in SUFFIX_CLASSES.items() if name.rest == make(suffix, other)), None)
        if cls is None and name.rest.decode(errors="replace") in (*SETS, "meta"):
            cls = "other-suffix"
        if cls is not None:
            reached.append((suffix, cls))
    return reached


def argument_edges(transition: Transition, numkeys: bytes, rest: tuple[bytes, ...]) -> list[str]:
    """The `edge:shape:*`, `edge:layout:*` and `edge:int:*` labels a call reached, in the order of the
    checks: a layout class only with the shape right, an integer class only with the layout right
    and every integer before it accepted."""
    shape = shape_class(transition, numkeys, rest)
    if shape is not None:
        return [f"edge:shape:{shape}"]
    if numkeys != str(transition.numkeys).encode() or len(rest) != transition.numkeys + len(transition.args):
        return []
    keys = rest[: transition.numkeys]
    labels = [f"edge:layout:{position}:{cls}" for position, cls in layout_reached(transition, keys)]
    try:
        guards.layout_queue(transition, keys)
    except guards.GuardError:
        return labels
    for spec, raw in zip(transition.args, rest[transition.numkeys :], strict=True):
        if spec.kind is not ArgKind.INT:
            continue
        cls = int_class(raw)
        if cls is not None:
            labels.append(f"edge:int:{cls}")
        try:
            guards.parse_integer(raw, spec.minimum, spec.maximum)
        except guards.GuardError:
            break
    return labels


# two argument rules broken in one call (issue 36): which refusal wins is the guards' order (the
# layout before the integers, the integers in argument order), on both executors
FAULT_PAIRS = ("layout+int", "int+int")


def argument_faults(transition: Transition, numkeys: bytes, rest: tuple[bytes, ...]) -> list[str]:
    """The argument rules a well-shaped call breaks, each checked on its own, in the guards' order:
    "layout" (its keys are not one queue's), then "int" for each integer out of its form or range."""
    if numkeys != str(transition.numkeys).encode() or len(rest) != transition.numkeys + len(transition.args):
        return []
    faults: list[str] = []
    try:
        guards.layout_queue(transition, rest[: transition.numkeys])
    except guards.GuardError:
        faults.append("layout")
    for spec, raw in zip(transition.args, rest[transition.numkeys :], strict=True):
        if spec.kind is ArgKind.INT:
            try:
                guards.parse_integer(raw, spec.minimum, spec.maximum)
            except guards.GuardError:
                faults.append("int")
    return faults


def fault_label(transition: Transition, numkeys: bytes, rest: tuple[bytes, ...]) -> str | None:
    """`edge:faults:<first>+<second>` for a call that breaks two argument rules or more (None otherwise)."""
    faults = argument_faults(transition, numkeys, rest)
    return f"edge:faults:{faults[0]}+{faults[1]}" if len(faults) >= 2 else None


def argument_labels() -> tuple[str, ...]:
    """Every label `argument_edges` (and `fault_label`) can name, each once."""
    return (
        *(f"edge:shape:{cls}" for cls in SHAPE_CLASSES),
        *layout_labels(),
        *(f"edge:int:{cls}" for cls in INT_CLASSES),
        *(f"edge:faults:{pair}" for pair in FAULT_PAIRS),
    )
