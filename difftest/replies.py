"""Replies as plain data: what a server answered, with error replies kept whole, and host refusals.

Pure: the judge reads replies; parsing them off the wire is difftest/wire.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from difftest.errors import error_code


@dataclass(frozen=True)
class ErrorReply:
    """An error reply from a server, its full text kept (the code is its first word)."""

    message: str

    @property
    def code(self) -> str:
        return error_code(self.message)


@dataclass(frozen=True)
class Refused:
    """A call the Lua host refused before sending (contract row D6); nothing reached the server."""

    message: str

    @property
    def code(self) -> str:
        return error_code(self.message)


@dataclass(frozen=True)
class NotSent:
    """A step that sends nothing on this side (the native half of a split CLAIM's first trip)."""

    why: str


@dataclass(frozen=True)
class Simple:
    """A simple-string reply (`+OK`): a client tells it apart from a bulk string with the same bytes
    (a bulk string is plain `bytes`), so the two executors must agree on which they send."""

    value: bytes


@dataclass(frozen=True)
class NilArray:
    """The null array (`*-1`), which a client tells apart from the null bulk string (`None`)."""


@dataclass(frozen=True)
class Died:
    """The server's process exited while this step was under way: no reply came (a crash of the
    module is a finding, not a failure of the harness)."""

    why: str


Reply: TypeAlias = int | bytes | list["Reply"] | Simple | NilArray | ErrorReply | Refused | NotSent | Died | None
