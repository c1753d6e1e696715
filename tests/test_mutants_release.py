"""The report a release manager signs off on, on real runs of two Lua mutants (no build): scores per
transition, file and class, the survivor's diff and exposure, the score history and its change since
the last run, the break threshold per run, the incremental skip (a second run reuses, a touched
file re-scores), --in-diff's choice by changed lines and a bad ref, GitHub annotations."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from difftest.base.exits import EXIT_DIVERGENCE, EXIT_OK, EXIT_SETUP
from mutants import breakdown, report, trend
from mutants import catalogue as cat
from mutants.__main__ import main
from mutants.run import choose
from mutants.workspace import source_files

MUTANTS = {m.id: m for m in cat.load()}
# at 20 histories of seed 13: caught / missed (the whole budget without a divergence); the default seed
# caught the first in 10 until the generator's server condition also drew NOREPLICAS, seed 5 until
# production's size became about one history in twenty (issue 37), seed 9 until a payload could be a megabyte
CAUGHT_ID = "lua-fail-never-dead-letters"  # FAIL, inverted-condition, fail.lua
MISSED_ID = "lua-sweep-limit-off-by-one"  # SWEEP, off-by-one, sweep.lua
RUN = ["--only", CAUGHT_ID, MISSED_ID, "--examples", "20", "--seed", "13", "--jobs", "2"]


def _outcomes(directory: Path) -> dict[str, Any]:
    return dict(json.loads((directory / report.OUTCOMES).read_text()))


def _records(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in report.scored(document)}


def _removed_line(mutant_id: str, source: Path) -> tuple[str, int]:
    """The file the mutant's patch changes and the line its first removed line is on (read from the source)."""
    patch = MUTANTS[mutant_id].patch
    name = next(line[6:] for line in patch.splitlines() if line.startswith("+++ b/"))
    removed = next(line[1:] for line in patch.splitlines() if line.startswith("-") and not line.startswith("---"))
    return name, (source / name).read_text().splitlines().index(removed) + 1


