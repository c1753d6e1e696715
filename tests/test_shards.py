"""Campaign shards: a split campaign merged equals the unsharded one (on real servers), and shards
that do not fit together are refused with one line and exit code 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from difftest.base.exits import EXIT_KNOWN
from difftest.campaign.driver import CampaignConfig, batch_sizes, shard_batch
from difftest.cli.main import EXIT_DIVERGENCE, EXIT_OK, EXIT_SETUP, main
from difftest.report.shards import ShardMismatch, merge, owns, parse_shard

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"campaign": ("servers",)}

# ---- which batches a shard runs -------------------------------------------------------------------------


def test_shards_deal_out_every_batch_once() -> None:
    total = len(batch_sizes(CampaignConfig(seed=1, module=Path(), reports=Path(), examples=400)) or [])
    for count in (1, 2, 3, 4):
        dealt = [b for k in range(1, count + 1) for p in range(total) if (b := shard_batch((k, count), p)) < total]
        assert sorted(dealt) == list(range(total)), count
        assert all(owns((k, count), shard_batch((k, count), p)) for k in range(1, count + 1) for p in range(5))


@pytest.mark.parametrize("text", ["", "2", "0/2", "3/2", "a/b", "1/0", "-1/2", "1/2/3"])
def test_a_bad_shard_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--shard"):
        parse_shard(text)
    assert parse_shard("2/3") == (2, 3)


# ---- merging summaries (plain data) ---------------------------------------------------------------------


def batch(number: int, histories: int = 40, diverged: bool = False, **labels: int) -> dict[str, Any]:
    return {"batch": number, "worker": 0, "histories": histories, "steps": 10 * histories, "diverged": diverged,
            "finished_s": float(number), "labels": labels or {"reply:ENQUEUE:added": 1}}  # fmt: skip


def shard(index: int, count: int, batches: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    divergences = [{"batch": b["batch"], "reason": f"planted in {b['batch']}", "steps": 3,
                    "artifact": f"somewhere/failures/batch-{b['batch']}", "link": f"failures/batch-{b['batch']}",
                    "detail": {"step": 2, "kind": "divergence", "call": "{}", "lua_reply": "1", "native_reply": "0",
                               "keys": [{"key": "emq:{q}:done", "lua": "planted", "native": "None"}],
                               "keys_differing": 1}}
                   for b in batches if b["diverged"]]  # fmt: skip
    # a verdict as a run writes it: merge refuses a summary without one
    document = {"verdict": "divergence" if divergences else "agree",
                "seed": 5, "budget": {"examples": 160, "seconds": None}, "restarts": True, "max_steps": 40,
                "shard": {"index": index, "count": count} if count > 1 else None, "workers": 1, "module": "m.so",
                "lua_scripts": None, "elapsed_s": 4.0, "interrupted": False, "divergences": divergences,
                "host": "h", "batches": batches}  # fmt: skip
    document.update(overrides)
    return document


def test_the_first_divergent_batch_wins_and_later_batches_drop(tmp_path: Path) -> None:
    one = shard(1, 2, [batch(0), batch(2, histories=7, diverged=True)])
    two = shard(2, 2, [batch(1, **{"contract:D1": 2}), batch(3, histories=5, diverged=True)])
    merged = merge([(tmp_path / "a", one), (tmp_path / "b", two)], tmp_path / "out")
    assert merged["verdict"] == "divergence"
    assert [d["batch"] for d in merged["divergences"]] == [2]  # not batch 3, found later in the sequence
    assert [b["batch"] for b in merged["batches"]] == [0, 1, 2]
    assert (merged["histories"], merged["steps"]) == (40 + 40 + 7, 870)
    assert merged["coverage"]["contract:D1"] == 2 and merged["coverage"]["reply:ENQUEUE:added"] == 2
    assert merged["divergences"][0]["link"] == "../a/failures/batch-2"
    assert [p["histories"] for p in merged["progress"]] == [40, 80, 87]


def finding(signature: str, status: str, count: int, batch_number: int, at: float) -> dict[str, Any]:
    entry = {"signature": signature, "status": status, "count": count, "first_at": at, "last_at": at + 5,
             "first_batch": batch_number, "last_batch": batch_number}  # fmt: skip
    if status == "new":
        where = f"failures/batch-{batch_number}"
        entry.update({"batch": batch_number, "steps": 3, "reason": "planted", "described": "COMPLETE (call)",
                      "artifact": f"x/{where}", "link": where})  # fmt: skip
    return entry


def test_shards_that_went_on_past_their_findings_merge_every_batch_and_every_finding(tmp_path: Path) -> None:
    # `difftest run` goes on past a finding (stop_at_first false): the merge keeps every batch and adds
    # the shards' distinct findings up, each signature's artifact the one of its first batch
    one = shard(
        1,
        2,
        [batch(0), batch(2, diverged=True)],
        stop_at_first=False,
        findings=[finding("aaaaaaaaaaaa", "new", 3, 2, 20.0), finding("cccccccccccc", "known", 4, 0, 1.0)],
    )
    two = shard(
        2,
        2,
        [batch(1, diverged=True), batch(3)],
        stop_at_first=False,
        findings=[finding("aaaaaaaaaaaa", "new", 2, 1, 10.0), finding("cccccccccccc", "known", 1, 3, 30.0)],
    )
    merged = merge([(tmp_path / "a", one), (tmp_path / "b", two)], tmp_path / "out")  # fmt: skip
    assert [b["batch"] for b in merged["batches"]] == [0, 1, 2, 3] and merged["histories"] == 160
    by = {f["signature"]: f for f in merged["findings"]}
    assert by["aaaaaaaaaaaa"]["count"] == 5 and by["aaaaaaaaaaaa"]["first_batch"] == 1
    assert by["aaaaaaaaaaaa"]["link"] == "../b/failures/batch-1" and by["aaaaaaaaaaaa"]["also"] == [
        str(tmp_path / "a" / "failures" / "batch-2")
    ]
    assert by["cccccccccccc"]["count"] == 5 and by["cccccccccccc"]["last_at"] == 35.0
    assert [d["signature"] for d in merged["divergences"]] == ["aaaaaaaaaaaa"] and merged["verdict"] == "divergence"
    # and with only known findings met, the merged verdict is known (exit 6), never agree
    known = [finding("cccccccccccc", "known", 1, 0, 1.0)]
    quiet = [(tmp_path / "a", shard(1, 2, [batch(0), batch(2)], stop_at_first=False, findings=known)),
             (tmp_path / "b", shard(2, 2, [batch(1), batch(3)], stop_at_first=False, findings=[]))]  # fmt: skip
    assert merge(quiet, tmp_path / "out2")["verdict"] == "known"


def test_a_merge_writes_only_keys_the_summary_type_names(tmp_path: Path) -> None:
    # the typed summary (difftest/report/document.py) is the whole shape: a key a merge writes that it
    # does not name would be written untyped; each finding and divergence likewise
    from difftest.findings.entries import Divergence, Finding
    from difftest.report.document import BatchEntry, Summary

    one = shard(1, 2, [batch(0), batch(2, diverged=True)], stop_at_first=False,
                findings=[finding("aaaaaaaaaaaa", "new", 3, 2, 20.0)])  # fmt: skip
    two = shard(2, 2, [batch(1), batch(3)], stop_at_first=False, findings=[finding("cccccccccccc", "known", 1, 3, 3.0)])
    merged = merge([(tmp_path / "a", one), (tmp_path / "b", two)], tmp_path / "out")
    assert set(merged) <= set(Summary.__annotations__), set(merged) - set(Summary.__annotations__)
    assert Summary.__required_keys__ <= set(merged)
    assert all(set(f) <= set(Finding.__annotations__) for f in merged["findings"])
    assert all(set(d) <= set(Divergence.__annotations__) for d in merged["divergences"])
    assert all(set(b) <= set(BatchEntry.__annotations__) for b in merged["batches"])
    # the keys in the order merges have always written them: the file reads as before
    assert list(merged)[:6] == ["verdict", "seed", "budget", "shard", "shards", "restarts"]
    assert list(merged)[-3:] == ["host", "progress", "batches"]


def test_a_summary_older_than_findings_and_stop_at_first_still_merges(tmp_path: Path) -> None:
    # older summaries lack keys the type names as optional (findings, stop_at_first, sizes, ...): read as before
    one = shard(1, 2, [batch(0), batch(2)])
    two = shard(2, 2, [batch(1), batch(3)])
    for document in (one, two):
        assert "findings" not in document and "stop_at_first" not in document and "sizes" not in document
    merged = merge([(tmp_path / "a", one), (tmp_path / "b", two)], tmp_path / "out")
    assert merged["verdict"] == "agree" and merged["findings"] == [] and merged["sizes"] is None


def test_shards_that_agree_merge_into_every_batch(tmp_path: Path) -> None:
    parts = [(tmp_path / "b", shard(2, 2, [batch(1), batch(3)])), (tmp_path / "a", shard(1, 2, [batch(0), batch(2)]))]
    merged = merge(parts, tmp_path / "out")
    assert merged["verdict"] == "agree" and merged["divergences"] == []
    assert merged["histories"] == 160 and [b["batch"] for b in merged["batches"]] == [0, 1, 2, 3]
    assert merged["shards"] == [str(tmp_path / "a"), str(tmp_path / "b")]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (shard(2, 2, [batch(1), batch(3)], seed=6), "seed 5.* seed 6"),
        (shard(2, 2, [batch(1), batch(3)], budget={"examples": 200, "seconds": None}), "budget"),
        (shard(1, 2, [batch(0), batch(2)]), "overlap.*both shard 1/2"),
        (shard(2, 3, [batch(1)]), "split the campaign into 2 and 3 shards"),
        (shard(2, 2, [batch(1)]), r"batch\(es\) 3 never finished \(shard 2/2"),
        (shard(2, 2, [batch(1), batch(2)]), "batch 2, which is not shard 2/2's"),
    ],
)
def test_shards_that_do_not_fit_are_refused(tmp_path: Path, second: dict[str, Any], message: str) -> None:
    first = shard(1, 2, [batch(0), batch(2)])
    with pytest.raises(ShardMismatch, match=message):
        merge([(tmp_path / "a", first), (tmp_path / "b", second)], tmp_path / "out")


def test_a_missing_shard_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ShardMismatch, match="shard 2/2 missing"):
        merge([(tmp_path / "a", shard(1, 2, [batch(0), batch(2)]))], tmp_path / "out")


def write_summary(directory: Path, document: dict[str, Any]) -> Path:
    directory.mkdir(parents=True)
    (directory / "summary.json").write_text(json.dumps(document))
    return directory


def test_merge_refuses_with_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_summary(tmp_path / "a", shard(1, 2, [batch(0), batch(2)]))
    b = write_summary(tmp_path / "b", shard(2, 2, [batch(1), batch(3)], seed=9))
    assert main(["merge", str(tmp_path / "out"), str(a), str(b)]) == EXIT_SETUP
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "do not fit together" in err[0] and "seed" in err[0]
    assert not (tmp_path / "out").exists()
    # and a directory without a summary, and an output that already holds a report
    assert main(["merge", str(tmp_path / "out"), str(a), str(tmp_path)]) == EXIT_SETUP
    assert "no summary.json" in capsys.readouterr().err
    assert main(["merge", str(tmp_path), str(a)]) == EXIT_SETUP
    assert "not empty" in capsys.readouterr().err
    assert main(["run", "--shard", "3/2", "--examples", "1"]) == EXIT_SETUP
    assert capsys.readouterr().err.count("\n") == 1


def test_merge_writes_the_four_reports_and_exits_on_the_verdict(tmp_path: Path) -> None:
    a = write_summary(tmp_path / "a", shard(1, 2, [batch(0), batch(2, diverged=True)]))
    b = write_summary(tmp_path / "b", shard(2, 2, [batch(1)]))
    assert main(["merge", str(tmp_path / "out"), str(a), str(b)]) == EXIT_DIVERGENCE
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "coverage.txt", "junit.xml", "report.html", "summary.json"]  # fmt: skip
    page = (tmp_path / "out" / "report.html").read_text()
    assert 'href="../a/failures/batch-2/report.txt"' in page and "planted in 2" in page
    # the failing step's replies and keys, as the shard recorded them
    assert '<td class="keys">emq:{q}:done</td><td class="keys">planted</td>' in page and "they differ" in page


# ---- on real servers --------------------------------------------------------------------------------------


def run_dir(reports: Path) -> Path:
    (directory,) = reports.iterdir()  # each run gets a fresh directory under its own reports root
    return directory


@pytest.fixture
def campaign(tmp_path: Path) -> Callable[..., Path]:
    def run(name: str, *extra: str) -> Path:
        argv = ["run", "--seed", "20261203", "--examples", "160", "--workers", "1", "--no-database",
                "--no-production-size", "--reports", str(tmp_path / name), *extra]  # fmt: skip
        assert main(argv) == EXIT_OK
        return run_dir(tmp_path / name)

    return run


def comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """What a merge must reproduce of the unsharded run: verdicts, counts, coverage, per batch too."""
    keys = ("verdict", "seed", "budget", "histories", "steps", "divergences", "coverage", "coverage_missing",
            "also_reached")  # fmt: skip
    found = {key: summary[key] for key in keys}
    found["batches"] = [{k: v for k, v in b.items() if k not in ("worker", "finished_s")} for b in summary["batches"]]
    return found


def test_two_shards_merged_equal_the_unsharded_run(campaign: Callable[..., Path], tmp_path: Path) -> None:
    whole = campaign("whole")
    first = campaign("first", "--shard", "1/2")
    second = campaign("second", "--shard", "2/2")
    load = lambda directory: json.loads((directory / "summary.json").read_text())  # noqa: E731
    assert [b["batch"] for b in load(first)["batches"]] == [0, 2]
    assert [b["batch"] for b in load(second)["batches"]] == [1, 3]
    assert main(["merge", str(tmp_path / "merged"), str(second), str(first)]) == EXIT_OK
    merged = load(tmp_path / "merged")
    assert comparable(merged) == comparable(load(whole))
    assert merged["histories"] == 160 and merged["coverage"]["contract:N1"] > 0
    # a shard merged with the unsharded run overlaps it: refused
    assert main(["merge", str(tmp_path / "again"), str(whole), str(first)]) == EXIT_SETUP


def test_each_merge_adds_its_night_to_the_findings_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def night(name: str, count: int) -> Path:
        known = [finding("cccccccccccc", "known", count, 0, 1.0)]
        a = write_summary(tmp_path / name / "a", shard(1, 2, [batch(0), batch(2)], stop_at_first=False, findings=known))
        b = write_summary(tmp_path / name / "b", shard(2, 2, [batch(1), batch(3)], stop_at_first=False, findings=[]))
        assert main(["merge", str(tmp_path / "reports" / name), str(a), str(b)]) == EXIT_KNOWN
        return tmp_path / "reports" / name

    night("monday", 2)
    out = night("tuesday", 3)
    history = tmp_path / "reports" / "findings-history.jsonl"  # beside OUT: the nightly carries it
    lines = [json.loads(line) for line in history.read_text().splitlines()]
    assert [line["findings"] for line in lines] == [[{"signature": "cccccccccccc", "status": "known", "count": c}]
                                                    for c in (2, 3)]  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["findings_history"]["cccccccccccc"]["nights"] == 2
    assert "met on 2 night(s) since" in (out / "report.html").read_text()
    # a line that is not a night is one line and exit 2, and the file is kept as it was
    history.write_text(history.read_text() + "not json\n")
    before = history.read_text()
    capsys.readouterr()
    a, b = tmp_path / "monday" / "a", tmp_path / "monday" / "b"
    assert main(["merge", str(tmp_path / "reports" / "wednesday"), str(a), str(b)]) == EXIT_SETUP
    assert "findings-history.jsonl:3: not a night" in capsys.readouterr().err and history.read_text() == before
