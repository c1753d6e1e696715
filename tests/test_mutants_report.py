"""The mutant runner's machinery: shards, the four report forms, merging shard reports, and each
campaign in its own process under a hard time limit that kills it and its servers. The first tests
need no server; the last two run real campaigns on a small budget."""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from difftest.base.exits import EXIT_DIVERGENCE, EXIT_INTERRUPTED, EXIT_OK, EXIT_SETUP, EXIT_TERMINATED, EXIT_VOID
from mutants import catalogue as cat
from mutants import records, report
from mutants.__main__ import main
from mutants.child import MARK_VARIABLE, Task, run_tasks
from mutants.run import EXIT_USAGE, RunConfig, baseline, choose, merge, run, score_line, select_shard
from mutants.score import CAUGHT, TIMEOUT, Budget, Outcome
from mutants.workspace import DEFAULT_CACHE

MUTANTS = cat.load()
STRYKER_STATUSES = {"Killed", "Survived", "NoCoverage", "CompileError", "RuntimeError", "Timeout", "Ignored", "Pending"}


def test_shards_split_the_catalogue_round_robin_by_sorted_id() -> None:
    real = [m for m in MUTANTS if not m.canary]
    ids = sorted(m.id for m in real)
    for count in (1, 2, 3, 5):
        shards = [select_shard(real, k, count) for k in range(1, count + 1)]
        together = [m.id for shard in shards for m in shard]
        assert sorted(together) == ids and len(together) == len(set(together))
        for k, shard in enumerate(shards, start=1):
            assert {m.id for m in shard} == set(ids[k - 1 :: count])
            assert shard == [m for m in real if m in shard]  # catalogue order kept
    assert select_shard(real, 2, 3) == select_shard(list(reversed(real)), 2, 3)[::-1]
    with pytest.raises(ValueError):
        select_shard(real, 0, 2)


@pytest.mark.parametrize(
    "argv",
    [["--shard", "3/2"], ["--shard", "x"], ["--jobs", "0"], ["--only", "no-such-mutant"], ["--threshold-break", "101"],
     ["--threshold-high", "x"], ["--threshold-low", "90", "--threshold-high", "80"]],
    ids=lambda argv: " ".join(argv),
)  # fmt: skip
def test_bad_input_is_one_line_on_stderr_exit_2_and_nothing_written(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert EXIT_USAGE == EXIT_SETUP == 2  # bad input: the code of every command
    assert main([*argv, "--reports", str(tmp_path / "m")]) == EXIT_SETUP
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, (out, err)  # no "report:" line for files never written
    assert not (tmp_path / "m").exists()  # and no empty directory


def test_a_merge_that_cannot_be_is_one_line_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "missing")]) == EXIT_SETUP
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("cannot merge: no outcomes.json in ") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_every_patch_has_a_location_in_the_original_file(mutant: cat.Mutant) -> None:
    for executor in mutant.executors:  # a shared mutant: each executor's patch
        _has_a_location(mutant.patch_for(executor), cat.EXECUTOR_DIRS[executor])


def _has_a_location(patch: str, source: Path) -> None:
    first = report.patch_location(patch)
    assert first is not None
    text = (source / first.path).read_text()
    location = report.patch_location(patch, {first.path: text})
    assert location is not None
    lines = text.splitlines()
    assert 1 <= location.start_line <= location.end_line <= len(lines)
    assert location.start_column >= 1 and location.end_column == len(lines[location.end_line - 1]) + 1
    hunk = patch.split("\n@@")[1].split("\n--- a/")[0].splitlines()[1:]  # the first hunk's lines
    changed = [line for line in hunk if line.startswith(("-", "+"))]
    if changed[0].startswith("-"):  # the location starts on the first line the first hunk removes
        assert lines[location.start_line - 1] == changed[0][1:]


def _record(rid: str, executor: str, status: str, **extra: Any) -> dict[str, Any]:
    base = Outcome(rid, executor, status, defect_class="x", transition="CLAIM").as_json()
    base.update(extra)
    return base


