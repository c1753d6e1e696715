"""Replies as plain data: what a server answered, with error replies kept whole, and host refusals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from valkey.connection import DefaultParser
from valkey.exceptions import ResponseError

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


Reply: TypeAlias = int | bytes | list["Reply"] | ErrorReply | Refused | NotSent | None


class WholeErrorParser(DefaultParser):  # type: ignore[misc, valid-type]
    """valkey-py's parser, except that every error reply keeps its full text, code included.

    The stock parser strips known codes (NOPERM, NOSCRIPT, ...) into exception classes; difftest
    compares error codes, so it needs them verbatim.
    """

    @classmethod
    def parse_error(cls, response: str) -> ResponseError:
        return ResponseError(response)


def as_reply(value: Any) -> Reply:
    """Normalise what valkey-py returned into a Reply (errors inside arrays included)."""
    if isinstance(value, ResponseError):
        return ErrorReply(str(value))
    if isinstance(value, list | tuple):
        return [as_reply(item) for item in value]
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | bytes) or value is None:
        return value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"unexpected reply type {type(value).__name__}: {value!r}")
