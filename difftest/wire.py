"""Raw connections for the replay loop: commands packed into one write, replies read in order.

A `Pipe` batches commands per connection and flushes when the connection changes or a reply is
needed, so each server sees commands in exactly the order the history gives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from valkey._parsers.resp2 import _RESP2Parser
from valkey._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR
from valkey.connection import DefaultParser
from valkey.exceptions import ConnectionError as ValkeyConnectionError
from valkey.exceptions import InvalidResponse, ResponseError

from difftest.replies import ErrorReply, NilArray, Reply, Simple

if TYPE_CHECKING:
    from difftest.servers.clients import Address

Command = Sequence[bytes | str | int]


class WholeErrorParser(DefaultParser):  # type: ignore[misc, valid-type]
    """valkey-py's parser, except that every error reply keeps its full text, code included.

    The stock parser strips known codes (NOPERM, NOSCRIPT, ...) into exception classes; difftest
    compares error codes, so it needs them verbatim.
    """

    @classmethod
    def parse_error(cls, response: str) -> ResponseError:
        return ResponseError(response)


class TypedParser(_RESP2Parser):
    """RESP2 read with every reply's type kept: a simple string as `Simple`, a bulk string as bytes,
    the null array as `NilArray` apart from the null bulk string (None), an error with its whole
    text. valkey-py's parsers give `+OK` and `$2 OK` as the same bytes; a client of the queue can
    tell them apart, so the comparison must too (the replay's connections use this parser). Off
    (plain bytes, as valkey-py's handshake expects) until the connection is set up."""

    typed = False

    def _read_response(self, disable_decoding: bool = False) -> Any:
        buffer = self._buffer
        assert buffer is not None  # connected
        raw = buffer.readline()
        if not raw:
            raise ValkeyConnectionError(SERVER_CLOSED_CONNECTION_ERROR)
        kind, rest = raw[:1], raw[1:]
        if kind == b"$":
            return None if rest == b"-1" else buffer.read(int(rest))
        if kind == b":":
            return int(rest)
        if kind == b"*":
            if rest == b"-1":
                return NilArray() if self.typed else None
            return [self._read_response() for _ in range(int(rest))]
        if kind == b"+":
            return Simple(rest) if self.typed else rest
        if kind == b"-":
            return ResponseError(rest.decode("utf-8", errors="replace"))
        raise InvalidResponse(f"Protocol Error: {raw!r}")


def as_reply(value: Any) -> Reply:
    """Normalise what valkey-py returned into a Reply (errors inside arrays included)."""
    if isinstance(value, ResponseError):
        return ErrorReply(str(value))
    if isinstance(value, list | tuple):
        return [as_reply(item) for item in value]
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | bytes | Simple | NilArray) or value is None:
        return value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"unexpected reply type {type(value).__name__}: {value!r}")


class Wire:
    """One connection, as a user (None: the default admin user)."""

    def __init__(self, address: Address, username: str | None = None, password: str | None = None) -> None:
        from difftest.servers.clients import connection_options

        kind, options = connection_options(address, username, password, timeout=60)
        self.connection = kind(**{**options, "parser_class": TypedParser})
        self.connection.connect()
        self.connection._parser.typed = True  # the handshake (AUTH, HELLO) read its +OK as bytes

    def send(self, commands: Sequence[Command]) -> None:
        self.connection.send_packed_command(self.connection.pack_commands(commands), check_health=False)

    def read_raw(self) -> Any:
        """The next reply as the parser gives it; an error reply comes back as an ErrorReply."""
        try:
            return self.connection.read_response(disable_decoding=True)
        except ResponseError as exc:
            return ErrorReply(str(exc))

    def read(self) -> Reply:
        value = self.read_raw()
        return value if isinstance(value, ErrorReply) else as_reply(value)

    def call(self, *command: bytes | str | int) -> Reply:
        self.send([command])
        return self.read()

    def close(self) -> None:
        self.connection.disconnect()


class Future:
    """A reply that arrives when its pipe flushes."""

    __slots__ = ("raw", "ready", "value")

    def __init__(self, raw: bool) -> None:
        self.raw = raw
        self.ready = False
        self.value: Any = None


class Pipe:
    """Batches commands on one connection at a time; switching connection flushes first."""

    def __init__(self) -> None:
        self._wire: Wire | None = None
        self._unsent: list[tuple[Command, Future]] = []
        self._unread: list[Future] = []

    def add(self, wire: Wire, command: Command, raw: bool = False) -> Future:
        if self._wire is not None and wire is not self._wire:
            self.sync()
        self._wire = wire
        future = Future(raw)
        self._unsent.append((command, future))
        return future

    def send(self) -> None:
        if self._unsent and self._wire is not None:
            self._wire.send([command for command, _ in self._unsent])
            self._unread.extend(future for _, future in self._unsent)
            self._unsent.clear()

    def sync(self) -> None:
        self.send()
        wire = self._wire
        if wire is None:
            return
        for future in self._unread:
            future.value = wire.read_raw() if future.raw else wire.read()
            future.ready = True
        self._unread.clear()

    def get(self, future: Future) -> Any:
        if not future.ready:
            self.sync()
        return future.value

    def reset(self) -> None:
        """Forget everything queued: the connections are gone (a restart)."""
        self._wire = None
        self._unsent.clear()
        self._unread.clear()