def _scored_again(reports: Path, mutant_id: str) -> bool:
    """A campaign ran for the mutant in this report (its own directory), rather than its outcome reused."""
    return (reports / mutant_id).is_dir()


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.subprocess
@pytest.mark.timeout(900)
def test_scores_survivors_history_thresholds_and_the_incremental_skip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / trend.FILE_NAME  # the default: beside the report directories
    # 1. a full run, the break threshold at 40 %: the score 1/2 (50 %) passes it
    assert main([*RUN, "--reports", str(tmp_path / "r1"), "--threshold-break", "40", "--github-annotations"]) == EXIT_OK
    out = capsys.readouterr().out
    first = _outcomes(tmp_path / "r1")
    records = _records(first)
    assert {i: r["status"] for i, r in records.items()} == {CAUGHT_ID: "caught", MISSED_ID: "missed"}
    file, line = _removed_line(MISSED_ID, cat.EXECUTOR_DIRS["lua"])
    fail_file = f"executors/lua/{_removed_line(CAUGHT_ID, cat.EXECUTOR_DIRS['lua'])[0]}"
    sweep_file = f"executors/lua/{file}"

    def entry(caught: int, viable: int, not_caught: list[str]) -> dict[str, Any]:
        return {"caught": caught, "viable": viable, "mutants": 1, "not_caught": not_caught,
                "percent": 100.0 * caught / viable}  # fmt: skip

    assert first["scores"] == {
        "transition": {"FAIL": entry(1, 1, []), "SWEEP": entry(0, 1, [MISSED_ID])},
        "file": {fail_file: entry(1, 1, []), sweep_file: entry(0, 1, [MISSED_ID])},
        "class": {"inverted-condition": entry(1, 1, []), "off-by-one": entry(0, 1, [MISSED_ID])},
    }
    assert "by transition: FAIL 1/1 (100.0 %), SWEEP 0/1 (0.0 %)" in out
    assert f"by file: {fail_file} 1/1 (100.0 %), {sweep_file} 0/1 (0.0 %)" in out
    assert "by class: inverted-condition 1/1 (100.0 %), off-by-one 0/1 (0.0 %)" in out
    # the survivor: where it is, its diff, its exposure (the whole budget; the SWEEP labels it reached)
    survivor = records[MISSED_ID]
    assert survivor["locations"] == [{"file": sweep_file, "start": line, "end": line}]
    assert survivor["diff"] == MUTANTS[MISSED_ID].patch.replace(" a/", " a/executors/lua/").replace(
        " b/", " b/executors/lua/"
    )
    assert records[CAUGHT_ID]["diff"] == ""  # a caught mutant's patch is not repeated
    assert survivor["histories"] == 20 and survivor["exposure"]
    assert all("SWEEP" in breakdown.label_transitions(label) for label in survivor["exposure"])
    assert any(label.startswith("reply:SWEEP:") for label in survivor["exposure"])
    assert f"not caught: {MISSED_ID} (missed; {sweep_file}:{line}; 20 histories" in out
    page = (tmp_path / "r1" / report.HTML).read_text()
    shown = page.split(f'<div class="survivor" id="survivor-{MISSED_ID}">')[1].split("</div>")[0]
    for patch_line in MUTANTS[MISSED_ID].patch.splitlines()[3:]:  # the hunk's lines, escaped, in the page
        assert html.escape(patch_line, quote=True) in shown, patch_line
    assert 'class="by-transition"' in page and 'class="by-file"' in page and 'class="by-class"' in page
    # the survivor as a GitHub annotation on its line
    annotation = f"::error file={sweep_file},line={line},endLine={line},title=mutant survived%3A {MISSED_ID}::SWEEP"
    assert annotation in out and out.count("::error ") == 1
    # the history: one record, its gate and thresholds; no earlier run to compare with
    assert [(r["passed"], r["thresholds"]["break"], r["score"]["percent"]) for r in trend.read(history)] == [
        (True, 40.0, 50.0)
    ]
    assert first["since"]["last"] is None

    # 2. --incremental, the break threshold at 60 %: nothing changed, both outcomes reused (no campaign
    # of theirs), the same score now fails the gate; the history says both runs' verdicts
    code = main([*RUN, "--reports", str(tmp_path / "r2"), "--threshold-break", "60", "--incremental"])
    assert code == EXIT_DIVERGENCE
    out = capsys.readouterr().out
    second = _outcomes(tmp_path / "r2")
    records = _records(second)
    assert {i: (r["status"], r["reused_from"]) for i, r in records.items()} == {
        CAUGHT_ID: ("caught", "../r1"), MISSED_ID: ("missed", "../r1")}  # fmt: skip
    assert not _scored_again(tmp_path / "r2", CAUGHT_ID) and not _scored_again(tmp_path / "r2", MISSED_ID)
    killing = tmp_path / "r2" / records[CAUGHT_ID]["artifact"] / "report.txt"
    assert records[CAUGHT_ID]["artifact"].startswith(f"../r1/{CAUGHT_ID}/") and killing.is_file()
    assert records[MISSED_ID]["diff"] == survivor["diff"] and records[MISSED_ID]["digests"] == survivor["digests"]
    assert "incremental: 2 of 2 mutants unchanged since a recorded outcome (reused), 0 to score" in out
    assert [(r["passed"], r["thresholds"]["break"], r["reused"]) for r in trend.read(history)] == [
        (True, 40.0, 0), (False, 60.0, 2)]  # fmt: skip
    since = second["since"]
    assert since["last"]["passed"] is True and since["last"]["thresholds"]["break"] == 40.0
    assert since["last"]["report"] == "r1" and since["score"] == {"before": 50.0, "now": 50.0, "change": 0.0}
    assert since["changes"] == {"transition": {}, "file": {}, "class": {}}
    assert "since the last run (" in out and "r1: passed, break 40 %): score 50.0 % -> 50.0 % (+0.0)" in out
    page = (tmp_path / "r2" / report.HTML).read_text()
    assert "<dt>since the last run</dt>" in page and "2 of 2 mutants reused" in page
    assert '<td class="missed">missed reused</td>' in page

    # 3. a file of one mutant touched (a comment appended to the scripts' copy the run reads): that
    # mutant is scored again, the other keeps the outcome it was first scored with
    copy = tmp_path / "lua"
    shutil.copytree(cat.EXECUTOR_DIRS["lua"], copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / file).open("a") as touched:
        touched.write("-- touched\n")
    monkeypatch.setitem(cat.EXECUTOR_DIRS, "lua", copy)
    assert main([*RUN, "--reports", str(tmp_path / "r3"), "--incremental"]) == EXIT_DIVERGENCE
    third = _records(_outcomes(tmp_path / "r3"))
    assert third[CAUGHT_ID]["reused_from"] == "../r1" and not _scored_again(tmp_path / "r3", CAUGHT_ID)
    assert third[MISSED_ID]["reused_from"] == "" and _scored_again(tmp_path / "r3", MISSED_ID)
    assert third[MISSED_ID]["why_scored"] == "its patch or a file it patches changed"
    assert third[MISSED_ID]["digests"]["patched"] != survivor["digests"]["patched"]
    assert third[MISSED_ID]["digests"]["instrument"] == survivor["digests"]["instrument"]
    assert third[CAUGHT_ID]["digests"] == records[CAUGHT_ID]["digests"]
    assert len(trend.read(history)) == 3


