"""`difftest merge OUT DIR...`: one report, and one verdict, from the run directories of a campaign's shards."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.base.exits import (
    EXIT_COVERAGE,
    EXIT_DIVERGENCE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_IOERR,
    EXIT_KNOWN,
    EXIT_MEANINGS,
    EXIT_OK,
    EXIT_SETUP,
    EXIT_TERMINATED,
    EXIT_VOID,
    OneLineParser,
)
from difftest.base.problems import EnvironmentFailure, SetupProblem
from difftest.cli.arguments import subcommand
from difftest.cli.rundirs import MALFORMED, malformed, summary_of, write_reports

if TYPE_CHECKING:
    from difftest.findings.entries import Night
    from difftest.report.document import Summary


def command_merge(args: argparse.Namespace) -> int:
    """`difftest merge OUT DIR...`: one report from the run directories of a campaign's shards."""
    import time

    from difftest.findings.tally import across_nights, history_line
    from difftest.report import findings_history

    history = _history_file(args)
    nights = findings_history.read(history) if history is not None else []  # a bad line: one line now
    document = _merged(args.dirs, args.out)
    _add_coverage(document, args.dirs, args.out)
    now = time.time()
    if history is not None:  # each finding: on how many nights it was met, since when
        document["findings_history"] = across_nights(nights, document.get("findings", []), now)
    from difftest.replay.build import program, replay_command
    from difftest.report import html as html_report
    from difftest.report.document import build_fields

    document["program"] = program()  # the commands below and in report.html, as they run from here
    build, replicas = build_fields(document), bool(document.get("replicas"))
    for failure in document["divergences"]:
        failure["reproduce"] = replay_command(failure["artifact"], build, replicas)
    document["reproduce"] = html_report.reproduce_command(document)
    lost = write_reports(document, args.out)  # a full disk loses the files, never the verdict below
    if history is not None and lost is None:
        lost = _append_night(history, history_line(document.get("findings", []), now, document.get("seed")))
    print(f"merged {len(args.dirs)} shard(s): seed {document['seed']}, {document['histories']} histories, "
          f"{document['steps']} steps; verdict: {document['verdict']}")  # fmt: skip
    for failure in document["divergences"]:
        named = f" divergence:{failure['signature']}" if failure.get("signature") else ""
        print(f"DIVERGENCE{named} (batch {failure['batch']}, {failure['steps']} steps): {failure['reason']}")
        print(f"artifact: {failure['artifact']} (reproduce: {failure['reproduce']})")
    written = f"{args.out} (report.html, summary.json, coverage.txt, junit.xml)" if lost is None else "NOT written"
    print(f"reports: {written}", flush=True)
    return _verdict(document, lost, args.require_coverage)


def _history_file(args: argparse.Namespace) -> Path | None:
    """--findings-history FILE, `none`, or (default) findings-history.jsonl beside OUT."""
    from difftest.report import findings_history

    if args.findings_history is None:
        return findings_history.default_file(args.out)
    return None if args.findings_history.strip().lower() == "none" else Path(args.findings_history)


def _append_night(path: Path, night: Night) -> EnvironmentFailure | None:
    from difftest.base.files import environment_failure, is_environmental
    from difftest.report import findings_history

    try:
        findings_history.append(path, night)
    except OSError as problem:
        if not is_environmental(problem):
            raise
        return environment_failure(problem, "the findings history", path.parent)
    return None


def _merged(dirs: list[Path], out: Path) -> Summary:
    """The shards' summaries merged into one, and OUT made (a new or empty directory); else one line."""
    from difftest.report.shards import ShardMismatch, merge

    if out.exists() and not out.is_dir():
        raise SetupProblem(f"{out} is a file: merge into a new directory")
    if out.exists() and any(out.iterdir()):
        raise SetupProblem(f"{out} is not empty: merge into a new directory (no report is overwritten)")
    parts = [(directory, summary_of(directory)) for directory in dirs]
    try:
        document = merge(parts, out)
    except ShardMismatch as problem:
        raise SetupProblem(str(problem)) from None
    except MALFORMED as problem:
        raise malformed(Path("a shard's summary.json"), problem) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as problem:
        raise SetupProblem(f"cannot create {out} ({problem.strerror}): merge into a directory you can write") from None
    return document