def _document(ids: dict[str, str], **extra: Any) -> dict[str, Any]:
    """A report document: the null run, the canary, and `ids` (id -> status)."""
    by_id = {m.id: m for m in MUTANTS}
    canary = next(m for m in MUTANTS if m.canary)
    outcomes = [
        _record(report.NULL_RUN, "both", report.CLEAN, histories=100, steps=2000, defect_class=""),
        _record(canary.id, "lua", CAUGHT, defect_class="canary", histories=1, steps=1,
                artifact=f"{canary.id}/failures/batch-0"),
    ]  # fmt: skip
    for rid, status in ids.items():
        artifact = f"{rid}/failures/batch-1" if status == CAUGHT else ""
        outcomes.append(_record(rid, by_id[rid].executor, status, defect_class=by_id[rid].defect_class,
                                histories=7, steps=70, campaign_s=1.5, artifact=artifact, reason="why"))  # fmt: skip
    document = {"verdict": report.SOME_NOT_CAUGHT, "budget": Budget().__dict__, "wall_s": 1.0, "jobs": 2,
                "shard": None, "chosen": list(ids), "outcomes": outcomes}  # fmt: skip
    document.update(extra)
    return report.summarise(document)


STATUSES = {"native-claim-no-epoch": "caught", "native-resume-noop": "missed", "lua-promote-uses-now": "unviable",
            "native-pause-always-new": "timeout", "lua-claim-takes-newest": "error"}  # fmt: skip


def test_the_four_report_forms(tmp_path: Path) -> None:
    document = _document(STATUSES)
    report.write_all(tmp_path, document)
    assert json.loads((tmp_path / report.OUTCOMES).read_text())["score"] == {"caught": 1, "viable": 4, "percent": 25.0}
    # Stryker's mutation-testing-elements, schema version 2 (the required fields and their types)
    stryker = json.loads((tmp_path / report.STRYKER).read_text())
    assert stryker["schemaVersion"] == "2" and stryker["thresholds"] == {"high": 80, "low": 60}
    statuses = {}
    for path, entry in stryker["files"].items():
        assert (cat.REPO / path).read_text() == entry["source"] and entry["language"] in ("rust", "lua")
        for mutant in entry["mutants"]:
            assert {"id", "mutatorName", "location", "status"} <= set(mutant)
            start, end = mutant["location"]["start"], mutant["location"]["end"]
            assert min(start["line"], start["column"], end["line"], end["column"]) >= 1
            assert (start["line"], start["column"]) <= (end["line"], end["column"])
            assert mutant["status"] in STRYKER_STATUSES
            statuses[mutant["id"]] = mutant["status"]
    assert statuses == {"native-claim-no-epoch": "Killed", "native-resume-noop": "Survived",
                        "lua-promote-uses-now": "CompileError", "native-pause-always-new": "Timeout",
                        "lua-claim-takes-newest": "RuntimeError"}  # fmt: skip
    # JUnit: one case per record (null run and canary too), missed/timeout failures, unviable/error errors
    suite = ET.parse(tmp_path / report.JUNIT).getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {r["id"] for r in document["outcomes"]}
    failed = {n for n, c in cases.items() if c.find("failure") is not None}
    errored = {n for n, c in cases.items() if c.find("error") is not None}
    assert failed == {"native-resume-noop", "native-pause-always-new"}
    assert errored == {"lua-promote-uses-now", "lua-claim-takes-newest"}
    # the page: self-contained, with the score, the self-checks and a relative link per kill
    page = (tmp_path / report.HTML).read_text()
    assert "<script" not in page and "<link" not in page and "http" not in page.replace("http-equiv", "")
    assert "1 / 4 (25.0 %)" in page and "clean: no divergence on the unmodified pair in 100 histories" in page
    assert 'href="native-claim-no-epoch/failures/batch-1/report.txt"' in page
    assert "caught (canary-lua-enqueue-replies-two" in page
    assert "restarts and crashes</dt><dd>on" in page
    # the pictures: outcomes as one stacked bar, histories to kill against the budget (one bar each)
    assert 'aria-label="outcomes"' in page and "<title>caught: 1</title>" in page
    kills = page.split('aria-label="histories to kill"')[1].split("</svg>")[0]
    assert kills.count("<rect") == len(STATUSES) and f"the budget: {Budget().examples} histories" in kills
    assert '<td class="caught">clean</td>' in page  # the null run's "no divergence" reads as a pass


