"""The mutant catalogue: complete metadata, unique ids, patches that apply to the current source,
coverage of every transition and contract row; and the runner end to end on one Lua and one native
mutant (one cheap native build), with the null run passing. The full catalogue is not run here."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from difftest.judge.contract import RULES
from difftest.spec.commands import TRANSITIONS
from mutants import catalogue as cat
from mutants import report
from mutants.run import EXIT_ALL_CAUGHT, RunConfig, run
from mutants.score import CAUGHT, Budget
from mutants.workspace import apply_patch, cache_key, source_files

MUTANTS = cat.load()


def test_metadata_is_complete_and_ids_unique() -> None:
    entries = tomllib.loads(cat.CATALOGUE_FILE.read_text())["mutant"]
    assert [p for e in entries for p in cat.problems(e)] == []
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids))
    assert all(m.id.startswith(("native-", "lua-", "canary-", "both-")) for m in MUTANTS)
    assert all(m.id.startswith("both-") == (m.executor == cat.BOTH) for m in MUTANTS)
    # every patch file is in the catalogue, and the reverse (a shared mutant: one per executor)
    files = {p.relative_to(cat.CATALOGUE_DIR) for p in cat.CATALOGUE_DIR.glob("*/*.patch")}
    assert files == {m.patch_path_for(e).relative_to(cat.CATALOGUE_DIR) for m in MUTANTS for e in m.executors}


def test_the_catalogue_has_enough_mutants_and_one_canary() -> None:
    real = [m for m in MUTANTS if not m.canary]
    assert sum(m.executor == "native" for m in real) >= 24
    assert sum(m.executor == "lua" for m in real) >= 8
    assert sum(m.canary for m in MUTANTS) == 1
    assert sum(m.executor == cat.BOTH for m in real) >= 8


@pytest.mark.subprocess
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_every_patch_applies_cleanly_to_the_current_source(mutant: cat.Mutant, tmp_path: Path) -> None:
    for executor in mutant.executors:  # a shared mutant: each executor's patch to its own source
        source, tree = cat.EXECUTOR_DIRS[executor], tmp_path / executor
        for path in source_files(executor, source):
            target = tree / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
        assert apply_patch(mutant.patch_for(executor), tree) == "", executor
        # and it changes something
        changed = [p for p in source_files(executor, tree)
                   if p.read_bytes() != (source / p.relative_to(tree)).read_bytes()]  # fmt: skip
        assert changed, executor


# The contract's rows no mutant breaks yet: the project's own rows N3, N4 and N5 could not be named by
# a mutant until the catalogue's rows came from the contract (issue 28); a mutant for one removes it here
ROWS_WITHOUT_A_MUTANT = {"N3", "N4", "N5"}


def test_every_transition_and_contract_row_is_covered() -> None:
    real = [m for m in MUTANTS if not m.canary]
    for executor in ("native", "lua"):
        # the Lua executor scripts the scripted transitions; PAUSE and RESUME are the host's plain commands
        wanted = [v for v in cat.TRANSITIONS if executor == "native" or TRANSITIONS[v].scripted]
        covered = {t for m in real if m.executor == executor for t in m.transitions}
        assert set(wanted) <= covered, (executor, set(wanted) - covered)
    rows = {r for m in real for r in m.contract_rows}
    assert rows == set(cat.CONTRACT_ROWS) - ROWS_WITHOUT_A_MUTANT


def test_the_catalogue_names_what_the_table_and_the_contract_name() -> None:
    """Its transitions are the command table's verbs and its rows the contract's, so a mutant may aim
    at any of them (N3, N4 and N5 were missing from a hand-kept list, and an entry naming one failed)."""
    assert tuple(TRANSITIONS) == cat.TRANSITIONS
    assert set(cat.CONTRACT_ROWS) == set(RULES)
    entry = {"id": "native-x", "executor": "native", "transition": "CLAIM", "defect_class": "boundary",
             "contract_rows": ["N5"], "why": "w", "exposure": "e", "needs": []}  # fmt: skip
    assert cat.problems(entry) == []
    assert cat.problems({**entry, "contract_rows": ["X1"]}) != []  # a row the contract does not have
    assert cat.problems({**entry, "transition": "NOOP"}) != []


def test_the_required_defect_kinds_are_there() -> None:
    by_id = {m.id: m for m in MUTANTS}
    classes = {m.defect_class for m in MUTANTS}
    assert {"acl-bypass", "replication-missing", "replication-verbatim", "boundary", "stale-fence",
            "ghost-recreated", "check-after-write", "matches-lua-not-contract", "off-by-one"} <= classes  # fmt: skip
    required = ("native-sweep-exempt-inverted", "native-extend-no-restamp", "native-sweep-stall-budget-off-by-one")
    assert set(required) <= set(by_id)
    needs = {n for m in MUTANTS for n in m.needs}
    assert {"restarts", "corruption", "users"} <= needs


def test_the_cache_key_follows_patch_and_source() -> None:
    native = cat.EXECUTOR_DIRS["native"]
    assert cache_key("native", native, "") == cache_key("native", native, "")
    assert cache_key("native", native, "") != cache_key("native", native, "x")
    assert all("target" not in p.parts for p in source_files("native", native))


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.subprocess
@pytest.mark.timeout(900)  # a fresh cache first builds the module's dependencies (~100 s here)
def test_the_runner_catches_a_lua_and_a_native_mutant(tmp_path: Path) -> None:
    # cheap native mutant: a one-line change, caught at the first CLAIM (N1); ~2 s to build once
    # the shared target holds the dependencies (the first build of a fresh cache takes ~2 min)
    chosen = ["lua-fail-never-dead-letters", "native-claim-no-epoch"]
    budget = Budget(seed=20261202, examples=200, timeout_s=600.0, shrink_s=2.0, sizes=False)
    code, outcomes = run(RunConfig(tmp_path / "report", budget, only=chosen), say=lambda _: None)
    by_id = {o.id: o for o in outcomes}
    assert by_id["null-run"].status == report.CLEAN and by_id["null-run"].histories == 200  # zero divergences
    assert by_id["canary-lua-enqueue-replies-two"].status == CAUGHT
    for name in chosen:
        outcome = by_id[name]
        assert outcome.status == CAUGHT, outcome
        # the artifact is relative to the report's directory
        assert outcome.steps > 0 and (tmp_path / "report" / outcome.artifact / "history.jsonl").is_file()
    assert code == EXIT_ALL_CAUGHT
    document = json.loads((tmp_path / "report" / "outcomes.json").read_text())
    assert document["verdict"] == "all caught" and document["summary"] == {"caught": 2}
    assert document["score"] == {"caught": 2, "viable": 2, "percent": 100.0}
    for name in ("mutation-report.json", "junit.xml", "report.html"):
        assert (tmp_path / "report" / name).is_file()


@pytest.mark.build
@pytest.mark.subprocess
@pytest.mark.timeout(900)  # a fresh cache first builds the module's dependencies (~2 min)
def test_a_copy_made_before_another_mutants_build_is_still_built_from_its_own_source(tmp_path: Path) -> None:
    """The unpatched copy is made first, a mutant is built into the shared target while it waits,
    then the copy is built: it must get its own .so, not the mutant's (cargo leaves a root crate's
    path out of its fingerprint, so an older copy looked fresh)."""
    from mutants.workspace import DEFAULT_CACHE, _build_native, _copy_source

    mutant = next(m for m in cat.load() if m.executor == "native" and not m.canary)
    cache = DEFAULT_CACHE  # the shared target of every mutant build (its dependencies compiled once)
    plain, patched = tmp_path / "plain" / "src-tree", tmp_path / "patched" / "src-tree"
    _copy_source("native", mutant.source_dir, plain)
    _copy_source("native", mutant.source_dir, patched)
    assert apply_patch(mutant.patch, patched) == ""
    built_patched, why = _build_native(patched, cache, tmp_path / "patched.log")
    assert built_patched is not None, why
    built_plain, why = _build_native(plain, cache, tmp_path / "plain.log")
    assert built_plain is not None, why
    assert built_plain.read_bytes() != built_patched.read_bytes()
    assert "Compiling emq-native" in (tmp_path / "plain.log").read_text()