def _add_coverage(document: Summary, dirs: list[Path], out: Path) -> None:
    """The shards' code coverage, if they measured it: native profiles summed, Lua line counts added."""
    from difftest.coverage import lua as lua_coverage
    from difftest.coverage.native import merge_runs

    native = merge_runs(dirs, out)  # the shards' native coverage profiles summed, if any
    if native is not None:
        document["native_coverage"] = native
    lua = lua_coverage.merge_runs(dirs, out)  # and their Lua script line counts
    if lua is not None:
        document["lua_coverage"] = lua


def _verdict(document: Summary, lost: EnvironmentFailure | None, require_coverage: bool) -> int:
    """What went wrong on stderr, the merged run's verdict line, and its exit code."""
    from difftest.campaign.progress import verdict_line
    from difftest.findings.tally import verdict_words

    if lost is not None:
        print(f"difftest: {lost}", file=sys.stderr)
    verdict, missing = document["verdict"], document["coverage_missing"]
    if verdict == "void":
        print("difftest: void: the shards compared no history; run them with a larger budget", file=sys.stderr)
    elif require_coverage and missing and verdict == "agree":
        print(f"coverage incomplete: {', '.join(missing)}", file=sys.stderr)
    sys.stderr.flush()
    print(verdict_line(verdict, document["histories"], document["steps"], len(document["divergences"]), len(missing),
                       require_coverage=require_coverage, reports_lost=lost is not None,
                       findings=verdict_words(document.get("findings", []))), flush=True)  # fmt: skip
    if verdict == "divergence":
        return EXIT_DIVERGENCE
    if verdict == "interrupted":
        return EXIT_INTERRUPTED
    if lost is not None:
        return EXIT_IOERR
    if verdict == "void":
        return EXIT_VOID
    if verdict == "known":
        return EXIT_KNOWN
    if require_coverage and missing:
        return EXIT_COVERAGE
    return EXIT_OK


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    """`merge`'s page: the new directory, the shards' directories, --require-coverage."""
    merge = subcommand(
        commands, "merge", "join the run directories of a campaign's shards into one report",
        """Join the run directories that `difftest run --shard K/N` wrote (on one machine or many) into
        one report in OUT: summary.json, coverage.txt, junit.xml and report.html. The merged verdict,
        first divergent batch (--stop-at-first) or distinct findings, histories, steps and coverage
        counts equal those of the unsharded run with the same seed and budget (one worker, no stored
        failures in the example database).
        Shards that do not fit together (another seed or budget, a shard twice or missing, a batch
        never finished) are refused with one line and exit code 2.""",
        [
            "difftest run --seed 7 --examples 4000 --shard 1/2   # on machine A",
            "difftest run --seed 7 --examples 4000 --shard 2/2   # on machine B",
            "difftest merge reports/merged-7 reports/<run-on-A> reports/<run-on-B>",
        ],
        {EXIT_OK: EXIT_MEANINGS[EXIT_OK], EXIT_DIVERGENCE: "a divergence: the first divergent batch's artifact, "
         "in its shard's directory", EXIT_SETUP: "shards that do not fit together, or bad input: one line on stderr",
         EXIT_COVERAGE: EXIT_MEANINGS[EXIT_COVERAGE], EXIT_KNOWN: EXIT_MEANINGS[EXIT_KNOWN],
         EXIT_VOID: "void: the shards compared no history",
         EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL], EXIT_IOERR: "the machine refused a write: the merged report "
         "is not complete (one line)", EXIT_INTERRUPTED: "a shard of a time budget was interrupted",
         EXIT_TERMINATED: "terminated (SIGTERM): the merge stopped"},
    )  # fmt: skip
    merge.add_argument("out", type=Path, help="a new directory for the merged report")
    merge.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="the shards' run directories")
    merge.add_argument("--findings-history", metavar="FILE", default=None,
                       help="the JSON-lines file each merge appends its findings to (one line a night), from which "
                       "the report says on how many nights each finding was met; none: not recorded (default: "
                       "findings-history.jsonl beside OUT)")  # fmt: skip
    merge.add_argument("--require-coverage", action="store_true",
                       help=f"exit {EXIT_COVERAGE} unless every behaviour label was reached")  # fmt: skip
