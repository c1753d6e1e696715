"""A transition call as plain data: the verb, numkeys and the rest of the command line, as bytes."""

from __future__ import annotations

from dataclasses import dataclass

from difftest.spec.commands import TRANSITIONS, queue_keys


def as_bytes(value: bytes | str | int) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()


@dataclass(frozen=True)
class Call:
    """`EMQ.<verb> <numkeys> <rest...>`: kept raw so that malformed calls (D6) are data too."""

    verb: str
    numkeys: bytes
    rest: tuple[bytes, ...]

    @classmethod
    def of(cls, verb: str, queue: bytes | str, *args: bytes | str | int) -> Call:
        """A well-laid-out call on one queue; the arguments are sent as given."""
        laid_out = _LAID_OUT.get((verb, queue))
        if laid_out is None:
            laid_out = _laid_out(verb, queue)
        numkeys, keys = laid_out
        # as_bytes, inline: the state machine makes a call on most steps
        return cls(verb, numkeys, (*keys, *[a if isinstance(a, bytes) else str(a).encode() for a in args]))

    def command(self) -> list[bytes]:
        """The native command line."""
        return [f"EMQ.{self.verb}".encode(), self.numkeys, *self.rest]


# A transition's numkeys and keys on a queue, by (verb, queue): the same few on every step of a
# generated history, so laid out once (at most this many kept: a loaded file may name many queues)
_LAID_OUT: dict[tuple[str, bytes | str], tuple[bytes, tuple[bytes, ...]]] = {}
_MAX_LAID_OUT = 256


def _laid_out(verb: str, queue: bytes | str) -> tuple[bytes, tuple[bytes, ...]]:
    keys = tuple(queue_keys(TRANSITIONS[verb], as_bytes(queue)))
    laid_out = (str(len(keys)).encode(), keys)
    if len(_LAID_OUT) < _MAX_LAID_OUT:
        _LAID_OUT[(verb, queue)] = laid_out
    return laid_out
