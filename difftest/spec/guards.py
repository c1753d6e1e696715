"""The argument rules both executors apply before a transition runs (pure; docs/contract-decisions.md).

The native module replies these errors itself; the Lua host applies the same function client-side
and refuses before sending, as EchoMQ.Jobs guards do (contract row D6).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from difftest.spec import errors
from difftest.spec.commands import TRANSITIONS, ArgKind, Transition, queue_of_base

_INTEGER = re.compile(rb"0|-?[1-9][0-9]*")  # string2ll: "-0", "007", "+1" are not integers
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_MAX_INTEGER_BYTES = 20  # string2ll's limit: "-9223372036854775808" is 20 bytes


class GuardError(Exception):
    """A call refused by the argument rules; `message` is the error text the native replies."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse_integer(raw: bytes, minimum: int, maximum: int) -> int:
    """Valkey's integer form (string2ll), then i64, then the argument's own range."""
    if not _INTEGER.fullmatch(raw):
        raise GuardError(errors.NOTINT)
    # longer than any i64 is out of range without converting (and megabytes of digits stay cheap)
    if len(raw) > _MAX_INTEGER_BYTES:
        raise GuardError(errors.OVERFLOW)
    value = int(raw)
    if not _I64_MIN <= value <= _I64_MAX:
        raise GuardError(errors.OVERFLOW)
    if not minimum <= value <= maximum:
        raise GuardError(errors.ARG)
    return value


def parse_numkeys(raw: bytes) -> int | None:
    if not _INTEGER.fullmatch(raw) or len(raw) > _MAX_INTEGER_BYTES:
        return None
    return int(raw)


def layout_queue(transition: Transition, keys: Sequence[bytes]) -> bytes:
    """The queue name the keys are the layout of, or GuardError(LAYOUT)."""
    if "" in transition.keys:
        base = keys[transition.keys.index("")]
    else:  # PAUSE/RESUME: the one key is the meta key; the base is what precedes its suffix
        suffix = transition.keys[0].encode()
        key = keys[0]
        base = key[: -len(suffix)] if key.endswith(suffix) else b""
    queue = queue_of_base(base)
    if queue is None:
        raise GuardError(errors.LAYOUT)
    for name, key in zip(transition.keys, keys, strict=True):
        if key != base + name.encode():
            raise GuardError(errors.LAYOUT)
    return queue


def check_call(verb: str, numkeys: bytes, rest: Sequence[bytes]) -> tuple[bytes, list[int | bytes]]:
    """Shape, layout, integers, in that order; returns the queue and the parsed arguments.

    A replay runs it once per step (difftest/history/resolve.py) and hands the outcome on."""
    transition = TRANSITIONS[verb]
    declared = parse_numkeys(numkeys)
    if declared != transition.numkeys or len(rest) != transition.numkeys + len(transition.args):
        raise GuardError(errors.SHAPE)
    keys, raw_args = rest[: transition.numkeys], rest[transition.numkeys :]
    queue = layout_queue(transition, keys)
    parsed: list[int | bytes] = []
    for spec, raw in zip(transition.args, raw_args, strict=True):
        if spec.kind is ArgKind.INT:
            parsed.append(parse_integer(raw, spec.minimum, spec.maximum))
        else:
            parsed.append(raw)
    return queue, parsed
