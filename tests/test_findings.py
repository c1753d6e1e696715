"""Every distinct finding of a run, and the known-findings file: two planted defects both reported,
each shrunk and replayable; accepted ones counted as known (exit 6), new ones still exit 1; bad
entries one line and exit 2; stale and expired entries told apart."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from difftest.base.exits import EXIT_DIVERGENCE, EXIT_KNOWN, EXIT_OK, EXIT_SETUP
from difftest.base.problems import SetupProblem
from difftest.cli.main import main
from difftest.findings import known, tally
from difftest.history import format as hist
from tests.helpers import planted_scripts

TODAY = datetime.date(2026, 12, 7)
# the two planted defects' signatures (difftest/findings/signature.py): COMPLETE counts two completions,
# FAIL counts three failures of a job it dead-letters
COMPLETE_TWICE, FAIL_THRICE = "1bb3dbf7ab69", "407fcaf975a4"


def entry(signature: str, **fields: str) -> str:
    values = {"signature": signature, "reason": "https://example.org/emq/issues/7", "accepted_by": "ana",
              "expires": "2099-01-31", **fields}  # fmt: skip
    return "[[known]]\n" + "".join(f"{k} = {v if k == 'expires' else json.dumps(v)}\n" for k, v in values.items())


# ---- the file, pure ----------------------------------------------------------------------------------


def test_a_good_file_reads_with_each_entry_and_its_status() -> None:
    text = entry(f"divergence:{COMPLETE_TWICE}") + entry("survivor:lua-promote-int-2-minus-2", expires="2026-12-06")
    found = known.parse(text, Path("known-findings.toml"))
    signatures = [e.signature for e in found.entries]
    assert signatures == [f"divergence:{COMPLETE_TWICE}", "survivor:lua-promote-int-2-minus-2"]
    assert found.accepted(known.DIVERGENCE, TODAY) == {COMPLETE_TWICE}
    assert found.accepted(known.SURVIVOR, TODAY) == set()  # expired yesterday
    assert found.status(known.DIVERGENCE, COMPLETE_TWICE, TODAY) == known.KNOWN
    assert found.status(known.SURVIVOR, "lua-promote-int-2-minus-2", TODAY) == known.EXPIRED
    assert found.status(known.DIVERGENCE, FAIL_THRICE, TODAY) == known.NEW


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (entry("crash:1234"), "neither divergence:<12 hex digits>"),
        (entry("divergence:12ab"), "neither divergence:<12 hex digits>"),
        (entry(f"divergence:{COMPLETE_TWICE}", reason=""), "no reason"),
        ('[[known]]\nsignature = "divergence:1bb3dbf7ab69"\nreason = "x"\naccepted_by = "ana"\n', "no expires"),
        (entry(f"divergence:{COMPLETE_TWICE}", expires='"soon"'), "is not a date"),
        (entry(f"divergence:{COMPLETE_TWICE}", owner="ana"), "unknown field(s) owner"),
        (entry(f"divergence:{COMPLETE_TWICE}") * 2, "listed twice"),
        ("[known]\nsignature = 1\n", "array of tables"),
        ("[[known]\n", "not TOML"),
    ],
)
def test_a_bad_entry_is_one_line_naming_the_file_and_the_fix(text: str, says: str) -> None:
    with pytest.raises(SetupProblem) as raised:
        known.parse(text, Path("kf.toml"))
    message = str(raised.value)
    assert says in message and message.startswith("kf.toml") and "\n" not in message


def test_statuses_counts_and_the_verdict_words_follow_the_file() -> None:
    text = entry(f"divergence:{COMPLETE_TWICE}", expires="2026-12-01") + entry("divergence:aaaaaaaaaaaa")
    text += entry("divergence:bbbbbbbbbbbb")
    found = known.parse(text, Path("kf.toml"))
    failures = [{"signature": FAIL_THRICE, "batch": 3, "artifact": "b", "steps": 4},
                {"signature": FAIL_THRICE, "batch": 1, "artifact": "a", "steps": 5},
                {"signature": COMPLETE_TWICE, "batch": 0, "artifact": "c", "steps": 3}]  # fmt: skip
    meetings = {FAIL_THRICE: {"count": 3, "first_at": 1.0, "last_at": 9.0},
                COMPLETE_TWICE: {"count": 7, "first_at": 2.0, "last_at": 3.0},
                "aaaaaaaaaaaa": {"count": 2, "first_at": 4.0, "last_at": 5.0}}  # fmt: skip
    findings = tally.distinct(failures, meetings, found, TODAY, stale=["bbbbbbbbbbbb"])
    status = {f["signature"]: f["status"] for f in findings}
    assert status == {COMPLETE_TWICE: known.EXPIRED, FAIL_THRICE: known.NEW, "aaaaaaaaaaaa": known.KNOWN,
                      "bbbbbbbbbbbb": known.STALE}  # fmt: skip
    fail = next(f for f in findings if f["signature"] == FAIL_THRICE)
    assert fail["artifact"] == "a" and fail["also"] == ["b"] and fail["count"] == 3  # the first batch's artifact
    assert {f["signature"] for f in tally.failing(findings)} == {COMPLETE_TWICE, FAIL_THRICE}
    assert tally.verdict_words(findings) == "3 distinct findings: 1 new, 1 expired, 1 known"
    # a merge of shards adds the meetings up: counts summed, the first first, the last last
    merged = tally.meetings_of(findings)
    tally.add_meetings(merged, {FAIL_THRICE: {"count": 2, "first_at": 0.5, "last_at": 4.0, "first_batch": 8}})
    assert merged[FAIL_THRICE]["count"] == 5 and merged[FAIL_THRICE]["first_at"] == 0.5
    assert merged[FAIL_THRICE]["last_at"] == 9.0


def test_a_finding_and_a_night_hold_only_the_keys_their_types_name() -> None:
    from difftest.findings.entries import Finding, Meeting, Night, NightFinding, Nights

    found = known.parse(entry("divergence:aaaaaaaaaaaa"), Path("kf.toml"))
    failures = [{"signature": FAIL_THRICE, "batch": 1, "artifact": "a", "steps": 5, "reason": "r", "described": "d",
                 "link": "l", "reproduce": "difftest replay a"}]  # fmt: skip
    meetings = {FAIL_THRICE: {"count": 3, "first_at": 1.0, "last_at": 9.0, "first_batch": 1, "last_batch": 4}}
    findings = tally.distinct(failures, meetings, found, TODAY)
    assert all(set(f) <= set(Finding.__annotations__) | set(Meeting.__annotations__) for f in findings)
    assert [f["status"] for f in findings] == [known.NEW, known.NOT_MET]
    line = tally.history_line(findings, 5.0, 7)
    assert set(line) == set(Night.__annotations__)
    assert line["findings"] == [{"signature": FAIL_THRICE, "status": known.NEW, "count": 3}]
    assert all(set(f) <= set(NightFinding.__annotations__) for f in line["findings"])
    nights = tally.across_nights([line], findings, 6.0)
    assert nights == {FAIL_THRICE: {"nights": 2, "first_night": 5.0, "last_night": 6.0, "status": known.NEW}}
    assert set(nights[FAIL_THRICE]) <= set(Nights.__annotations__)


# ---- campaigns on real servers ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_defects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("two")
    scripts = planted_scripts(directory, "complete.lua", "'count', 1)", "'count', 2)")
    source = (scripts / "fail.lua").read_text()
    (scripts / "fail.lua").write_text(source.replace("'count', 1)", "'count', 3)"))
    return scripts


def run(tmp_path: Path, scripts: Path, *extra: str) -> tuple[int, dict[str, object]]:
    reports = tmp_path / "reports"
    code = main(["run", "--examples", "40", "--seed", "8", "--workers", "1", "--no-production-size", "--no-database",
                 "--lua-scripts", str(scripts), "--reports", str(reports), *extra])  # fmt: skip
    summaries = sorted(reports.glob("*/summary.json"))
    return code, json.loads(summaries[-1].read_text()) if summaries else {}


@pytest.mark.servers
def test_a_run_goes_on_past_its_first_finding_and_reports_each_distinct_one(
    two_defects: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, summary = run(tmp_path, two_defects, "--no-known-findings")
    out = capsys.readouterr().out
    assert code == EXIT_DIVERGENCE
    assert summary["histories"] == 40  # the budget stays exact: the batch the findings cut short was run again
    findings = {f["signature"]: f for f in summary["findings"]}  # type: ignore[attr-defined]
    assert set(findings) == {COMPLETE_TWICE, FAIL_THRICE}
    assert all(f["status"] == known.NEW and f["count"] >= 1 for f in findings.values())
    assert len(summary["divergences"]) == 2  # type: ignore[arg-type]
    assert "2 distinct findings: 2 new" in out.splitlines()[-1]
    for finding in findings.values():  # each shrunk and replayable
        artifact = Path(str(finding["artifact"]))
        assert len(hist.load(artifact / "history.jsonl").steps) <= 6
        assert f"DIVERGENCE divergence:{finding['signature']}" in out
        replayed = main(["replay", str(artifact), "--lua-scripts", str(two_defects), "--reports", str(tmp_path / "r")])
        assert replayed == EXIT_DIVERGENCE


@pytest.mark.servers
def test_stop_at_first_stops_at_the_first_finding(two_defects: Path, tmp_path: Path) -> None:
    code, summary = run(tmp_path, two_defects, "--no-known-findings", "--stop-at-first")
    assert code == EXIT_DIVERGENCE
    assert len(summary["findings"]) == 1  # type: ignore[arg-type]
    assert summary["histories"] < 40 and summary["stop_at_first"] is True


@pytest.mark.servers
def test_the_first_accepted_is_known_and_the_second_still_exits_1(
    two_defects: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "known-findings.toml"
    file.write_text(entry(f"divergence:{COMPLETE_TWICE}"))
    code, summary = run(tmp_path, two_defects, "--known-findings", str(file))
    out = capsys.readouterr().out
    assert code == EXIT_DIVERGENCE
    status = {f["signature"]: f["status"] for f in summary["findings"]}  # type: ignore[attr-defined]
    assert status == {COMPLETE_TWICE: known.KNOWN, FAIL_THRICE: known.NEW}
    assert [d["signature"] for d in summary["divergences"]] == [FAIL_THRICE]  # type: ignore[attr-defined]
    assert f"KNOWN FINDING divergence:{COMPLETE_TWICE}" in out and "accepted by ana" in out
    # junit.xml: a case per distinct finding, the new one failed, the known one skipped with its reason
    junit = next((tmp_path / "reports").glob("*/junit.xml")).read_text()
    assert f'name="divergence:{COMPLETE_TWICE}"' in junit and "known (https://example.org/emq/issues/7" in junit
    assert f'name="divergence:{FAIL_THRICE}"' in junit and 'message="new: ' in junit
    assert not (Path(str(summary["divergences"][0]["artifact"])).parent / "batch-0-1").exists()  # type: ignore[index]


@pytest.mark.servers
def test_both_accepted_exit_with_the_known_code_and_say_so(
    two_defects: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "known-findings.toml"
    file.write_text(entry(f"divergence:{COMPLETE_TWICE}") + entry(f"divergence:{FAIL_THRICE}"))
    code, summary = run(tmp_path, two_defects, "--known-findings", str(file))
    last = capsys.readouterr().out.splitlines()[-1]
    assert code == EXIT_KNOWN and summary["verdict"] == "known"
    assert last.startswith("known: 40 histories") and "2 distinct findings: 2 known" in last
    assert summary["divergences"] == [] and summary["histories"] == 40
    assert not list((tmp_path / "reports").glob("*/failures/*"))


@pytest.mark.servers
def test_an_entry_whose_history_no_longer_reproduces_is_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a finding of the planted COMPLETE defect; the scripts under test are the unmodified ones: fixed
    history = hist.History((hist.call_step("ENQUEUE", "q", "j1", "p", 0), hist.call_step("CLAIM", "q", 100),
                            hist.call_step("COMPLETE", "q", "j1", 1)))  # fmt: skip
    (tmp_path / "known").mkdir()
    (tmp_path / "known" / "complete.jsonl").write_text(hist.dumps(history))
    file = tmp_path / "known-findings.toml"
    file.write_text(entry(f"divergence:{COMPLETE_TWICE}", history="known/complete.jsonl"))
    reports = tmp_path / "reports"
    code = main(["run", "--examples", "5", "--seed", "3", "--workers", "1", "--no-production-size", "--no-database",
                 "--reports", str(reports), "--known-findings", str(file)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert f"STALE: divergence:{COMPLETE_TWICE} no longer reproduces" in out and "remove its entry" in out
    summary = json.loads(next(reports.glob("*/summary.json")).read_text())
    assert [(f["signature"], f["status"]) for f in summary["findings"]] == [(COMPLETE_TWICE, known.STALE)]


@pytest.mark.subprocess  # a fresh cache: the frozen clock is compiled (cc) before the refusal
def test_a_bad_known_findings_file_is_one_line_and_exit_2_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "known-findings.toml"
    file.write_text(entry("divergence:nothex!!"))
    reports = tmp_path / "reports"
    code = main(["run", "--examples", "5", "--reports", str(reports), "--known-findings", str(file)])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_SETUP and len(err.splitlines()) == 1 and "entry 1" in err and str(file) in err
    assert not reports.exists() or not list(reports.iterdir())
    missing = main(["run", "--examples", "5", "--reports", str(reports), "--known-findings", str(tmp_path / "no")])
    assert missing == EXIT_SETUP and "no such known-findings file" in capsys.readouterr().err


# ---- the mutation gate -----------------------------------------------------------------------------


def outcomes(tmp_path: Path, statuses: dict[str, str]) -> Path:
    document = {"verdict": "some not caught", "outcomes": [{"id": "null-run", "status": "clean"},
                *({"id": ident, "status": status} for ident, status in statuses.items())]}  # fmt: skip
    (tmp_path / "outcomes.json").write_text(json.dumps(document))
    return tmp_path


@pytest.mark.parametrize(
    ("statuses", "expires", "code", "says"),
    [
        ({"a": "caught", "lua-promote-int-2-minus-2": "missed"}, "2099-01-01", EXIT_KNOWN, "KNOWN SURVIVOR"),
        ({"b": "missed", "lua-promote-int-2-minus-2": "missed"}, "2099-01-01", EXIT_DIVERGENCE, "KNOWN SURVIVOR"),
        ({"a": "caught", "lua-promote-int-2-minus-2": "missed"}, "2026-12-06", EXIT_DIVERGENCE, "EXPIRED"),
        ({"a": "caught", "lua-promote-int-2-minus-2": "caught"}, "2099-01-01", EXIT_OK, "STALE"),
    ],
)
def test_the_mutation_gate_accepts_only_the_survivors_the_file_accepts(
    tmp_path: Path, statuses: dict[str, str], expires: str, code: int, says: str
) -> None:
    from mutants.known import gate

    file = tmp_path / "known-findings.toml"
    file.write_text(entry("survivor:lua-promote-int-2-minus-2", expires=expires))
    said: list[str] = []
    before = EXIT_DIVERGENCE if "missed" in statuses.values() else EXIT_OK
    got = gate(before, outcomes(tmp_path, statuses), known.load(file), TODAY, said.append, EXIT_DIVERGENCE)
    assert got == code and any(line.startswith(says) for line in said), said
    recorded = json.loads((tmp_path / "outcomes.json").read_text())["known_findings"]
    assert recorded["file"] == str(file)
