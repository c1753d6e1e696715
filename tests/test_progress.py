"""Campaign progress: the hook's running totals on real servers, and how stderr shows them (bar or plain lines)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from difftest.campaign.driver import CampaignConfig, Progress, run_campaign
from difftest.campaign.progress import CampaignProgress
from difftest.cli.main import EXIT_OK, main
from executors.native.adapter import DEFAULT_MODULE


def config(tmp_path: Path, name: str, workers: int) -> CampaignConfig:
    return CampaignConfig(seed=11, module=DEFAULT_MODULE, reports=tmp_path / name, examples=80, workers=workers,
                          pin=False, sizes=False)  # fmt: skip


@pytest.mark.servers
@pytest.mark.parametrize("workers", [1, 2])
def test_the_hook_sees_running_totals_and_changes_no_result(tmp_path: Path, workers: int) -> None:
    seen: list[Progress] = []
    watched = run_campaign(config(tmp_path, "watched", workers), on_progress=seen.append)
    assert seen, "the hook was never called"
    histories = [p.histories for p in seen]
    assert histories == sorted(histories) and [p.steps for p in seen] == sorted(p.steps for p in seen)
    assert (seen[-1].histories, seen[-1].steps, seen[-1].failures) == (watched.histories, watched.steps, 0)
    assert watched.histories == 80
    # a seeded run is the same run with or without someone watching it
    plain = run_campaign(config(tmp_path, "plain", workers))
    assert (plain.histories, plain.steps, plain.labels) == (watched.histories, watched.steps, watched.labels)


def test_plain_lines_come_periodically_on_news_and_at_the_end() -> None:
    out = io.StringIO()
    with CampaignProgress(out, examples=100, seconds=None, live=False, interval_s=10) as show:
        show(Progress(10, 100, 0, 1.0))  # the first report: a line
        show(Progress(20, 200, 0, 5.0))  # 4 s later: not yet
        show(Progress(30, 300, 1, 6.0))  # a divergence: at once
        show(Progress(40, 400, 1, 16.5))  # 10.5 s after the last line
        show(Progress(50, 500, 1, 17.0))  # not yet, but the end prints it
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "progress: 10/100 histories", "progress: 30/100 histories",
        "progress: 40/100 histories", "progress: 50/100 histories",
    ]  # fmt: skip
    assert "\x1b[" not in out.getvalue()  # no terminal codes in a log
    assert lines[1] == "progress: 30/100 histories, 300 steps, 50 steps/s, 1 divergence(s), 6 s"


def test_a_time_budget_counts_seconds() -> None:
    out = io.StringIO()
    with CampaignProgress(out, examples=None, seconds=60, live=False) as show:
        show(Progress(7, 70, 0, 12.0))
    assert out.getvalue().startswith("progress: 12/60 s, 7 histories, 70 steps")


def test_on_a_terminal_a_bar_is_drawn() -> None:
    out = io.StringIO()
    with CampaignProgress(out, examples=40, seconds=None, live=True) as show:
        show(Progress(40, 900, 0, 2.0))
    text = out.getvalue()
    assert "\x1b[" in text and "40/40 histories" in text and "450 steps/s" in text and "0 divergence(s)" in text


@pytest.mark.servers
def test_difftest_run_reports_progress_on_stderr_and_ends_with_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--examples", "40", "--seed", "3", "--workers", "1", "--no-database",
                 "--reports", str(tmp_path)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == EXIT_OK
    assert "progress: 40/40 histories" in captured.err  # stderr is not a terminal here: plain lines
    assert "campaign summary" in captured.out and "steps/s" in captured.out
    summary = [line for line in captured.out.splitlines() if "histories" in line and "│" in line]
    assert summary and "40" in summary[0]
