"""Value domains derived from the command table and docs/decisions.md, not from literals: the bounds of
every integer argument, the values other writers leave in the fields a transition reads, the keys each
transition reaches (for wrong types and permission classes), and ids, payloads and errors at their edges.

The generator (strategies/histories.py) draws from these with small weight; `difftest/coverage.py`
names what a replay reached with the same classifiers (`bound:*`, `value:*`, `edge:*`, `wrongtype:*`, `acl:*`,
`long:*` labels).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from difftest.commands import (
    COMPLETED,
    FAILED,
    I64_MAX,
    SETS,
    TRANSITIONS,
    ArgKind,
    Layout,
    Rows,
    Transition,
    Verb,
)

# The largest counter both executors still read exactly: a Lua number is a double (docs/decisions.md,
# "Lua number precision"); a counter of 2^53 - 1 incremented is 2^53, still exact.
EXACT_EDGE = 2**53 - 1

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
# 2^53 - 1 other than i64 max: there the retired scripts round (docs/decisions.md).
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

# The fields a transition reads, with the transitions that read them (a corruption step is
# followed by one of them) and the value classes each may hold.
ROW_FIELDS: dict[bytes, tuple[str, ...]] = {
    b"attempts": (Verb.CLAIM, Verb.EXTEND, Verb.COMPLETE, Verb.FAIL),
    b"stalled": (Verb.SWEEP,),
    b"payload": (Verb.CLAIM,),
    b"group": (Verb.SWEEP,),
    b"lease_epoch": (Verb.SWEEP,),
    b"state": (Verb.CLAIM, Verb.COMPLETE, Verb.FAIL, Verb.REVIVE, Verb.PROMOTE, Verb.SWEEP),
}
META_FIELD = b"paused"
META_READERS: tuple[str, ...] = (Verb.CLAIM, Verb.PAUSE, Verb.RESUME)
COUNT_READERS: dict[str, tuple[str, ...]] = {COMPLETED: (Verb.COMPLETE,), FAILED: (Verb.FAIL, Verb.SWEEP)}
FIELD_CLASSES: dict[str, tuple[str, ...]] = {
    "attempts": COUNTER_CLASSES, "stalled": COUNTER_CLASSES, "count": COUNTER_CLASSES,
    "payload": TEXT_CLASSES, "group": TEXT_CLASSES, "lease_epoch": TEXT_CLASSES, "state": TEXT_CLASSES,
    "paused": TEXT_CLASSES,
}  # fmt: skip


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
SCORE_READERS: dict[str, tuple[str, ...]] = {
    "pending": (Verb.CLAIM,), "delayed": (Verb.PROMOTE,), "active": (Verb.SWEEP,),
}  # fmt: skip


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


# -- ids, payloads and errors at their edges -------------------------------------------------------

BYTES_EDGES: dict[str, bytes] = {
    "empty": b"",
    "leading-space": b" j1",
    "trailing-space": b"j1 ",
    "crlf": b"j1\r\n",
    "nul": b"j\x001",
    "invalid-utf8": b"\xc3\x28",
    "braces": b"{j1}",
    "large": b"j" * 4096,
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
    """The key kinds a transition may write: what reached_keys names, but CLAIM's meta (read only)."""
    return tuple(k for k in reached_keys(transition) if not (k == "meta" and transition.verb == Verb.CLAIM))


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
