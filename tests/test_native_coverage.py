"""`difftest run --native-coverage`: a branch only restarts reach, planted in a copy of the crate, is
reported unreached by a campaign without restarts and reached by one with them; and the pure parts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from difftest.base.problems import SetupProblem
from difftest.cli.main import EXIT_SETUP, main
from difftest.coverage import native as native_coverage
from difftest.report import html as html_report

EXEMPT = """pub fn exempt(lease_epoch: Option<&[u8]>, current: &[u8]) -> bool {
    lease_epoch != Some(current)
}"""
# A lease stamped by an earlier start of the server: a real run_id (forty hex digits, not all zeros)
# that is not the current one. The generator's corruption writes forty zeros or short values ("",
# "0", "yes", " 5 "), and without restarts every other stamp is the current run_id, so only a
# history that restarts (or crashes) the server between CLAIM and SWEEP gets here.
PLANTED = """pub fn exempt(lease_epoch: Option<&[u8]>, current: &[u8]) -> bool {
    if let Some(epoch) = lease_epoch {
        let run_id = epoch.len() == 40 && epoch.iter().all(u8::is_ascii_hexdigit);
        if epoch != current && run_id && epoch.iter().any(|&b| b != b'0') {
            return planted_earlier_run(); // PLANTED
        }
    }
    lease_epoch != Some(current)
}

#[inline(never)]
fn planted_earlier_run() -> bool {
    true
}"""
SEED = 11  # with this seed, 400 histories with restarts reach the planted line (200 already do)
EXAMPLES = 400


def _planted_crate(into: Path) -> tuple[Path, int]:
    """A copy of the crate (never its target/) with the branch planted; the planted line's number."""
    source = native_coverage.CRATE_DIR
    for path in [source / "Cargo.toml", source / "Cargo.lock", *(source / "src").rglob("*.rs")]:
        target = into / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    epoch = into / "src" / "epoch.rs"
    text = epoch.read_text()
    assert EXEMPT in text, "epoch::exempt changed: update the planted branch"
    epoch.write_text(text.replace(EXEMPT, PLANTED))
    line = next(n for n, t in enumerate(epoch.read_text().splitlines(), 1) if "// PLANTED" in t)
    return into, line


def _campaign(module: Path, tools: native_coverage.Tools, crate: Path, run: Path, restarts: bool) -> dict[str, Any]:
    from difftest.campaign.driver import CampaignConfig, run_campaign

    config = CampaignConfig(seed=SEED, module=module, reports=run, examples=EXAMPLES, workers=1, restarts=restarts,
                            database=None, pin=False)  # fmt: skip
    with native_coverage.profiling(run):
        result = run_campaign(config)
    assert not result.failures, result.failures
    return native_coverage.collect(run, module, tools, crate)


def _unreached(document: dict[str, Any], file: str) -> set[int]:
    return {number for group in document["unreached"] if group["file"] == file for number, _ in group["lines"]}


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.timeout(600)  # the first instrumented build compiles the dependencies (~4 min on a busy machine)
def test_a_branch_only_restarts_reach_is_unreached_without_them_and_reached_with_them(tmp_path: Path) -> None:
    tools = native_coverage.find_tools()
    crate, line = _planted_crate(tmp_path / "native")
    module = native_coverage.build(tools, crate, name="test-planted-restart-branch")
    without = _campaign(module, tools, crate, tmp_path / "no-restarts", restarts=False)
    with_restarts = _campaign(module, tools, crate, tmp_path / "restarts", restarts=True)

    assert line in _unreached(without, "src/epoch.rs")
    planted = [g for g in without["unreached"] if any(n == line for n, _ in g["lines"])]
    assert planted[0]["function"].endswith("epoch::exempt") and planted[0]["transition"] is None
    assert line not in _unreached(with_restarts, "src/epoch.rs")
    assert (tmp_path / "restarts" / native_coverage.JSON_FILE).is_file()
    assert not (tmp_path / "restarts" / native_coverage.RAW_DIR).exists()  # the servers' files, merged
    # without restarts: the native server's one process, and the replicas started for the histories
    # that call one (their native replica loads the module too); restarts add a process each
    assert with_restarts["profiles"]["written"] > without["profiles"]["written"] >= 1
    assert with_restarts["profiles"]["lost"] == 0  # crash steps' servers keep their counts (continuous mode)
    sweep = {f["file"]: f for f in with_restarts["files"]}["src/transitions/sweep.rs"]
    assert sweep["transition"] == "SWEEP" and 0 < sweep["lines"]["reached"] <= sweep["lines"]["total"]
    assert with_restarts["totals"]["branches"] is None or tools.branches
    page = html_report.render({"native_coverage": with_restarts, "coverage": {}})
    assert "Native code coverage" in page and "src/transitions/sweep.rs" in page
    # the checkout's build, from the same target directory, is the checkout's and not the planted copy's
    assert native_coverage.sha256(native_coverage.build(tools)) != native_coverage.sha256(module)