def test_a_shared_mutant_is_reported_in_both_files_with_the_oracle_that_caught_it(tmp_path: Path) -> None:
    shared = next(m for m in MUTANTS if m.executor == cat.BOTH)
    document = _document({shared.id: CAUGHT})
    document["outcomes"][-1]["caught_by"] = "accounting"
    report.write_all(tmp_path, document)
    stryker = json.loads((tmp_path / report.STRYKER).read_text())
    placed = {m["id"]: entry["language"] for entry in stryker["files"].values() for m in entry["mutants"]}
    assert placed == {f"{shared.id}:lua": "lua", f"{shared.id}:native": "rust"}
    cases = {c.get("name"): c for c in ET.parse(tmp_path / report.JUNIT).getroot().iter("testcase")}
    assert cases[shared.id].get("classname") == "mutants.both"
    assert "caught by: accounting" in (cases[shared.id].findtext("system-out") or "")
    assert '<td class="caught">caught (accounting)</td>' in (tmp_path / report.HTML).read_text()


def test_merge_joins_shards_and_refuses_what_does_not_fit(tmp_path: Path) -> None:
    first = dict(list(STATUSES.items())[:3])
    second = dict(list(STATUSES.items())[3:])
    report.write_outcomes(tmp_path / "s1", _document(first, shard={"index": 1, "count": 2}))
    report.write_outcomes(tmp_path / "s2", _document(second, shard={"index": 2, "count": 2}))
    out = tmp_path / "merged"
    assert merge(out, [tmp_path / "s1", tmp_path / "s2"], say=lambda _: None) == 1
    merged = json.loads((out / report.OUTCOMES).read_text())
    assert merged["verdict"] == report.SOME_NOT_CAUGHT
    assert {r["id"]: r["status"] for r in report.scored(merged)} == STATUSES
    caught = next(r for r in merged["outcomes"] if r["id"] == "native-claim-no-epoch")
    assert caught["artifact"] == "../s1/native-claim-no-epoch/failures/batch-1"
    assert (out / report.HTML).is_file() and (out / report.STRYKER).is_file() and (out / report.JUNIT).is_file()
    # one shard of two: incomplete; the same shard twice: refused; other budgets: refused
    assert report.merge(out, [tmp_path / "s1"])["verdict"] == report.INCOMPLETE
    refusals: list[str] = []
    assert merge(out, [tmp_path / "s1", tmp_path / "s1"], say=lambda _: None, complain=refusals.append) == EXIT_USAGE
    report.write_outcomes(tmp_path / "s3", _document(second, shard={"index": 2, "count": 2}, budget={"seed": 1}))
    assert merge(out, [tmp_path / "s1", tmp_path / "s3"], say=lambda _: None, complain=refusals.append) == EXIT_USAGE
    assert len(refusals) == 2 and all(r.startswith("cannot merge: ") for r in refusals)
    # a void shard voids the merge
    void = _document(second, shard={"index": 2, "count": 2}, verdict=report.VOID)
    report.write_outcomes(tmp_path / "s4", void)
    assert merge(out, [tmp_path / "s1", tmp_path / "s4"], say=lambda _: None) == EXIT_VOID


def test_the_clean_null_run_has_one_name_and_older_reports_read_as_it(tmp_path: Path) -> None:
    document = _document(STATUSES)
    report.write_all(tmp_path / "now", document)
    written = json.loads((tmp_path / "now" / report.OUTCOMES).read_text())
    assert written["outcomes"][0] == {**written["outcomes"][0], "id": report.NULL_RUN, "status": "clean"}
    # a report from before the name: its null run "missed" (no divergence) is read as clean everywhere
    old = json.loads(json.dumps(document))
    old["outcomes"][0]["status"] = "missed"
    report.write_outcomes(tmp_path / "old", old)
    assert merge(tmp_path / "merged", [tmp_path / "old"], say=lambda _: None) == EXIT_DIVERGENCE
    merged = json.loads((tmp_path / "merged" / report.OUTCOMES).read_text())
    assert merged["outcomes"][0]["status"] == report.CLEAN and merged["verdict"] == report.SOME_NOT_CAUGHT
    page = report.html_page(old)
    assert "null run</dt><dd>clean: no divergence" in page and '<td class="caught">clean</td>' in page
    assert "passed" not in page.split("<h2>")[0].split("thresholds")[0]  # no other name for it
    junit = ET.fromstring(report.junit(old))
    assert next(c for c in junit.iter("testcase") if c.get("name") == report.NULL_RUN).find("failure") is None


