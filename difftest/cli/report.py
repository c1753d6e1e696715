"""`difftest report DIR`: report.html rendered again from a run's summary.json (or a mutation run's outcomes.json)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from difftest.base.exits import EXIT_INTERNAL, EXIT_IOERR, EXIT_MEANINGS, EXIT_OK, EXIT_SETUP, OneLineParser
from difftest.base.problems import SetupProblem
from difftest.cli.arguments import subcommand
from difftest.cli.rundirs import MALFORMED, malformed, summary_of


def command_report(args: argparse.Namespace) -> int:
    """`difftest report DIR`: report.html again from a run's summary.json (or a mutation run's
    outcomes.json, whose page mutants/report.py renders)."""
    from difftest.report import reports

    directory: Path = args.dir
    if (directory / "outcomes.json").is_file():
        import importlib

        try:
            # mutants/ renders its own page; looked up by name, as that package is owned apart
            mutation_report = importlib.import_module("mutants.report")
        except ImportError as missing:
            raise SetupProblem(f"{directory} is a mutation run, but mutants/report.py cannot load: {missing}") from None
        outcomes = directory / mutation_report.OUTCOMES
        try:
            document = json.loads(outcomes.read_text())
        except (OSError, ValueError) as problem:
            raise SetupProblem(f"{outcomes} cannot be read: {problem}") from None
        try:
            text = mutation_report.html_page(document)
        except MALFORMED as problem:
            raise malformed(outcomes, problem) from None
        page = directory / mutation_report.HTML
        _write_page(page, text)
    else:
        from difftest.report import html as html_report

        summary = summary_of(directory)  # one clear line if it is missing or broken
        try:
            text = html_report.render(summary)
        except MALFORMED as problem:
            raise malformed(directory / reports.SUMMARY, problem) from None
        page = directory / reports.HTML
        _write_page(page, text)
    print(f"report: {page}")
    return EXIT_OK


def _write_page(page: Path, text: str) -> None:
    from difftest.base.files import SURELY_ENVIRONMENTAL, environment_failure, write_atomically

    try:
        write_atomically(page, text)
    except OSError as problem:
        if problem.errno in SURELY_ENVIRONMENTAL:  # a full disk (74), not a directory given wrong (2)
            raise environment_failure(problem, page.name, page.parent) from None
        raise SetupProblem(
            f"cannot write {page} ({problem.strerror}): render it in a directory you can write"
        ) from None


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    """`report`'s page: the run directory."""
    report = subcommand(
        commands, "report", "render report.html again from a run directory",
        """Render DIR/report.html again from DIR/summary.json: for a run, a merge of shards, or a run
        from before report.html existed. For a mutation run's directory (it holds outcomes.json), the
        mutation report's page is rendered instead. Nothing else in DIR changes.""",
        ["difftest report reports/<run>", "difftest report reports/mutants-<time>"],
        {EXIT_OK: "report.html written", EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP],
         EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL], EXIT_IOERR: "the machine refused the write: one line"},
    )  # fmt: skip
    report.add_argument("dir", type=Path, help="a run directory (summary.json) or a mutation run's (outcomes.json)")
