"""Fixtures: real embedded servers on a shared frozen clock, torn down after every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from difftest.servers.local import EmbeddedServer, ServerGroup
from executors.lua.adapter import LuaHost
from executors.native.adapter import DEFAULT_MODULE, NativeModule


@pytest.fixture
def group() -> Iterator[ServerGroup]:
    with ServerGroup() as servers:
        yield servers


@pytest.fixture
def lua_server(group: ServerGroup) -> EmbeddedServer:
    return group.add("lua")


@pytest.fixture
def lua(lua_server: EmbeddedServer) -> LuaHost:
    return LuaHost(lua_server.client)


@pytest.fixture
def native_server(group: ServerGroup) -> EmbeddedServer:
    return group.add("native", module=DEFAULT_MODULE)


@pytest.fixture
def native(native_server: EmbeddedServer) -> NativeModule:
    return NativeModule(native_server.client)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the whole run (in the controlling process): no container of the project is left."""
    if hasattr(session.config, "workerinput"):
        return
    try:
        from difftest.servers.docker import docker_client
        from difftest.servers.images import LABEL

        left = docker_client().containers.list(all=True, filters={"label": LABEL})
    except Exception:  # no engine here: nothing can be left
        return
    if left:
        names = ", ".join(c.name for c in left)
        print(f"\nproject containers left after the run: {names}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