@pytest.mark.subprocess
def test_the_change_since_the_last_run_per_transition_file_and_class(tmp_path: Path) -> None:
    history = tmp_path / trend.FILE_NAME

    def document(statuses: dict[str, str], passed: bool) -> dict[str, Any]:
        outcomes = [{"id": i, "executor": "lua", "status": s, "transition": MUTANTS[i].transition,
                     "defect_class": MUTANTS[i].defect_class, "locations": breakdown.locations(MUTANTS[i])}
                    for i, s in statuses.items()]  # fmt: skip
        found = report.summarise({"verdict": report.SOME_NOT_CAUGHT, "budget": {"seed": 1, "examples": 20},
                                  "thresholds": {"high": 80, "low": 60, "break": 50},
                                  "outcomes": outcomes})  # fmt: skip
        return {**found, "passed": passed}

    before = document({CAUGHT_ID: "caught", MISSED_ID: "missed"}, passed=True)
    trend.append(history, trend.entry(before, tmp_path / "r1", history))
    # another budget is no comparison: the last run is the one of the same scope and budget
    other = {**document({CAUGHT_ID: "missed"}, passed=False), "budget": {"seed": 2, "examples": 20}}
    trend.append(history, trend.entry(other, tmp_path / "r-other", history))
    now = document({CAUGHT_ID: "caught", MISSED_ID: "caught", "lua-claim-takes-newest": "caught"}, passed=True)
    delta = trend.since(trend.previous(history, now), now, history)
    assert delta["last"]["report"] == "r1" and delta["score"] == {"before": 50.0, "now": 100.0, "change": 50.0}
    assert delta["changes"]["transition"] == {"SWEEP": {"before": 0.0, "now": 100.0, "change": 100.0},
                                              "CLAIM": {"before": None, "now": 100.0, "change": None}}  # fmt: skip
    assert set(delta["changes"]["file"]) == {"executors/lua/sweep.lua", "executors/lua/claim.lua"}
    assert delta["changes"]["class"]["off-by-one"]["change"] == 100.0
    lines = trend.since_lines(delta)
    assert lines[0].endswith("score 50.0 % -> 100.0 % (+50.0)") and "r1: passed, break 50 %" in lines[0]
    assert "moved by transition: CLAIM new -> 100.0 %, SWEEP 0.0 % -> 100.0 %" in lines[1]  # in verb order
    page = report.html_page({**now, "since": delta})
    table = page.split('class="by-transition"')[1].split("</table>")[0]
    assert '<td class="num"><span class="up">+100.0</span></td>' in table and ">new</td>" in table
    assert '<td class="key">FAIL</td>' in table and '<td class="num">=</td>' in table  # unchanged since then


def _git(directory: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(directory), *args], check=True, capture_output=True)