def test_a_subset_run_says_so_and_lists_what_it_left_out(tmp_path: Path) -> None:
    three = ["native-claim-no-epoch", "native-resume-noop", "lua-promote-uses-now"]
    chosen, part = choose(MUTANTS, three, None)
    real = [m.id for m in MUTANTS if not m.canary]
    assert [m.id for m in chosen] == [i for i in real if i in three]
    assert part is not None and part["ran"] == 3 and part["of"] == len(real) and part["only"] == sorted(three)
    assert part["left_out"] == [i for i in real if i not in three]
    assert choose(MUTANTS, None, None) == ([m for m in MUTANTS if not m.canary], None)  # the whole catalogue
    _, shard = choose(MUTANTS, None, (2, 3))
    assert shard is not None and shard["shard"] == "2/3" and shard["only"] is None
    document = _document(dict.fromkeys(three, CAUGHT), subset=part, verdict=report.ALL_CAUGHT)
    report.write_all(tmp_path, document)
    written = json.loads((tmp_path / report.OUTCOMES).read_text())
    assert written["subset"]["left_out"] == part["left_out"] and written["score"]["percent"] == 100.0
    text = f"subset: 3 of {len(real)} mutants (--only {' '.join(sorted(three))})"
    assert report.subset_text(written["subset"]) == text
    assert score_line(written).startswith(f"all caught: subset score 3/3 (100.0 %; {text})")
    page = (tmp_path / report.HTML).read_text()
    assert text in page and f"a subset score: 3 of {len(real)} mutants ran" in page
    folded = page.split('<details class="left-out">')[1].split("</details>")[0]
    assert f"left out: {len(real) - 3} mutants" in folded and all(
        f"<code>{i}</code>" in folded for i in part["left_out"]
    )
    # the whole catalogue is no subset: none of it on the page
    whole = report.html_page(_document(dict.fromkeys(real, CAUGHT), verdict=report.ALL_CAUGHT))
    assert "subset" not in whole.split("<style>")[0] + whole.split("</style>")[1]


@pytest.mark.subprocess
def test_thresholds_colour_the_score_and_the_break_threshold_gates(tmp_path: Path) -> None:
    # STATUSES score 1 / 4 (25 %): below break 30 the run fails (exit 1), at break 25 it passes
    # whatever survived; without a break threshold every mutant must be caught
    assert report.passes(_document(STATUSES)) is False
    for breaking, code in ((30.0, EXIT_DIVERGENCE), (25.0, EXIT_OK)):
        thresholds = report.Thresholds(high=90, low=20, breaking=breaking).as_json()
        report.write_outcomes(tmp_path / "s", _document(STATUSES, thresholds=thresholds))
        assert merge(tmp_path / f"m{breaking}", [tmp_path / "s"], say=lambda _: None) == code
        merged = json.loads((tmp_path / f"m{breaking}" / report.OUTCOMES).read_text())
        assert merged["passed"] is (code == EXIT_OK) and merged["thresholds"]["break"] == breaking
        page = (tmp_path / f"m{breaking}" / report.HTML).read_text()
        assert '<span class="warn">1 / 4 (25.0 %)</span>' in page  # between low 20 and high 90
        assert f"break {breaking:g} % (a score below it fails the run, exit 1): " in page
        stryker = json.loads((tmp_path / f"m{breaking}" / report.STRYKER).read_text())
        assert stryker["thresholds"] == {"high": 90, "low": 20}
    # merge's own flags over the shards' recorded thresholds
    code = main(["merge", str(tmp_path / "flags"), str(tmp_path / "s"), "--threshold-break", "26"])
    assert code == EXIT_DIVERGENCE
    assert json.loads((tmp_path / "flags" / report.OUTCOMES).read_text())["thresholds"] == {
        "high": 90, "low": 20, "break": 26.0}  # fmt: skip
    # "none" (the workflow's default) over a recorded break: every mutant must be caught again
    assert main(["merge", str(tmp_path / "none"), str(tmp_path / "s"), "--threshold-break", "none"]) == EXIT_DIVERGENCE
    assert json.loads((tmp_path / "none" / report.OUTCOMES).read_text())["thresholds"]["break"] is None
    # a void report never passes, whatever its score
    assert report.passes(_document(STATUSES, verdict=report.VOID, thresholds={"break": 0})) is False
    assert '<span class="bad">' in report.html_page(_document(STATUSES, thresholds={"low": 30}))


