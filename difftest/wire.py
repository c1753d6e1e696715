"""Raw connections for the replay loop: commands packed into one write, replies read in order.

A `Pipe` batches commands per connection and flushes when the connection changes or a reply is
needed, so each server sees commands in exactly the order the history gives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from valkey.connection import DefaultParser
from valkey.exceptions import ResponseError

from difftest.replies import ErrorReply, Reply

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


class Wire:
    """One connection, as a user (None: the default admin user)."""

    def __init__(self, address: Address, username: str | None = None, password: str | None = None) -> None:
        from difftest.servers.clients import connection_options

        kind, options = connection_options(address, username, password, timeout=60)
        self.connection = kind(**options)
        self.connection.connect()

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
