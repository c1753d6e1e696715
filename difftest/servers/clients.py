"""Clients of a server reached by its unix socket, shared by embedded servers and containers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import valkey

from difftest.replies import WholeErrorParser


def socket_options(path: Path | str, username: str | None, password: str | None, timeout: float) -> dict[str, Any]:
    """How every connection of the harness is made: whole error texts, no CLIENT SETINFO."""
    return {
        "path": str(path),
        "username": username,
        "password": password,
        "parser_class": WholeErrorParser,
        "socket_timeout": timeout,
        "lib_name": None,  # no CLIENT SETINFO round trips at connect
        "lib_version": None,
    }


class SocketClients:
    """A cached admin client, clients as other users, and the two reads the harness needs."""

    socket_path: Path
    _client: valkey.Valkey | None = None

    @property
    def client(self) -> valkey.Valkey:
        if self._client is None:
            self._client = self.new_client()
        return self._client

    def new_client(self, username: str | None = None, password: str | None = None) -> valkey.Valkey:
        pool = valkey.ConnectionPool(
            connection_class=valkey.UnixDomainSocketConnection,
            **socket_options(self.socket_path, username, password, timeout=30),
        )
        return valkey.Valkey(connection_pool=pool)

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
