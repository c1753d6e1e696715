"""Fixtures: real embedded servers on a shared frozen clock, torn down after every test."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterator
from typing import Any
from unittest import mock

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
    server: EmbeddedServer = group.add("lua")  # the local backend's kind
    return server


@pytest.fixture
def lua(lua_server: EmbeddedServer) -> Iterator[LuaSide]:
    """The Lua host as the replay has it, with no users but the admin."""
    side = LuaSide(lua_server, {})
    yield side
    side.close()


@pytest.fixture
def native_server(group: ServerGroup) -> EmbeddedServer:
    server: EmbeddedServer = group.add("native", module=DEFAULT_MODULE)
    return server


@pytest.fixture
def native(native_server: EmbeddedServer) -> Iterator[NativeSide]:
    """The native host as the replay has it, with no users but the admin."""
    side = NativeSide(native_server, {})
    yield side
    side.close()


# ---- the test tiers: every test marked by what it needs, the pure ones kept honest --------------------
# A module all of whose tests start servers, run cargo, use Docker, a browser or another process says so
# in a module-level `pytestmark`; a module only some of whose tests do marks those tests, and names its
# fixtures that do in FIXTURE_NEEDS. Every other test is `pure`, and runs with every way of starting a
# process refused (docs/usage.md, "The test tiers").

NEEDS = ("servers", "build", "docker", "browser", "subprocess")
# the fixtures above start servers; a module declares its own fixtures' needs in a FIXTURE_NEEDS of its
# own (its fixture's name: the markers every test that uses it, directly or through another, gets)
FIXTURE_NEEDS: dict[str, tuple[str, ...]] = {
    name: ("servers",) for name in ("group", "lua_server", "native_server", "lua", "native")
}


def fixture_needs(module: Any) -> dict[str, tuple[str, ...]]:
    """The conftest's and `module`'s FIXTURE_NEEDS, checked: a need is a marker of NEEDS, a name is one
    of the module's fixtures (a usage error names what is wrong)."""
    declared = getattr(module, "FIXTURE_NEEDS", {})
    for name, needs in declared.items():
        if not isinstance(needs, tuple) or not needs or not set(needs) <= set(NEEDS):
            raise pytest.UsageError(f"{module.__name__}.FIXTURE_NEEDS[{name!r}]: a tuple of {NEEDS}, not {needs!r}")
        if not hasattr(module, name):
            raise pytest.UsageError(f"{module.__name__}.FIXTURE_NEEDS names {name!r}, no fixture of the module")
    return {**FIXTURE_NEEDS, **declared}


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    by_module: dict[str, dict[str, tuple[str, ...]]] = {}
    for item in items:
        if item.get_closest_marker("pure") is not None:
            raise pytest.UsageError(f"{item.nodeid}: `pure` is given by tests/conftest.py, never by hand")
        module = getattr(item, "module", None)
        key = getattr(module, "__name__", "")
        if key not in by_module:
            by_module[key] = fixture_needs(module) if module is not None else FIXTURE_NEEDS
        declared = by_module[key]
        used = getattr(item, "fixturenames", ())  # a test function's, its fixtures' fixtures too
        for need in dict.fromkeys(need for name in used for need in declared.get(name, ())):
            if item.get_closest_marker(need) is None:
                item.add_marker(need)
        if not any(item.get_closest_marker(need) is not None for need in NEEDS):
            item.add_marker(pytest.mark.pure)


class ImpureTest(Exception):
    """A test marked pure started a process, a server or a Docker client."""


def _impure(started: list[str]) -> ImpureTest:
    return ImpureTest(
        f"a test marked pure {'; '.join(dict.fromkeys(started))}: mark what it needs (servers, build, docker, "
        "browser or subprocess) in its module's pytestmark, or on the test in a module whose other tests need "
        "none of it (docs/usage.md, 'The test tiers')"
    )


def _refuse(started: list[str], what: str, describe: Callable[..., str] | None = None) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        started.append(f"{what} {describe(*args, **kwargs)}" if describe is not None else what)
        raise _impure(started[-1:])

    return refused


def _argv(_popen: Any, args: Any, *rest: Any, **named: Any) -> str:
    words = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
    return " ".join(" ".join(str(word) for word in words).split())[:160]


_OS_STARTS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")


@contextlib.contextmanager
def no_processes(started: list[str]) -> Iterator[None]:
    """Every way this suite and difftest start a process refused, and each attempt written down."""
    import _posixsubprocess
    import subprocess

    import docker

    refusals: list[tuple[Any, str, Callable[..., Any]]] = [
        (subprocess.Popen, "_execute_child", _refuse(started, "started a process:", _argv)),
        (_posixsubprocess, "fork_exec", _refuse(started, "started a process (multiprocessing)")),
        (EmbeddedServer, "_spawn", _refuse(started, "started a Valkey server")),
        (docker, "from_env", _refuse(started, "made a Docker client")),
        (docker.DockerClient, "__init__", _refuse(started, "made a Docker client")),
    ]
    refusals += [(os, name, _refuse(started, f"called os.{name}")) for name in _OS_STARTS if hasattr(os, name)]
    with contextlib.ExitStack() as stack:
        for owner, name, replacement in refusals:
            stack.enter_context(mock.patch.object(owner, name, replacement))
        yield


def _guarded(item: pytest.Item) -> Generator[None, object, object]:
    """One phase of a pure test with processes refused. A campaign or a CLI command catches the refusal
    and goes on (to an exit code, a failed batch): what was attempted still fails the test, by name."""
    if item.get_closest_marker("pure") is None:
        return (yield)
    started: list[str] = []
    with no_processes(started):
        try:
            outcome = yield
        except BaseException as failure:
            if not started or isinstance(failure, KeyboardInterrupt | pytest.exit.Exception):
                raise
            if isinstance(failure, ImpureTest) and len(started) == 1:
                raise  # the refusal itself, unswallowed
            raise _impure(started) from failure
    if started:
        raise _impure(started)
    return outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


def pytest_configure(config: pytest.Config) -> None:
    """The variables difftest and this suite read, checked like flags: a bad one is one line before
    any test starts (pytest's usage error), not a silent default or a failure in every test."""
    from difftest.base.problems import SetupProblem
    from difftest.cli.preflight import campaign_examples, check_environment

    try:
        check_environment(os.environ)
        campaign_examples(os.environ)
    except SetupProblem as problem:
        raise pytest.UsageError(str(problem)) from None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the whole run (in the controlling process): no container, network or volume of the
    project is left (a compose pair the user keeps running is theirs, not the tests'). A collection
    alone (--collect-only, and tests/test_markers.py's in its pure test) ran nothing to leave any."""
    if hasattr(session.config, "workerinput") or session.config.option.collectonly:
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
