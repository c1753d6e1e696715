"""Raw connections for the replay loop: commands packed into one write, replies read in order.

A `Pipe` batches commands per connection and flushes when the connection changes or a reply is
needed, so each server sees commands in exactly the order the history gives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from valkey._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR
from valkey.exceptions import ConnectionError as ValkeyConnectionError
from valkey.exceptions import InvalidResponse, ResponseError
from valkey.exceptions import TimeoutError as ValkeyTimeoutError

from difftest.spec.replies import (
    RESP3_TYPES,
    Attributed,
    BigNumber,
    BlobError,
    Boolean,
    Double,
    ErrorReply,
    Map,
    NilArray,
    Push,
    Reply,
    RespSet,
    Simple,
    Verbatim,
)

if TYPE_CHECKING:
    from difftest.servers.clients import Address

Command = Sequence[bytes | str | int]


class _Incomplete(Exception):
    """The buffer ends inside a reply: more bytes are needed."""


_BULK, _INTEGER, _ARRAY, _SIMPLE, _ERROR = b"$:*+-"
# RESP3 (a connection after HELLO 3)
_NULL, _BOOLEAN, _DOUBLE, _BIG, _BLOB_ERROR, _VERBATIM, _MAP, _SET, _PUSH, _ATTRIBUTE = b"_#,(!=%~>|"


class BlobResponseError(ResponseError):
    """A RESP3 bulk error (`!`) while parsing: becomes a BlobError, not an ErrorReply."""


def _read_bulk(buffer: bytes, line: bytes, after: int) -> tuple[bytes, int]:
    stop = after + int(line)
    if stop + 2 > len(buffer):
        raise _Incomplete
    return buffer[after:stop], stop + 2


def _read_items(buffer: bytes, count: int, after: int) -> tuple[list[Any], int]:
    items = []
    for _ in range(count):
        item, after = parse_reply(buffer, after)
        items.append(item)
    return items, after


def parse_reply(buffer: bytes, at: int) -> tuple[Any, int]:
    """One RESP2 or RESP3 reply from `buffer` at offset `at`, and the offset after it; raises _Incomplete
    when the buffer ends first. Every reply keeps its type: a simple string as `Simple`, a bulk string
    as bytes, the null array as `NilArray` apart from the null bulk string (None), an error with its
    whole text, RESP3's own types as difftest/spec/replies.py's. valkey-py's parsers give `+OK` and `$2 OK`
    as the same bytes; a client of the queue can tell them apart, so the comparison must too."""
    end = buffer.find(b"\r\n", at)
    if end < 0:
        raise _Incomplete
    kind, line, after = buffer[at], buffer[at + 1 : end], end + 2
    if kind == _BULK:
        if line == b"-1":
            return None, after
        return _read_bulk(buffer, line, after)
    if kind == _INTEGER:
        return int(line), after
    if kind == _ARRAY:
        if line == b"-1":
            return NilArray(), after
        return _read_items(buffer, int(line), after)
    if kind == _SIMPLE:
        return Simple(line), after
    if kind == _ERROR:
        return ResponseError(line.decode("utf-8", errors="replace")), after
    return _parse_resp3(buffer, kind, line, at, after)


def _parse_resp3(buffer: bytes, kind: int, line: bytes, at: int, after: int) -> tuple[Any, int]:
    """parse_reply's part for RESP3's own types (`line`: the header's text after the type byte at
    `at`; `after`: the offset past the header's CRLF)."""
    if kind == _NULL:
        return None, after
    if kind in (_MAP, _ATTRIBUTE):
        flat, after = _read_items(buffer, 2 * int(line), after)
        pairs = tuple((as_reply(flat[i]), as_reply(flat[i + 1])) for i in range(0, len(flat), 2))
        if kind == _MAP:
            return Map(pairs), after
        annotated, after = parse_reply(buffer, after)
        return Attributed(pairs, as_reply(annotated)), after
    if kind in (_SET, _PUSH):
        items, after = _read_items(buffer, int(line), after)
        return (RespSet if kind == _SET else Push)(tuple(as_reply(item) for item in items)), after
    if kind == _DOUBLE:
        return Double(line), after
    if kind == _BOOLEAN and line in (b"t", b"f"):
        return Boolean(line == b"t"), after
    if kind == _BIG:
        return BigNumber(line), after
    if kind == _BLOB_ERROR:
        text, after = _read_bulk(buffer, line, after)
        return BlobResponseError(text.decode("utf-8", errors="replace")), after
    if kind == _VERBATIM:
        text, after = _read_bulk(buffer, line, after)
        if text[3:4] != b":":
            raise InvalidResponse(f"Protocol Error: verbatim string without a format: {text[:8]!r}")
        return Verbatim(text[:3], text[4:]), after
    raise InvalidResponse(f"Protocol Error: {buffer[at : after - 2]!r}")


def pack_commands(commands: Sequence[Command]) -> bytes:
    """Commands as RESP arrays of bulk strings, in one buffer (valkey-py's packer, which goes
    through a Python call per argument and chunks the buffer, cost twice as much a step): a str
    argument as UTF-8, an int as its decimal digits."""
    out: list[bytes] = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            data = arg if isinstance(arg, bytes) else arg.encode() if isinstance(arg, str) else b"%d" % arg
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def as_reply(value: Any) -> Reply:
    """Normalise what valkey-py returned into a Reply (errors inside arrays included)."""
    if isinstance(value, ResponseError):
        return (BlobError if isinstance(value, BlobResponseError) else ErrorReply)(str(value))
    if isinstance(value, list | tuple):
        return [as_reply(item) for item in value]
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, bytes, Simple, NilArray, *RESP3_TYPES)) or value is None:
        return value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"unexpected reply type {type(value).__name__}: {value!r}")


