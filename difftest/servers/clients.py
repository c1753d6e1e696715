"""Clients of a server, shared by embedded servers and containers: by its unix socket, or by TCP
for a pair that only publishes ports (the compose pair)."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import Any

import valkey
from valkey.connection import AbstractConnection, Connection, DefaultParser, UnixDomainSocketConnection
from valkey.exceptions import ResponseError

# where a server is reached: the path of its unix socket, or (host, port) over TCP
Address = Path | str | tuple[str, int]


class WholeErrorParser(DefaultParser):  # type: ignore[misc, valid-type]
    """valkey-py's parser, except that every error reply keeps its full text, code included.

    The stock parser strips known codes (NOPERM, NOSCRIPT, ...) into exception classes; difftest
    compares error codes, so it needs them verbatim.
    """

    @classmethod
    def parse_error(cls, response: str) -> ResponseError:
        return ResponseError(response)


def _options(username: str | None, password: str | None, timeout: float) -> dict[str, Any]:
    """How every connection of the harness is made: whole error texts, no CLIENT SETINFO."""
    return {
        "username": username,
        "password": password,
        "parser_class": WholeErrorParser,
        "socket_timeout": timeout,
        "lib_name": None,  # no CLIENT SETINFO round trips at connect
        "lib_version": None,
    }


def socket_options(path: Path | str, username: str | None, password: str | None, timeout: float) -> dict[str, Any]:
    return {"path": str(path), **_options(username, password, timeout)}


def connection_options(
    address: Address, username: str | None, password: str | None, timeout: float
) -> tuple[type[AbstractConnection], dict[str, Any]]:
    """The connection class and its options for an address (a socket path, or TCP host and port)."""
    if isinstance(address, tuple):
        host, port = address
        return Connection, {"host": host, "port": port, **_options(username, password, timeout)}
    return UnixDomainSocketConnection, socket_options(address, username, password, timeout)


def describe(address: Address) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)


class SocketClients:
    """A cached admin client, clients as other users, and the two reads the harness needs."""

    socket_path: Path
    _client: valkey.Valkey | None = None

    @property
    def address(self) -> Address:
        """Where the harness connects; servers reached by TCP override it."""
        return self.socket_path

    @property
    def client(self) -> valkey.Valkey:
        if self._client is None:
            self._client = self.new_client()
        return self._client

    def new_client(self, username: str | None = None, password: str | None = None) -> valkey.Valkey:
        kind, options = connection_options(self.address, username, password, timeout=30)
        pool = valkey.ConnectionPool(connection_class=kind, **options)
        return valkey.Valkey(connection_pool=pool)

    def answers(self) -> bool:
        """Whether the server answers a PING now, on a fresh connection."""
        self._drop_client()
        try:
            return bool(self.client.ping())
        except (valkey.ConnectionError, valkey.TimeoutError, valkey.BusyLoadingError, valkey.ResponseError):
            self._drop_client()
            return False

    def _drop_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def run_id(self) -> str:
        info: dict[str, object] = self.client.info("server")  # type: ignore[assignment]
        return str(info["run_id"])

    def time_ms(self) -> int:
        seconds, micros = self.client.time()  # type: ignore[misc]
        return int(seconds) * 1000 + int(micros) // 1000

    def _raw_connection(self) -> socket.socket:
        """A connection of its own to the server, no client library on it."""
        address = self.address
        if isinstance(address, tuple):
            return socket.create_connection(address, timeout=30)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(30)
            probe.connect(str(address))
        except OSError:
            probe.close()
            raise
        return probe

    def pings(self) -> bool:
        """Whether the server answers PING now (not LOADING, not gone), on a connection of its own:
        a start's last check, without making a client (a start costs a few ms; a client 0.2)."""
        try:
            with self._raw_connection() as probe:
                probe.sendall(b"PING\r\n")
                return probe.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def shutdown(self) -> None:
        """SHUTDOWN on a connection of its own, returning when the server closed it (it has
        persisted and exits) or answered (it refused); a server already gone is no error."""
        self._drop_client()
        with contextlib.suppress(OSError), self._raw_connection() as probe:
            probe.sendall(b"SHUTDOWN\r\n")
            probe.recv(256)

    def await_aof_rewrite(self) -> None:
        """Until no AOF rewrite is running or scheduled (a scheduled one forks when another child
        ends: its snapshot must not be taken in the middle of a history)."""
        while True:
            state: dict[str, Any] = self.client.info("persistence")  # type: ignore[assignment]
            if not int(state.get("aof_rewrite_in_progress", 0)) and not int(state.get("aof_rewrite_scheduled", 0)):
                return
            time.sleep(0.001)
