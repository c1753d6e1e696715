"""The one declarative table of EMQ transitions: keys, arguments and their types.

The Lua host's guards, the native module's registration (checked by a test against
`COMMAND INFO`), the adapters and the history generator all read this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# Durations are capped so that now + duration stays below 2^53: exact as a zset score (a double)
# and as a Lua number, and never an i64 overflow. See docs/decisions.md.
MAX_DURATION_MS = 2**52
I64_MAX = 2**63 - 1


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


@dataclass(frozen=True)
class Transition:
    """One EMQ transition: its verb, the key suffixes in order, and its arguments."""

    verb: str
    keys: tuple[str, ...]  # suffixes after the base `emq:{q}:`; "" is the base itself
    args: tuple[Arg, ...]
    scripted: bool = True  # False: the Lua host sends a plain command instead of a script

    @property
    def numkeys(self) -> int:
        return len(self.keys)

    @property
    def native_name(self) -> str:
        return f"EMQ.{self.verb}"

    @property
    def script_name(self) -> str:
        return f"{self.verb.lower()}.lua"


def _id(name: str = "id") -> Arg:
    return Arg(name, ArgKind.BYTES)


def _int(name: str, minimum: int, maximum: int = I64_MAX) -> Arg:
    return Arg(name, ArgKind.INT, minimum, maximum)


def _duration(name: str, minimum: int) -> Arg:
    return Arg(name, ArgKind.INT, minimum, MAX_DURATION_MS)


TRANSITIONS: dict[str, Transition] = {
    t.verb: t
    for t in (
        Transition(
            "ENQUEUE",
            ("pending", "delayed", ""),
            (_id(), Arg("payload", ArgKind.BYTES), _duration("delay_ms", 0)),
        ),
        Transition("CLAIM", ("pending", "active", ""), (_duration("lease_ms", 1),)),
        Transition("EXTEND", ("active", ""), (_id(), _int("token", 0), _duration("lease_ms", 1))),
        Transition("COMPLETE", ("active", "done", ""), (_id(), _int("token", 0))),
        Transition(
            "FAIL",
            ("active", "delayed", "dead", ""),
            (
                _id(),
                _int("token", 0),
                Arg("error", ArgKind.BYTES),
                _int("max_attempts", 1),
                _duration("backoff_ms", 0),
            ),
        ),
        Transition("PROMOTE", ("delayed", "pending", ""), (_int("limit", 1),)),
        Transition(
            "SWEEP",
            ("active", "pending", "dead", ""),
            (_int("max_stalled", 1), _int("limit", 1)),
        ),
        Transition("REVIVE", ("dead", "pending", ""), (_id(),)),
        Transition("PAUSE", ("meta",), (), scripted=False),
        Transition("RESUME", ("meta",), (), scripted=False),
    )
}

VERBS: tuple[str, ...] = tuple(TRANSITIONS)


def base_key(queue: bytes) -> bytes:
    return b"emq:{" + queue + b"}:"


def queue_keys(transition: Transition, queue: bytes) -> list[bytes]:
    """The keys a transition declares for one queue, in the table's order."""
    base = base_key(queue)
    return [base + suffix.encode() for suffix in transition.keys]


def row_key(queue: bytes, job_id: bytes) -> bytes:
    return base_key(queue) + b"job:" + job_id


def meta_key(queue: bytes) -> bytes:
    return base_key(queue) + b"meta"


def metrics_key(queue: bytes, which: str) -> bytes:
    return base_key(queue) + b"metrics:" + which.encode()