class Wire:
    """One connection, as a user (None: the default admin user), speaking RESP2 or (`protocol` 3,
    a worker's connection after HELLO 3) RESP3, on a database (`db`, selected in its handshake)."""

    def __init__(
        self,
        address: Address,
        username: str | None = None,
        password: str | None = None,
        protocol: int = 2,
        db: int = 0,
    ) -> None:
        from difftest.servers.clients import connection_options

        kind, options = connection_options(address, username, password, timeout=60)
        # db: selected in the handshake (a SELECT round trip only off database 0)
        # the handshake (AUTH, SELECT) is read by valkey-py's own parser, as plain bytes it expects
        self.connection = kind(**{**options, "db": db})
        self.connection.connect()
        # from here on replies are read by `parse_reply`, from the socket, whole buffers at a time:
        # valkey-py's reader goes line by line through Python calls (most of a reply's cost)
        self._socket: Any = self.connection._sock  # the socket `_unread` came from
        self._unread = b""  # received, not yet parsed
        self._at = 0
        self.protocol = protocol
        if protocol == 3:
            # said here, not in valkey-py's handshake, so that `parse_reply` reads HELLO's RESP3 map and
            # every RESP3 reply after it
            hello = self.call(b"HELLO", b"3")
            if not (isinstance(hello, Map) and (b"proto", 3) in hello.pairs):
                raise ValkeyConnectionError(f"HELLO 3 was answered {hello!r}, not a RESP3 map with proto 3")

    def send(self, commands: Sequence[Command]) -> None:
        self.connection.send_packed_command([pack_commands(commands)], check_health=False)

    def read_raw(self) -> Any:
        """The next reply, typed as `parse_reply` types it; an error reply comes back as an
        ErrorReply (one inside an array stays a ResponseError, for `as_reply`)."""
        while True:
            try:
                value, self._at = parse_reply(self._unread, self._at)
                break
            except _Incomplete:
                self._receive()
        if self._at == len(self._unread):
            self._unread, self._at = b"", 0
        if isinstance(value, ResponseError):
            return (BlobError if isinstance(value, BlobResponseError) else ErrorReply)(str(value))
        return value

    def _receive(self) -> None:
        if self.connection._sock is not self._socket:  # valkey-py connected again after a loss
            self._socket, self._unread, self._at = self.connection._sock, b"", 0
        if self._socket is None:
            raise ValkeyConnectionError("Connection closed")
        try:
            chunk = self._socket.recv(65536)
        except TimeoutError as late:
            self.connection.disconnect()
            raise ValkeyTimeoutError("Timeout reading from socket") from late
        except OSError as lost:
            self.connection.disconnect()
            raise ValkeyConnectionError(f"Error while reading from socket: {lost}") from lost
        if not chunk:
            self.connection.disconnect()
            raise ValkeyConnectionError(SERVER_CLOSED_CONNECTION_ERROR)
        self._unread = self._unread[self._at :] + chunk
        self._at = 0

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


class Element:
    """One answer inside a transaction's EXEC reply (a call's, or the walk queued after it), known
    once the EXEC's is read; `fallback` answers instead when the EXEC itself is an error (a
    transaction the server aborted: nothing in it ran)."""

    __slots__ = ("at", "exec", "fallback", "raw")

    def __init__(self, raw: bool) -> None:
        self.raw = raw
        self.exec: Future | None = None
        self.at = 0
        self.fallback: Any = None

    def bind(self, exec_future: Future, at: int, fallback: Any) -> None:
        self.exec, self.at, self.fallback = exec_future, at, fallback

    def follow(self, future: Future) -> None:
        """Answer what `future` answers, whatever the EXEC did (an element with nothing of its own in
        the EXEC's reply: a call's walk in a transaction on a replica, walked on its primary after)."""
        self.exec, self.at, self.fallback = future, -1, None

    @property
    def ready(self) -> bool:
        return self.exec is not None and self.exec.ready


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

    def get_element(self, element: Element) -> Any:
        """An element of a transaction's EXEC reply (see Element)."""
        assert element.exec is not None, "the transaction was never sent"
        answer = self.get(element.exec)
        if element.at < 0:  # (`follow`)
            return answer if element.raw else as_reply(answer)
        if isinstance(answer, list):
            value = answer[element.at]
            return value if element.raw else as_reply(value)
        fallback = element.fallback
        if isinstance(fallback, Future):
            return self.get(fallback)
        return answer if fallback is None else fallback

    def reset(self) -> None:
        """Forget everything queued: the connections are gone (a restart)."""
        self._wire = None
        self._unsent.clear()
        self._unread.clear()