def _repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository holding a copy of both executors' sources (the run reads them from there)."""
    top = tmp_path / "repo"
    for executor, source in cat.EXECUTOR_DIRS.items():
        for path in source_files(executor, source):
            target = top / executor / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
        monkeypatch.setitem(cat.EXECUTOR_DIRS, executor, top / executor)
    _git(top, "init", "-q")
    _git(top, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    _git(top, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "as the tree is")
    return top


@pytest.mark.subprocess
def test_in_diff_chooses_the_mutants_on_changed_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = _repository(tmp_path, monkeypatch)
    catalogue = list(MUTANTS.values())
    file, line = _removed_line(MISSED_ID, top / "lua")
    sweep = top / "lua" / file
    original = sweep.read_text()
    lines = original.splitlines(keepends=True)
    # nothing changed against HEAD: no mutant; a line changed next to the mutant's (outside its block): none
    assert choose(catalogue, [CAUGHT_ID, MISSED_ID], None, "HEAD")[0] == []
    sweep.write_text("".join([*lines[: line - 2], "-- changed\n", *lines[line - 1 :]]))
    assert choose(catalogue, [CAUGHT_ID, MISSED_ID], None, "HEAD")[0] == []
    # the ref holds another version of the mutant's line; the tree as it was (the patch applies): chosen
    sweep.write_text("".join([*lines[: line - 1], "local expired = {}\n", *lines[line:]]))
    _git(top, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "another line")
    sweep.write_text(original)
    chosen, part = choose(catalogue, [CAUGHT_ID, MISSED_ID], None, "HEAD")
    assert [m.id for m in chosen] == [MISSED_ID]
    assert part is not None and part["in_diff"] == "HEAD" and CAUGHT_ID in part["left_out"]
    assert "--in-diff HEAD: the mutants on lines changed against it" in report.subset_text(part)
    # without --only: the catalogue's mutants on that line; against the first commit (the tree as it is) none
    assert MISSED_ID in {m.id for m in choose(catalogue, None, None, "HEAD")[0]}
    assert choose(catalogue, None, None, "HEAD~1")[0] == []


@pytest.mark.subprocess
def test_in_diff_with_no_mutant_on_a_changed_line_scores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _repository(tmp_path, monkeypatch)
    assert main(["--in-diff", "HEAD", "--reports", str(tmp_path / "m")]) == EXIT_OK
    out, err = capsys.readouterr()
    assert out == "--in-diff HEAD: no mutant lies on a line changed against it; nothing scored, no report written\n"
    assert err == "" and not (tmp_path / "m").exists()


@pytest.mark.subprocess
@pytest.mark.parametrize("ref", ["no-such-ref", "HEAD~100000", "--output=x"])
def test_a_bad_ref_is_one_line_and_exit_2(ref: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"--in-diff={ref}", "--only", CAUGHT_ID, "--reports", str(tmp_path / "m")]) == EXIT_SETUP
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, (out, err)
    assert err.startswith(f"python -m mutants: --in-diff {ref}: not a commit git knows in ")
    assert not (tmp_path / "m").exists() and not (tmp_path / trend.FILE_NAME).exists()


@pytest.mark.parametrize("mutant", list(MUTANTS.values()), ids=lambda m: m.id)
def test_every_change_block_is_in_the_original_file(mutant: cat.Mutant) -> None:
    for executor in mutant.executors:
        patch = mutant.patch_for(executor)
        found = breakdown.blocks(patch)
        first = report.patch_location(patch)
        assert found and first is not None
        assert (found[0].path, found[0].start) == (first.path, first.start_line)  # the first is Stryker's
        for block in found:
            lines = (cat.EXECUTOR_DIRS[executor] / block.path).read_text().splitlines()
            assert 1 <= block.start <= block.end <= len(lines) + 1


def test_annotations_escape_what_github_reads_as_syntax() -> None:
    record = {"id": "m", "status": "timeout", "transition": "CLAIM", "defect_class": "x", "histories": 3,
              "steps": 9, "reason": "50% of\nthe: budget, spent", "exposure": {},
              "locations": [{"file": "executors/lua/a,b.lua", "start": 4, "end": 5}]}  # fmt: skip
    (line,) = breakdown.github_annotations([record, {**record, "id": "n", "status": "caught"}])
    assert line.startswith("::warning file=executors/lua/a%2Cb.lua,line=4,endLine=5,title=mutant timeout%3A m::")
    assert "50%25 of%0Athe: budget, spent" in line and "\n" not in line


@pytest.mark.subprocess
def test_a_merge_appends_to_the_score_history(tmp_path: Path) -> None:
    from difftest.report.nightly import mutants_section
    from tests.test_mutants_report import STATUSES, _document

    report.write_outcomes(tmp_path / "s1", _document(STATUSES, thresholds={"break": 20}))
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "s1")]) == EXIT_OK
    (record,) = trend.read(tmp_path / trend.FILE_NAME)
    assert record["report"] == "out" and record["passed"] is True and record["score"]["percent"] == 25.0
    assert set(record["scores"]) == {"transition", "file", "class"}
    assert main(["merge", str(tmp_path / "again"), str(tmp_path / "s1"), "--score-history", "none"]) == EXIT_OK
    assert len(trend.read(tmp_path / trend.FILE_NAME)) == 1
    # the second merge into the same place is compared with the first; the nightly's summary says both
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "s1")]) == EXIT_OK
    lines, good = mutants_section(tmp_path / "out", None)
    assert (
        good
        and "- by transition: CLAIM 1/4" in lines
        and any(
            line.startswith("- since the last run (") and line.endswith("25.0 % -> 25.0 % (+0.0)") for line in lines
        )
    ), lines
