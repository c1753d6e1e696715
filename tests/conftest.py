"""Fixtures: real embedded servers on a shared frozen clock, torn down after every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from difftest.replay.sides import LuaSide, NativeSide
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import TEST_PROJECT_PREFIX


@pytest.fixture
def group() -> Iterator[ServerGroup]:
    with ServerGroup() as servers:
        yield servers


@pytest.fixture
def lua_server(group: ServerGroup) -> EmbeddedServer:
    return group.add("lua")


@pytest.fixture
def lua(lua_server: EmbeddedServer) -> Iterator[LuaSide]:
    """The Lua host as the replay has it, with no users but the admin."""
    side = LuaSide(lua_server, {})
    yield side
    side.close()


@pytest.fixture
def native_server(group: ServerGroup) -> EmbeddedServer:
    return group.add("native", module=DEFAULT_MODULE)


@pytest.fixture
def native(native_server: EmbeddedServer) -> Iterator[NativeSide]:
    """The native host as the replay has it, with no users but the admin."""
    side = NativeSide(native_server, {})
    yield side
    side.close()


def pytest_configure(config: pytest.Config) -> None:
    """The variables difftest and this suite read, checked like flags: a bad one is one line before
    any test starts (pytest's usage error), not a silent default or a failure in every test."""
    import os

    from difftest.base.problems import SetupProblem
    from difftest.cli.preflight import campaign_examples, check_environment

    try:
        check_environment(os.environ)
        campaign_examples(os.environ)
    except SetupProblem as problem:
        raise pytest.UsageError(str(problem)) from None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the whole run (in the controlling process): no container, network or volume of the
    project is left (a compose pair the user keeps running is theirs, not the tests')."""
    if hasattr(session.config, "workerinput"):
        return
    try:
        from difftest.servers.compose import PROJECT_LABEL
        from difftest.servers.docker import docker_client
        from difftest.servers.images import LABEL

        client = docker_client()
        labelled = {"label": LABEL}
        found = [("container", c) for c in client.containers.list(all=True, ignore_removed=True, filters=labelled)]
        found += [("network", n) for n in client.networks.list(filters=labelled)]
        found += [("volume", v) for v in client.volumes.list(filters=labelled)]
    except Exception:  # no engine here: nothing can be left
        return
    left = []
    for kind, thing in found:
        labels = getattr(thing, "labels", None) or thing.attrs.get("Labels") or {}
        if labels.get(PROJECT_LABEL, TEST_PROJECT_PREFIX).startswith(TEST_PROJECT_PREFIX):
            left.append(f"{kind} {thing.name}")
    if left:
        print(f"\nproject containers, networks or volumes left after the run: {', '.join(left)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
