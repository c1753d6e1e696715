"""A transition call as plain data: the verb, numkeys and the rest of the command line, as bytes."""

from __future__ import annotations

from dataclasses import dataclass

from difftest.commands import TRANSITIONS, queue_keys


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
        transition = TRANSITIONS[verb]
        keys = queue_keys(transition, as_bytes(queue))
        return cls(verb, str(len(keys)).encode(), (*keys, *(as_bytes(a) for a in args)))

    def command(self) -> list[bytes]:
        """The native command line."""
        return [f"EMQ.{self.verb}".encode(), self.numkeys, *self.rest]
