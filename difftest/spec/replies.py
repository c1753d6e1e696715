"""Replies as plain data: what a server answered, with error replies kept whole, and host refusals.

Pure: the judge reads replies; parsing them off the wire is difftest/servers/wire.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from difftest.spec.errors import error_code


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


# -- RESP3 (a worker whose connection said HELLO 3): each type kept, so a map never equals an array,
# a double a bulk string, a boolean an integer. RESP3's one null `_` is None on such a connection
# (RESP3 has no null bulk string or null array to tell it from).


@dataclass(frozen=True)
class Double:
    """A RESP3 double (`,`), as the server wrote it (`1`, `1.5`, `inf`): both executors' doubles
    are formatted by the server, so the text compares exactly."""

    text: bytes


@dataclass(frozen=True)
class Boolean:
    """A RESP3 boolean (`#t`, `#f`); never equal to the integer 1 or 0 (`True == 1` in Python)."""

    value: bool


@dataclass(frozen=True)
class BigNumber:
    """A RESP3 big number (`(`), its digits."""

    digits: bytes


@dataclass(frozen=True)
class Verbatim:
    """A RESP3 verbatim string (`=`): its three-letter format and its text."""

    format: bytes
    text: bytes


@dataclass(frozen=True)
class Map:
    """A RESP3 map (`%`): its pairs in the order sent."""

    pairs: tuple[tuple[Reply, Reply], ...]


@dataclass(frozen=True)
class RespSet:
    """A RESP3 set (`~`): its members in the order sent."""

    items: tuple[Reply, ...]


@dataclass(frozen=True)
class Push:
    """A RESP3 push (`>`): out-of-band data (never a command's reply)."""

    items: tuple[Reply, ...]


@dataclass(frozen=True)
class Attributed:
    """A RESP3 attribute (`|`) and the reply it annotates."""

    attributes: tuple[tuple[Reply, Reply], ...]
    reply: Reply


@dataclass(frozen=True)
class BlobError(ErrorReply):
    """A RESP3 bulk error (`!`): an error reply (its code is its first word), never equal to the
    simple error (`-`) with the same text."""


RESP3_TYPES = (Double, Boolean, BigNumber, Verbatim, Map, RespSet, Push, Attributed)


@dataclass(frozen=True)
class Died:
    """The server's process exited while this step was under way: no reply came (a crash of the
    module is a finding, not a failure of the harness)."""

    why: str


Reply: TypeAlias = (
    int | bytes | list["Reply"] | Simple | NilArray | ErrorReply | Refused | NotSent | Died
    | Double | Boolean | BigNumber | Verbatim | Map | RespSet | Push | Attributed | None
)  # fmt: skip