def test_the_budget_reads_as_text() -> None:
    page = report.html_page(_document(STATUSES))
    line = page.split("<dt>budget</dt><dd>")[1].split("</dd>")[0]
    assert line == ("seed 20261202; 3,000 histories per campaign, at most 40 steps each; 600 s per campaign "
                    "(killed at 660 s); shrinking up to 5 s; restarts and crashes on; replicas off")  # fmt: skip


def test_the_record_types_name_the_dataclasses_fields() -> None:
    # Outcome.as_json and Budget.as_json cast asdict() to these types: the cast holds while the names agree
    assert set(records.Record.__annotations__) == set(Outcome.__dataclass_fields__)
    assert set(records.BudgetRecord.__annotations__) == set(Budget.__dataclass_fields__)
    outcome = Outcome("m", "lua", CAUGHT, locations=[{"file": "executors/lua/a.lua", "start": 1, "end": 2}])
    assert Outcome.from_json(outcome.as_json()) == outcome


@pytest.mark.browser
def test_the_page_fits_1280_px_in_a_real_browser(tmp_path: Path) -> None:
    from tests.test_reports import in_browser

    # a reason with a long path in its first 120 characters (as a module that did not load has), no space
    # to wrap at: the table overflowed 1,280 px by 170 px and cut the reason column
    reason = ("SetupProblem: native: valkey-server could not load module /work/wt/resp3multi/mutants/.cache/native/"
              "33c59e44d4d51552fa51/libemq_native.so: Module initialization failed")  # fmt: skip
    document = _document(STATUSES)
    for record in document["outcomes"]:
        record.update(reason=reason, needs=["restarts", "corruption"], minimal_steps=12)
    # a survivor's diff with a line far wider than the page, and a long file name in the scores' tables
    long_line = "+" + "local x = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now) " * 8
    for record in report.scored(document):
        record.update(diff=f"--- a/x.lua\n+++ b/x.lua\n@@ -1 +1 @@\n-old\n{long_line}\n",
                      locations=[{"file": "executors/native/src/" + "deeply/nested/" * 12 + "file.rs", "start": 1,
                                  "end": 1}])  # fmt: skip
    report.write_all(tmp_path, document)
    written = (tmp_path / report.HTML).read_text()
    assert "deeply/nested" in written and html.escape(long_line[:40]) in written
    # the page has no script: a copy with one that writes what it measures into the DOM
    probe = tmp_path / "probe.html"
    measure = (
        "<script>window.onload = () => { const cells = [...document.querySelectorAll('td.reason')]; "
        "const right = Math.max(...cells.map(c => c.getBoundingClientRect().right)); "
        "const width = document.documentElement.scrollWidth; "
        "document.body.setAttribute('data-measure', JSON.stringify({width, right, cells: cells.length})); };</script>"
    )
    probe.write_text((tmp_path / report.HTML).read_text().replace("</body>", measure + "</body>"))
    dom = in_browser(probe, "--dump-dom", window=(1280, 900))
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = json.loads(html.unescape(dom.stdout.split('data-measure="')[1].split('"')[0]))
    assert found["cells"] == len(document["outcomes"])
    assert found["width"] <= 1280 and found["right"] <= 1280, found  # nothing cut, no sideways scrolling


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.subprocess
@pytest.mark.timeout(300)
def test_sigterm_stops_the_runner_with_143_and_ctrl_c_with_130(tmp_path: Path) -> None:
    # the runner's first line (the subset it runs) comes before anything is built or started; the
    # budget is one no busy machine spends before the signal lands (with 20 histories a whole run
    # once ended, exit 0, between the test reading that line and sending the signal)
    for signum, code in ((signal.SIGTERM, EXIT_TERMINATED), (signal.SIGINT, EXIT_INTERRUPTED)):
        reports = tmp_path / f"m{signum}"
        runner = subprocess.Popen([sys.executable, "-m", "mutants", "--only", "lua-complete-double-counts",
                                   "--examples", "100000", "--jobs", "1", "--reports", str(reports)],
                                  cwd=cat.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert runner.stdout is not None
            assert runner.stdout.readline().startswith("subset: 1 of ")
            runner.send_signal(signum)
            _, err = runner.communicate(timeout=120)
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
        by = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        assert runner.returncode == code and f"interrupted by {by}" in err, (runner.returncode, err[-2000:])


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.subprocess
@pytest.mark.timeout(900)
def test_the_merged_shards_give_the_unsharded_verdicts(tmp_path: Path) -> None:
    # two Lua mutants (no build), the canary and the null run on a small budget: ~20 s a run here
    chosen = ["lua-fail-never-dead-letters", "lua-complete-double-counts"]
    budget = Budget(seed=20261202, examples=60, timeout_s=600.0, shrink_s=2.0, sizes=False)
    whole, outcomes = run(RunConfig(tmp_path / "whole", budget, only=chosen, jobs=2), say=lambda _: None)
    codes = [
        run(RunConfig(tmp_path / f"s{k}", budget, only=chosen, jobs=2, shard=(k, 2)), say=lambda _: None)[0]
        for k in (1, 2)
    ]
    assert {o.id for o in outcomes} >= set(chosen)
    for k in (1, 2):  # each shard ran its share, with its own null run and canary
        shard = json.loads((tmp_path / f"s{k}" / report.OUTCOMES).read_text())
        assert shard["chosen"] == [m.id for m in select_shard([m for m in MUTANTS if m.id in chosen], k, 2)]
        assert [r["id"] for r in shard["outcomes"]][:2] == [report.NULL_RUN, "canary-lua-enqueue-replies-two"]
    code = merge(tmp_path / "merged", [tmp_path / "s1", tmp_path / "s2"], say=lambda _: None)
    unsharded = json.loads((tmp_path / "whole" / report.OUTCOMES).read_text())
    merged = json.loads((tmp_path / "merged" / report.OUTCOMES).read_text())

    def records(document: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
        return {r["id"]: (r["status"], r["histories"], r["steps"], r["restarts"]) for r in document["outcomes"]}

    assert records(merged) == records(unsharded)
    assert merged["verdict"] == unsharded["verdict"] and merged["summary"] == unsharded["summary"]
    assert merged["score"] == unsharded["score"] and code == whole and max(codes) == whole
    assert [r["id"] for r in merged["outcomes"]] == [r["id"] for r in unsharded["outcomes"]]


def _marked(mark: str) -> list[int]:
    """Processes (servers above all) whose environment carries the task's mark."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"{MARK_VARIABLE}={mark}".encode() in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.subprocess
@pytest.mark.timeout(900)
def test_a_campaign_past_its_hard_limit_is_killed_with_its_servers(tmp_path: Path) -> None:
    base, problem = baseline(DEFAULT_CACHE)
    assert base is not None, problem
    # an example budget it cannot finish, a hard limit of 12 s: the child is stopped mid-campaign.
    # The limit leaves the spawned child time to import and start both servers on a loaded
    # machine (at 6 s, under a load of 15 on two cores, only the child and one server were seen)
    budget = Budget(examples=1_000_000, timeout_s=12.0, grace_s=0.0)
    task = Task("null-run", "both", base.module, base.lua_scripts, tmp_path / "null-run", budget)
    outcomes: list[Outcome] = []
    thread = threading.Thread(target=run_tasks, args=([lambda: task], 1, lambda _, o: outcomes.append(o) or True))
    thread.start()
    seen: set[int] = set()
    while thread.is_alive():
        seen.update(_marked(task.mark))
        time.sleep(0.05)
    thread.join()
    assert len(outcomes) == 1 and outcomes[0].status == TIMEOUT, outcomes
    assert "killed after" in outcomes[0].reason and outcomes[0].campaign_s >= 12.0
    assert len(seen) >= 3  # the child and its two servers were up
    assert _marked(task.mark) == []  # and nothing of them is left
