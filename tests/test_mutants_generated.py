"""Generated mutants (mutants/generated.py): cargo-mutants' real listing of the crate turned into
catalogue entries whose patches apply; the Lua operators' mutants compile on a real server; the
reviewed triage checked against the generated set; and one generated mutant of each executor scored
end to end by the differential oracle with --only."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from difftest.servers.local import EmbeddedServer
from mutants import generated, lua_operators, report, triage
from mutants.catalogue import EXECUTOR_DIRS, TRANSITIONS
from mutants.run import EXIT_ALL_CAUGHT, RunConfig, run
from mutants.score import CAUGHT, EQUIVALENT, MISSED, UNVIABLE, Budget
from mutants.workspace import apply_patch, source_files

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"listing": ("build",)}

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(1800)  # the first use installs cargo-mutants (compiled: minutes)


@pytest.fixture(scope="module")
def listing() -> list[dict[str, object]]:
    return generated.list_native()


@pytest.fixture(scope="module")
def crate_mutants(listing: list[dict[str, object]]) -> list[generated.GeneratedMutant]:
    return generated.native_entries(listing)


def _copy(executor: str, into: Path) -> Path:
    source = EXECUTOR_DIRS[executor]
    for path in source_files(executor, source):
        target = into / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return into


def test_every_listed_crate_mutant_becomes_one_entry(
    listing: list[dict[str, object]], crate_mutants: list[generated.GeneratedMutant]
) -> None:
    assert len(listing) >= 100  # the crate has ~2,000 lines of non-test Rust
    assert len(crate_mutants) == len(listing)
    ids = [m.id for m in crate_mutants]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"rs-[a-z0-9_-]+", i) for i in ids)
    assert {m.defect_class for m in crate_mutants} == {str(e["genre"]) for e in listing}  # the genre is the class
    for m in crate_mutants:
        assert m.executor == "native" and m.generator == "cargo-mutants"
        assert m.transition == "all" or set(m.transitions) <= set(TRANSITIONS)
    by_file = {m.location.split(":")[0]: m for m in crate_mutants}
    assert by_file["src/transitions/claim.rs"].transition == "CLAIM"
    # a helper file's function takes its callers' transitions: fence::holds guards the token's users
    fence = [m for m in crate_mutants if m.location.startswith("src/transitions/fence.rs")]
    assert fence and all("CLAIM" not in m.transitions and "COMPLETE" in m.transitions for m in fence)


@pytest.mark.subprocess
def test_the_entries_patches_apply_cleanly_and_change_the_named_line(
    crate_mutants: list[generated.GeneratedMutant], tmp_path: Path
) -> None:
    pristine = _copy("native", tmp_path / "pristine")
    for m in crate_mutants:
        tree = tmp_path / "t"
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(pristine, tree)
        assert apply_patch(m.patch_for("native"), tree) == "", m.id
        file, line, _ = m.location.split(":")
        before, after = (pristine / file).read_text().splitlines(), (tree / file).read_text().splitlines()
        assert before != after, m.id
        first = next(i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b)
        assert abs(first + 1 - int(line)) <= 3, (m.id, first + 1, line)


def test_the_lua_operators_produce_mutants_that_compile_on_a_real_server(lua_server: EmbeddedServer) -> None:
    mutations = lua_operators.generate(EXECUTOR_DIRS["lua"])
    counts = Counter(m.operator for m in mutations)
    assert set(counts) == set(lua_operators.OPERATORS), counts
    ids = [m.id for m in mutations]
    assert len(set(ids)) == len(ids)
    client = lua_server.new_client()
    sources = {p.name: p.read_text() for p in EXECUTOR_DIRS["lua"].glob("*.lua")}
    for m in mutations:
        mutated = m.apply(sources[m.script])
        assert mutated != sources[m.script]
        client.execute_command("SCRIPT", "LOAD", mutated)  # raises on a script the server's Lua refuses
    # each kind is what it says: a relational swap, a constant moved by one, a call removed
    sample = {m.operator: m for m in mutations if m.script == "fail.lua"}
    assert (sample["relational"].original, sample["relational"].replacement) in lua_operators.RELATIONAL.items()
    constant = sample["constant"]
    assert abs(int(constant.replacement.strip("()")) - int(constant.original)) == 1
    assert sample["removed-call"].original.startswith("redis.call(") and sample["removed-call"].replacement == ""


@pytest.mark.subprocess
def test_the_lua_entries_patch_their_script_as_the_runner_applies_it(tmp_path: Path) -> None:
    entries = generated.lua_entries()
    assert {m.transition for m in entries} == set(TRANSITIONS[:8])
    tree = _copy("lua", tmp_path / "lua")
    entry = next(m for m in entries if m.id == "lua-claim-del-hset-1")
    assert apply_patch(entry.patch_for("lua"), tree) == ""
    assert "redis.call('HSET', jk, 'state', 'active')" not in (tree / "claim.lua").read_text()


def test_the_reviewed_triage_names_generated_mutants_with_a_reason(
    crate_mutants: list[generated.GeneratedMutant],
) -> None:
    ids = [m.id for m in crate_mutants] + [m.id for m in generated.lua_entries()]
    entries = triage.load(ids)  # raises on an unknown id, a bad verdict or an empty reason
    assert all(e.reason and e.verdict in triage.VERDICTS for e in entries.values())


def _mutants(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mutants", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=600, check=False)  # fmt: skip


@pytest.mark.build
@pytest.mark.subprocess
def test_a_triage_with_an_unknown_id_is_refused_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "triage.toml"
    bad.write_text('[[mutant]]\nid = "rs-no-such-mutant-1"\nverdict = "equivalent"\nreason = "none"\n')
    result = _mutants("--generated", "--list", "--triage", str(bad), "--reports", str(tmp_path / "r"))
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown generated mutant ids: rs-no-such-mutant-1" in lines[0], result.stderr
    assert not (tmp_path / "r").exists()
    no_reason = tmp_path / "no-reason.toml"
    no_reason.write_text('[[mutant]]\nid = "lua-claim-del-hset-1"\nverdict = "equivalent"\nreason = ""\n')
    result = _mutants("--generated", "--list", "--triage", str(no_reason))
    assert result.returncode == 2 and "no reason" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.build
@pytest.mark.subprocess
def test_the_listing_names_every_generated_mutant() -> None:
    result = _mutants("--generated", "--list")
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    m = re.match(r"(\d+) generated mutants \((\d+) native, (\d+) lua\)", last)
    assert m and int(m.group(1)) == int(m.group(2)) + int(m.group(3)) and int(m.group(3)) > 100


def test_triage_reads_a_survivor_as_equivalent_and_a_catch_as_stale() -> None:
    entries = {"x": triage.Triage("x", EQUIVALENT, "the branch is dead"), "y": triage.Triage("y", UNVIABLE, "r")}
    missed = triage.apply({"id": "x", "status": MISSED}, entries)
    assert missed["status"] == EQUIVALENT and missed["triage"] == "equivalent: the branch is dead"
    assert report.accepted(missed) and report.score([missed]) == {"caught": 0, "viable": 0, "percent": None}
    caught = triage.apply({"id": "x", "status": CAUGHT}, entries)
    assert caught["status"] == CAUGHT and caught["triage"].startswith("stale:")
    assert not report.accepted({"id": "z", "status": MISSED})


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.subprocess
@pytest.mark.timeout(1800)
def test_one_generated_native_and_one_lua_mutant_scored_end_to_end(
    crate_mutants: list[generated.GeneratedMutant], tmp_path: Path
) -> None:
    # CLAIM's pause read turned around (`!= Reply::Null` -> `==`): an unpaused queue's claim answers empty
    chosen_native = next(m for m in crate_mutants if m.location.startswith("src/transitions/claim.rs")
                         and m.defect_class == "BinaryOperator")  # fmt: skip
    chosen = [chosen_native.id, "lua-claim-del-hset-1"]
    everything = [*crate_mutants, *generated.lua_entries()]
    budget = Budget(seed=20261202, examples=200, timeout_s=900.0, shrink_s=2.0, sizes=False)
    code, outcomes = run(RunConfig(tmp_path / "report", budget, only=chosen, generated=everything, triaged={}),
                         say=lambda _: None)  # fmt: skip
    by_id = {o.id: o for o in outcomes}
    assert by_id["null-run"].status == report.CLEAN
    assert by_id["canary-lua-enqueue-replies-two"].status == CAUGHT
    for name in chosen:
        assert by_id[name].status == CAUGHT, by_id[name]
        assert by_id[name].caught_by  # the oracle that caught it is named
    assert code == EXIT_ALL_CAUGHT
    document = json.loads((tmp_path / "report" / "outcomes.json").read_text())
    assert document["catalogue"] == "generated" and document["subset"]["ran"] == 2
    assert document["subset"]["of"] == len(everything)
    assert {m.id for m in generated.load_saved(tmp_path / "report") or []} == {m.id for m in everything}
    # the Stryker report places each in its patched file
    stryker = json.loads((tmp_path / "report" / report.STRYKER).read_text())
    placed = {m["id"]: name for name, f in stryker["files"].items() for m in f["mutants"]}
    assert placed[chosen_native.id] == "executors/native/" + chosen_native.location.split(":")[0]
    assert placed["lua-claim-del-hset-1"] == "executors/lua/claim.lua"
