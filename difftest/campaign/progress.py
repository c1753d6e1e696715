"""A campaign's progress on stderr (a live bar on a terminal, plain periodic lines in logs) and its summary table."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.progress import BarColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar
from rich.table import Table

from difftest.base.problems import SetupProblem
from difftest.campaign.driver import Progress
from difftest.coverage import labels as coverage

if TYPE_CHECKING:
    from difftest.campaign.driver import CampaignResult

PLAIN_INTERVAL_S = 30.0  # a CI log gets a line this often (by the campaign's clock), not a redraw each batch
INTERVAL_VARIABLE = "DIFFTEST_PROGRESS_SECONDS"  # another interval for the plain lines (0: every batch)


def plain_interval(environ: Mapping[str, str]) -> float:
    """The plain lines' interval: DIFFTEST_PROGRESS_SECONDS if set (a number >= 0), else 30 s."""
    text = environ.get(INTERVAL_VARIABLE)
    if text is None:
        return PLAIN_INTERVAL_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        raise SetupProblem(f"{INTERVAL_VARIABLE}={text!r} is not a number of seconds >= 0: give one (0 prints a "
                           "line after every batch) or unset it")  # fmt: skip
    return seconds


def rate(steps: int, elapsed_s: float) -> float:
    return steps / elapsed_s if elapsed_s > 0 else 0.0


class CampaignProgress:
    """The hook `run_campaign(on_progress=...)` calls, shown one of two ways.

    On a terminal, a bar of histories done / budget (or seconds elapsed / budget) with steps/s and
    divergences found, redrawn in place. Elsewhere (a pipe, a CI log) a plain line every
    `interval_s` seconds of the campaign, at once when a divergence is found, and at the end.
    """

    def __init__(
        self,
        stream: TextIO,
        examples: int | None,
        seconds: float | None,
        *,
        live: bool | None = None,
        interval_s: float = PLAIN_INTERVAL_S,
    ) -> None:
        self.stream = stream
        self.examples = examples
        self.seconds = seconds
        self.live = stream.isatty() if live is None else live
        self.interval_s = interval_s
        self.last: Progress | None = None
        self._printed_at: float | None = None  # campaign seconds at the last plain line
        self._printed_failures = 0
        self._bar: Bar | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> CampaignProgress:
        if self.live:
            console = Console(file=self.stream, force_terminal=True)
            self._bar = Bar(
                TextColumn("[bold]campaign"),
                BarColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                console=console,
            )
            total = float(self.examples) if self.examples is not None else self.seconds
            self._task = self._bar.add_task("campaign", total=total, status=self._status(Progress(0, 0, 0, 0.0)))
            self._bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.last is not None and self._printed_at != self.last.elapsed_s:
            self._line(self.last)  # the final state, unless that line is already out

    def __call__(self, progress: Progress) -> None:
        self.last = progress
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self._completed(progress), status=self._status(progress))
            return
        due = self._printed_at is None or progress.elapsed_s - self._printed_at >= self.interval_s
        if due or progress.failures > self._printed_failures:
            self._line(progress)

    def _completed(self, progress: Progress) -> float:
        if self.examples is not None:
            return float(progress.histories)
        return min(progress.elapsed_s, self.seconds or 0.0)

    def _done(self, progress: Progress) -> str:
        if self.examples is not None:
            return f"{progress.histories:,}/{self.examples:,} histories"
        return f"{progress.elapsed_s:,.0f}/{self.seconds or 0:,.0f} s, {progress.histories:,} histories"

    def _status(self, progress: Progress) -> str:
        found = f"{progress.failures} divergence(s)"
        return (f"{self._done(progress)}  {rate(progress.steps, progress.elapsed_s):,.0f} steps/s  "
                + (f"[bold red]{found}[/]" if progress.failures else found))  # fmt: skip

    def _line(self, progress: Progress) -> None:
        steps_s = rate(progress.steps, progress.elapsed_s)
        line = (f"progress: {self._done(progress)}, {progress.steps:,} steps, {steps_s:,.0f} steps/s, "
                f"{progress.failures} divergence(s), {progress.elapsed_s:.0f} s")  # fmt: skip
        print(line, file=self.stream, flush=True)
        self._printed_at = progress.elapsed_s
        self._printed_failures = progress.failures


def summary_table(result: CampaignResult, seed: int, database: str) -> Table:
    """The end of a run at a glance: what was compared, how fast, and what was found."""
    table = Table(title="campaign summary", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    failures = len({failure.signature or failure.artifact for failure in result.failures})  # distinct
    rows = [
        ("seed", str(seed)),
        ("workers", str(result.config.workers)),
        ("histories", f"{result.histories:,}"),
        ("steps compared", f"{result.steps:,}"),
        ("time", f"{result.elapsed_s:.1f} s"),
        ("steps/s", f"{rate(result.steps, result.elapsed_s):,.0f}"),
        ("divergences", f"[bold red]{failures}[/]" if failures else "0"),
        ("judged by the spec's model", coverage.model_line(result.labels)),
        ("example database", database),
    ]
    if result.meetings:  # every finding met, new or known, with how often
        met = sum(int(meeting["count"]) for meeting in result.meetings.values())
        rows.insert(7, ("findings met", f"{len(result.meetings)} distinct, {met:,} meeting(s)"))
    if result.interrupted:
        rows.append(("interrupted", "yes"))
    for what, value in rows:
        table.add_row(what, value)
    return table


def print_table(table: Table, stream: TextIO) -> None:
    # no colour codes when the stream is a file or a pipe: logs and tests read plain text
    Console(file=stream, width=100).print(table)


def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def verdict_line(verdict: str, histories: int, steps: int, divergences: int, missing: int, *,
                 require_coverage: bool = False, stopped_by: str = "", reports_lost: bool = False,
                 findings: str = "") -> str:  # fmt: skip
    """A run's last line on the terminal: its verdict first, then what was compared and reached (pure).
    `missing`: required labels not reached; `stopped_by`: the signal that interrupted it; `findings`:
    how many distinct findings, how many known (difftest/findings/tally.py)."""
    coverage = "coverage complete" if not missing else f"coverage incomplete ({_counted(missing, 'label')} missing)"
    word = "coverage incomplete" if verdict == "agree" and missing and require_coverage else verdict
    if verdict == "void":
        line = "void: 0 histories compared, nothing was tested"
    else:
        line = (f"{word}: {_counted(histories, 'history').replace('historys', 'histories')}, "
                f"{_counted(steps, 'step')}, {_counted(divergences, 'divergence')}, {coverage}")  # fmt: skip
    if findings:
        line += f" ({findings})"
    if stopped_by:
        line += f"; stopped by {stopped_by}"
    if reports_lost:
        line += "; reports NOT all written (see above)"
    return line
