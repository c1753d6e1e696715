"""The fuzzing service's coverage reading: the native counters read straight from a raw profile are
the ones llvm-profdata reads, and a guided service on the coverage build records native counters,
Lua lines and the corpus they grew, leaving no profile behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.base.exits import EXIT_OK
from difftest.coverage import native as native_coverage
from difftest.fuzz.counters import Counters, read_counters
from difftest.fuzz.store import Store
from difftest.history import format as hist
from difftest.replay.replayer import replay_once
from tests.test_fuzz import WAIT_S, database  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.servers, pytest.mark.build, pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parent.parent
HISTORY = hist.History((hist.call_step("ENQUEUE", "q", "j1", "p", 0), hist.call_step("CLAIM", "q", 100),
                        hist.call_step("COMPLETE", "q", "j1", 1)))  # fmt: skip


@pytest.fixture(scope="module")
def tools() -> native_coverage.Tools:
    return native_coverage.find_tools()


@pytest.mark.timeout(900)  # a fresh clone first builds the instrumented module's dependencies (as test_native_coverage)
def test_the_counters_of_a_raw_profile_are_llvm_profdatas(
    tools: native_coverage.Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = native_coverage.build(tools)
    monkeypatch.setenv("LLVM_PROFILE_FILE", str(tmp_path / "native-%p%c.profraw"))
    assert replay_once(HISTORY, module).ok
    (profile,) = tmp_path.glob("*.profraw")
    counts = read_counters(profile)
    assert counts is not None
    shown = subprocess.run([str(tools.profdata), "show", "--all-functions", "--counts", str(profile)],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    theirs: list[int] = []
    for line in shown.splitlines():  # each function's entry count, then its other counters
        if found := re.search(r"Function count: (\d+)", line):
            theirs.append(int(found[1]))
        elif found := re.search(r"Block counts: \[(.*)\]", line):
            theirs += [int(v) for v in found[1].split(", ") if v]
    assert len(counts) == len(theirs) and sum(counts) == sum(theirs) > 0
    assert sum(1 for c in counts if c) == sum(1 for c in theirs if c)
    # a worker's view: the counters the history moved, all new; the server gone, its file folded in and removed
    view = Counters(tmp_path)
    moved, new = view.look()
    assert moved == new == {i for i, c in enumerate(counts) if c}
    assert not list(tmp_path.glob("*.profraw")) and view.look() == (set(), set())
    assert len(view.bitmap()) == (len(counts) + 7) // 8


@pytest.mark.timeout(900)  # a fresh clone first builds the instrumented module's dependencies (as test_native_coverage)
def test_a_guided_service_records_native_counters_lua_lines_and_its_corpus(database: str, tmp_path: Path) -> None:  # noqa: F811
    reports = tmp_path / "reports"
    command = [sys.executable, "-m", "difftest", "fuzz", "--database", database, "--guidance", "rare",
               "--lua-coverage", "--workers", "1", "--histories", "15", "--no-class-corpus", "--no-dashboard",
               "--reports", str(reports)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert "guidance rare" in done.stdout
    store = Store(database)
    try:
        coverage = store.coverage()
        corpus = store.corpus()
    finally:
        store.close()
    assert 0 < coverage["native"] <= coverage["native_total"] and coverage["lua"] > 0
    assert any("native" in entry["reached"] for entry in corpus) and any("lua" in e["reached"] for e in corpus)
    assert f"{coverage['native']:,} native counters of {coverage['native_total']:,}" in done.stdout
    assert not list(reports.rglob("*.profraw")) and not list((reports / "fuzz").glob("service-*"))