def test_the_pure_parts() -> None:
    assert native_coverage.transition_of("src/transitions/sweep.rs") == "SWEEP"
    assert native_coverage.transition_of("src/transitions/mod.rs") is None
    # a file that handles two verbs, and helpers named by the transitions that use them
    assert native_coverage.transition_of("src/transitions/pause.rs") == "PAUSE, RESUME"
    assert native_coverage.transition_of("src/transitions/fence.rs") == "COMPLETE, EXTEND, FAIL"
    assert native_coverage.transition_of("src/transitions/metrics.rs") == "COMPLETE, FAIL, SWEEP"
    assert native_coverage.transition_of("src/host.rs") is None
    crate = native_coverage.CRATE_DIR
    assert native_coverage.relative_source(f"{crate}/src/transitions/claim.rs") == "src/transitions/claim.rs"
    registry = "/root/.cargo/registry/src/index.crates.io-1/valkey-module-0.1.15/src/macros.rs"
    assert native_coverage.relative_source(registry) is None
    assert native_coverage.demangle("_ZN10emq_native5epoch6exempt17h0123456789abcdefE") == "emq_native::epoch::exempt"
    legacy = "_ZN4core3ptr46drop_in_place$LT$alloc..vec..Vec$LT$u8$GT$$GT$17h0123456789abcdefE"
    assert native_coverage.demangle(legacy) == "core::ptr::drop_in_place<alloc::vec::Vec<u8>>"
    document = {"totals": {}, "files": [], "unreached": [], "profiles": {"written": 0, "lost": 0},
                "note": "no native server wrote a profile", "branches_available": False}  # fmt: skip
    assert "no native server wrote a profile" in "".join(native_coverage.html_section(document))
    assert "Native code coverage" not in html_report.render({"coverage": {}})


def test_missing_llvm_tools_are_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    answers = {"--print": str(tmp_path), "-vV": "rustc 1.95.0 (stable)\nhost: x86_64-unknown-linux-gnu"}
    monkeypatch.setattr(native_coverage, "_rustc", lambda *args: answers[args[0]])
    with pytest.raises(SetupProblem, match="rustup component add llvm-tools"):
        native_coverage.find_tools()


def test_only_embedded_servers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["run", "--native-coverage", "--backend", "docker", "--examples", "1", "--reports", str(tmp_path)])
    assert code == EXIT_SETUP
    assert "--native-coverage runs embedded servers only" in capsys.readouterr().err


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.timeout(900)  # a fresh cache first builds the instrumented module's dependencies
def test_merge_sums_the_shards_native_coverage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two shards measured apart, merged: a line is unreached in the merge exactly when neither shard
    reached it, and the merge counts every shard's server profiles."""
    from difftest.cli.main import EXIT_OK

    shards = []
    for index in (1, 2):
        reports = tmp_path / f"shard-{index}"
        argv = ["run", "--native-coverage", "--seed", "3", "--examples", "80", "--shard", f"{index}/2",
                "--workers", "1", "--no-database", "--reports", str(reports)]  # fmt: skip
        assert main(argv) == EXIT_OK, capsys.readouterr()
        (run,) = reports.iterdir()
        shards.append(run)
    merged = tmp_path / "merged"
    assert main(["merge", str(merged), *map(str, shards)]) == EXIT_OK
    documents = [json.loads((d / native_coverage.JSON_FILE).read_text()) for d in shards]
    whole = json.loads((merged / native_coverage.JSON_FILE).read_text())
    assert (merged / native_coverage.PROFDATA_FILE).is_file()

    def unreached(document: dict[str, Any]) -> set[tuple[str, int]]:
        return {(group["file"], number) for group in document["unreached"] for number, _ in group["lines"]}

    assert unreached(whole) == unreached(documents[0]) & unreached(documents[1])
    assert whole["profiles"]["written"] == sum(d["profiles"]["written"] for d in documents)
    assert whole["totals"]["lines"]["total"] == documents[0]["totals"]["lines"]["total"]
    assert whole["totals"]["lines"]["reached"] >= max(d["totals"]["lines"]["reached"] for d in documents)
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["native_coverage"]["totals"] == whole["totals"]
    assert "Native code coverage" in (merged / "report.html").read_text()
