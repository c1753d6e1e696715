"""The test tiers (docs/usage.md, "The test tiers"): every marker registered, every module that starts
something declares it, the pure tier hundreds strong, and the guard that keeps it pure refusing every
way of starting a process. Pure itself: the suite is collected in this process, not run."""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from difftest.servers.local import EmbeddedServer
from tests.conftest import NEEDS, ImpureTest, no_processes

TESTS = Path(__file__).resolve().parent
# a module whose source names one of these starts servers, a process, a build, Docker or a browser
# somewhere: at least one of its tests must say what it needs (or the declaration was forgotten whole)
STARTERS = re.compile(
    r"\b(ServerGroup|EmbeddedServer|Replayer|run_campaign|replay_once|in_browser|docker_client|prepare)\("
    r"|\bsubprocess\.(run|Popen|call|check_call|check_output)\b"
)
EXEMPT = {"tests/test_markers.py"}  # its starts are the guard's tests, each refused by the guard itself
MIN_PURE = 500  # 907 when written: a drop to a few is a tier that stopped meaning anything


@dataclass(frozen=True)
class Collected:
    """The whole suite as collected (no -m): each test's markers, and the markers pytest knows."""

    marks: dict[str, frozenset[str]]  # node id -> the names of its markers
    registered: frozenset[str]


class _Recorder:
    def __init__(self) -> None:
        self.marks: dict[str, frozenset[str]] = {}
        self.registered: frozenset[str] = frozenset()

    @pytest.hookimpl(trylast=True)  # after tests/conftest.py has marked every item
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        self.marks = {item.nodeid: frozenset(mark.name for mark in item.iter_markers()) for item in items}
        lines = config.getini("markers")
        self.registered = frozenset(re.split(r"[:(]", line, maxsplit=1)[0].strip() for line in lines)


@pytest.fixture(scope="module")
def collected() -> Collected:
    recorder = _Recorder()
    # in this process, as pytester's inline runs are: the suite's modules are imported once already
    code = pytest.main(
        ["--collect-only", "-qq", "-p", "no:cacheprovider", "-p", "no:faulthandler", "--rootdir", str(TESTS.parent),
         str(TESTS)],
        plugins=[recorder],
    )  # fmt: skip
    assert code == pytest.ExitCode.OK, f"the suite did not collect ({code}): run pytest --collect-only tests"
    return Collected(recorder.marks, recorder.registered)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def test_every_marker_used_is_registered(collected: Collected) -> None:
    used = frozenset().union(*collected.marks.values())
    assert used <= collected.registered, f"markers no one registered: {sorted(used - collected.registered)}"
    assert {"pure", *NEEDS} <= collected.registered  # pyproject.toml's [tool.pytest.ini_options] markers


def test_every_test_is_pure_or_says_what_it_needs(collected: Collected) -> None:
    tiers = {"pure", *NEEDS}
    for nodeid, marks in collected.marks.items():
        assert ("pure" in marks) != bool(marks & set(NEEDS)), (nodeid, sorted(marks & tiers))


def test_every_module_that_starts_something_declares_it(collected: Collected) -> None:
    needs: dict[str, set[str]] = defaultdict(set)
    for nodeid, marks in collected.marks.items():
        needs[_module(nodeid)] |= marks & set(NEEDS)
    undeclared = [
        module
        for module in sorted(needs)
        if not needs[module] and module not in EXEMPT and STARTERS.search((TESTS.parent / module).read_text())
    ]
    assert not undeclared, f"modules that start something and mark no test with what it needs: {undeclared}"


def test_every_fixture_needs_entry_is_used() -> None:
    """A module's FIXTURE_NEEDS names fixtures its tests use (a stale entry marks nothing)."""
    import importlib

    for path in sorted(TESTS.glob("test_*.py")):
        module = importlib.import_module(f"tests.{path.stem}")
        for name in getattr(module, "FIXTURE_NEEDS", {}):
            assert re.search(rf"\b{name}\b\s*[:,)]", path.read_text()), f"{path.name}: FIXTURE_NEEDS[{name!r}]"


def test_the_pure_tier_is_hundreds_strong(collected: Collected) -> None:
    pure = [nodeid for nodeid, marks in collected.marks.items() if "pure" in marks]
    assert len(pure) >= MIN_PURE, f"{len(pure)} pure tests of {len(collected.marks)}"
    assert len(pure) < len(collected.marks)  # and the others are marked, not dropped


def _ways() -> Iterator[tuple[str, Callable[[], Any], Callable[[], bool]]]:
    """Each way of starting something the guard refuses: what to call, and how to see it is refused
    (checked before the call: an unguarded fork in a test process would run the suite twice)."""

    def refused(owner: Any, name: str) -> Callable[[], bool]:
        return lambda: getattr(getattr(owner, name), "__name__", "") == "refused"

    yield "subprocess", lambda: subprocess.run(["true"], check=False), refused(subprocess.Popen, "_execute_child")
    yield "os.system", lambda: os.system("true"), refused(os, "system")
    yield "os.fork", lambda: os.fork(), refused(os, "fork")
    yield "os.posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}), refused(os, "posix_spawn")
    spawned = multiprocessing.get_context("spawn")
    import _posixsubprocess

    yield "multiprocessing", lambda: spawned.Process(target=int).start(), refused(_posixsubprocess, "fork_exec")
    yield "a server", lambda: EmbeddedServer._spawn(None, None), refused(EmbeddedServer, "_spawn")  # type: ignore[arg-type]
    yield "docker", lambda: docker.from_env(), refused(docker, "from_env")


@pytest.mark.parametrize("way", [way[0] for way in _ways()])
def test_the_guard_refuses_every_way_of_starting_something_and_names_it(way: str) -> None:
    (start, is_refused) = next((start, check) for name, start, check in _ways() if name == way)
    started: list[str] = []
    with no_processes(started):
        assert is_refused(), f"{way} is not patched by the guard"
        with pytest.raises(ImpureTest, match=r"a test marked pure .*mark what it needs"):
            start()
    assert len(started) == 1, started
