"""Run directories: checked before a server starts, made fresh for each run, their report files written
whole (a full disk is one line), and a run's summary.json read back (merge, report)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.base.files import environment_failure, is_environmental
from difftest.base.problems import EnvironmentFailure, SetupProblem

if TYPE_CHECKING:
    from difftest.report.document import Summary


def _writable_parent(path: Path) -> Path | None:
    """The nearest existing ancestor of `path` (itself included) when it is a writable directory."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            ok = candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
            return candidate if ok else None
    return None


def check_reports(reports: Path) -> None:
    """One line now for a --reports that cannot hold a run directory, before any server starts."""
    if _writable_parent(reports.absolute()) is None:
        raise SetupProblem(f"--reports {reports}: cannot create directories there (not a writable directory); "
                           "pass a directory you can write, e.g. --reports reports")  # fmt: skip


def make_run_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True)
    except OSError as problem:
        raise SetupProblem(f"cannot create the run directory {directory} ({problem.strerror}): "
                           "pass a --reports directory you can write") from None  # fmt: skip


def remove_if_empty(directory: Path) -> None:
    """A run that wrote nothing leaves no directory behind (a non-empty one is never touched)."""
    with contextlib.suppress(OSError):
        directory.rmdir()  # only succeeds on an empty directory


def new_run_dir(reports: Path, label: str) -> Path:
    """reports/<UTC time>-<label>-<pid>: a fresh directory, so no run overwrites another."""
    stamp = dt.datetime.now(tz=dt.UTC).strftime("%Y%m%dT%H%M%S")
    directory = reports / f"{stamp}-{label}-{os.getpid()}"
    suffix = 0
    while directory.exists():
        suffix += 1
        directory = reports / f"{stamp}-{label}-{os.getpid()}-{suffix}"
    return directory


def write_reports(document: Summary, directory: Path) -> EnvironmentFailure | None:
    """The run's report files, each whole or not at all; what the machine refused, if it did."""
    from difftest.report import reports

    try:
        reports.write_document(document, directory)
    except OSError as problem:
        if not is_environmental(problem):
            raise
        return environment_failure(problem, "the reports (summary.json, coverage.txt, junit.xml, report.html)",
                                   directory)  # fmt: skip
    return None


def summary_of(directory: Path) -> Summary:
    """The run directory's summary.json, parsed once here (one line, exit 2, if it is not a run's summary)."""
    from difftest.report.document import parsed
    from difftest.report.reports import SUMMARY, VERDICTS

    path = directory / SUMMARY
    if not path.is_file():
        raise SetupProblem(f"{directory} has no {SUMMARY}: pass run directories that difftest run wrote")
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as problem:
        raise SetupProblem(f"{path} cannot be read: {problem}") from None
    if not isinstance(document, dict):
        raise SetupProblem(f"{path} holds a JSON {type(document).__name__}, not the object difftest run writes: "
                           "pass a run directory, or run the campaign again")  # fmt: skip
    verdict = document.get("verdict")
    if verdict not in VERDICTS:  # a page must never draw a verdict the run did not reach
        said = "has no verdict" if verdict is None else f"has the verdict {json.dumps(verdict)[:40]}"
        raise SetupProblem(f"{path} {said}, not one difftest writes ({', '.join(VERDICTS)}): "
                           "restore the file from its run, or run the campaign again")  # fmt: skip
    return parsed(document)


# what a hand-edited or foreign summary raises where a field has the wrong shape
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def malformed(path: Path, problem: Exception) -> SetupProblem:
    what = f"{type(problem).__name__}: {problem}" if str(problem) else type(problem).__name__
    return SetupProblem(f"{path} is not in the shape difftest writes ({what}): "
                        "run the campaign again, or restore the file from its run")  # fmt: skip
