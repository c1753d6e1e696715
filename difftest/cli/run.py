"""`difftest run`: a campaign of generated histories on server pairs, its reports and its verdict."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.base.exits import (
    EXIT_COVERAGE,
    EXIT_DIVERGENCE,
    EXIT_INTERRUPTED,
    EXIT_IOERR,
    EXIT_KNOWN,
    EXIT_MEANINGS,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_VOID,
    OneLineParser,
)
from difftest.base.problems import EnvironmentFailure, SetupProblem
from difftest.campaign.driver import BATCH, CampaignConfig, CampaignResult, Failure, run_campaign
from difftest.cli.arguments import (
    DEFAULT_EXAMPLES,
    MAX_EXAMPLES,
    MAX_WORKERS,
    backend_of,
    build_of,
    check_module,
    common_options,
    histories_count,
    module_of,
    replicas_of,
    seconds_budget,
    shard_of,
    shard_spec,
    subcommand,
    workers_count,
)
from difftest.cli.known import print_findings, stale_entries
from difftest.cli.rundirs import check_reports, make_run_dir, new_run_dir, remove_if_empty, write_reports
from difftest.findings.known import add_known_findings_options, known_findings_of

if TYPE_CHECKING:
    from difftest.report.document import Summary


def _database_of(args: argparse.Namespace) -> str | None:
    """--database, else $DIFFTEST_DATABASE, else the local directory; --no-database: none at all.
    Checked here, naming where the spec came from, so a typo is one line and not a silent default."""
    from difftest.campaign.exampledb import DEFAULT_DIRECTORY, ENVIRONMENT, check_spec

    if args.no_database:
        return None
    if args.database:
        return check_spec(args.database, "--database")
    if os.environ.get(ENVIRONMENT):
        return check_spec(os.environ[ENVIRONMENT], ENVIRONMENT)
    return check_spec(str(DEFAULT_DIRECTORY), "the default example database")


def _check_budget(examples: int | None, shard: tuple[int, int]) -> None:
    """A shard that owns no batch of an example budget would compare nothing: refused up front."""
    if examples is None:
        return
    batches = -(-examples // BATCH)
    index, count = shard
    if index > batches:
        raise SetupProblem(f"--shard {index}/{count} gets no batch of --examples {examples} ({batches} batch(es) of "
                           f"up to {BATCH}): use at most {batches} shard(s), or a larger --examples")  # fmt: skip


def command_run(args: argparse.Namespace) -> int:
    import random

    if args.lua_coverage and (args.attach is not None or args.backend != "local"):
        raise SetupProblem("--lua-coverage reads the Lua servers' logs: embedded servers only, drop --attach "
                           "and --backend docker")  # fmt: skip
    module_of(args)
    if args.native_coverage:
        from difftest.coverage.native import prepare

        args.module, args.coverage_tools = prepare(args)  # checks, then the instrumented build
    check_module(args.module)
    if args.attach is not None:
        args.workers = 1  # an attached pair is one pair: one worker replays on it
    if args.backend == "local" and args.attach is None:
        from difftest.servers.compiled import clock_library

        clock_library()  # built once here: no C compiler is one line now, not one per worker
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    shard = shard_of(args.shard)
    examples = None if args.seconds is not None and args.examples is None else (args.examples or DEFAULT_EXAMPLES)
    _check_budget(examples, shard)
    args.replicas = replicas_of(args)
    from difftest.campaign.progress import plain_interval

    args.progress_interval = plain_interval(os.environ)  # a bad DIFFTEST_PROGRESS_SECONDS: one line now
    database = _database_of(args)
    args.known = known_findings_of(args)  # a bad entry is one line now, before any server starts
    check_reports(args.reports)
    if args.lua_scripts is not None and args.backend == "local" and args.attach is None:
        from difftest.replay.replayer import check_scripts

        check_scripts(args.lua_scripts)  # a script that does not compile: one line now, not one per worker
    directory = new_run_dir(args.reports, "run")
    make_run_dir(directory)
    args.run_dir = directory  # where main() writes the traceback, should the tool itself fail
    try:
        return _campaign(args, seed, shard, examples, database, directory)
    finally:
        remove_if_empty(directory)  # a start that failed leaves no empty run directory


def _campaign(args: argparse.Namespace, seed: int, shard: tuple[int, int], examples: int | None,
              database: str | None, directory: Path) -> int:  # fmt: skip
    """The campaign in DIRECTORY: run, summed up in its report files, told on the terminal, its exit code."""
    import datetime

    from difftest.coverage import labels as coverage
    from difftest.findings.known import DIVERGENCE

    today = datetime.date.today()  # one day for the whole run: an entry expires between runs, never within one
    args.today = today
    config = CampaignConfig(
        seed=seed, module=args.module, reports=directory, examples=examples, seconds=args.seconds,
        workers=args.workers, lua_scripts=args.lua_scripts, restarts=not args.no_restarts,
        sizes=not args.no_production_size, database=database,
        backend=backend_of(args), shard=shard, replicas=args.replicas, build=build_of(args),
        stop_at_first=args.stop_at_first, accepted=args.known.accepted(DIVERGENCE, today),
    )  # fmt: skip
    budget = f"{examples} histories" if examples is not None else f"{args.seconds:g} s"
    part = f" (shard {args.shard}: batches {shard[0] - 1}, {shard[0] - 1 + shard[1]}, ...)" if args.shard else ""
    print(f"campaign: seed {seed}, {budget}{part}, {args.workers} worker(s); reports in {directory}", flush=True)
    result = _measured(args, config, examples)
    document, collected = _summary(args, result)
    # a full disk loses the files, never the verdict below
    unwritten = write_reports(document, directory)
    lost = unwritten or collected
    _print_outcome(args, result, document, database, unwritten)
    unsaved = [failure for failure in result.failures if failure.unsaved]
    missing = coverage.missing(result.labels)
    _print_problems(args, result, document, lost, unsaved, missing, examples)
    return _verdict(args, result, document, lost, unsaved, missing)


def _measured(args: argparse.Namespace, config: CampaignConfig, examples: int | None) -> CampaignResult:
    """The campaign run, its code coverage measured if asked; progress goes to stderr: a live bar on a
    terminal, a plain line now and then in a log."""
    from difftest.campaign.progress import CampaignProgress
    from difftest.coverage import native as native_coverage
    from executors.lua import instrument as lua_instrument

    directory = config.reports
    profiling = native_coverage.profiling(directory) if args.native_coverage else contextlib.nullcontext()
    measuring = lua_instrument.measuring(directory) if args.lua_coverage else contextlib.nullcontext()
    with profiling, measuring, CampaignProgress(sys.stderr, examples, args.seconds if examples is None else None,
                                     interval_s=args.progress_interval) as progress:  # fmt: skip
        return run_campaign(config, on_progress=progress)


def _summary(args: argparse.Namespace, result: CampaignResult) -> tuple[Summary, EnvironmentFailure | None]:
    """summary.json's document, with the commands that reproduce the run and each divergence, and the
    code coverage collected; what the machine refused while collecting it, if it did."""
    from difftest.base.files import environment_failure, is_environmental
    from difftest.coverage import lua as lua_coverage
    from difftest.coverage import native as native_coverage
    from difftest.replay.build import program, replay_command
    from difftest.report import html as html_report
    from difftest.report import reports
    from difftest.report.document import build_fields

    config = result.config
    directory = config.reports
    stale = stale_entries(args, args.known, result.meetings)
    document = reports.summary(result, args.known, args.today, stale)
    # read by default (./known-findings.toml, or none there): the reproduce line leaves it to the same default
    document["known_findings_default"] = args.known_findings is None and not args.no_known_findings
    document["program"] = program()  # how the printed commands start, as run from here
    for entry in document["divergences"]:  # as printed below, and as report.html shows them
        entry["reproduce"] = replay_command(entry["artifact"], build_fields(document), config.replicas)
    document["reproduce"] = html_report.reproduce_command(document)
    try:
        if args.native_coverage:  # native-coverage.json, and report.html's section from the summary
            document["native_coverage"] = native_coverage.collect(directory, config.module, args.coverage_tools)
        if args.lua_coverage:  # lua-coverage.json, and report.html's section from the summary
            document["lua_coverage"] = lua_coverage.collect(directory, config.lua_scripts)
    except OSError as problem:  # a full disk while collecting them: the verdict below still prints
        if not is_environmental(problem):
            raise
        return document, environment_failure(problem, "the code coverage files", directory)
    return document, None


def _print_outcome(args: argparse.Namespace, result: CampaignResult, document: Summary, database: str | None,
                   unwritten: EnvironmentFailure | None) -> None:  # fmt: skip
    """The terminal's account of the run: the summary table, the coverage, each divergence with its
    artifact (or, when the file is lost, its history), the code coverage, and where the reports are."""
    from difftest.campaign.exampledb import describe
    from difftest.campaign.progress import print_table, summary_table
    from difftest.coverage import labels as coverage
    from difftest.coverage import lua as lua_coverage
    from difftest.coverage import native as native_coverage
    from difftest.replay.build import command

    print()
    print_table(summary_table(result, result.config.seed, describe(database) if database else "none"), sys.stdout)
    print()
    # the terminal gets what is missing (or one line); coverage.txt and --coverage full the whole table
    print(coverage.table(result.labels) if args.coverage == "full" else coverage.folded(result.labels))
    histories = {failure.batch: failure.history for failure in result.failures if failure.unsaved}
    for entry in document["divergences"]:
        named = f" divergence:{entry['signature']}" if entry.get("signature") else ""
        print(f"\nDIVERGENCE{named} (batch {entry['batch']}, {entry['steps']} steps): {entry['reason']}")
        if entry.get("unsaved"):  # the file is lost, the divergence is not: its shrunk history, to save and replay
            replay = command("replay", "history.jsonl")
            print(f"artifact: NOT written to {entry['artifact']}: {entry['unsaved']}; the shrunk history (save it as "
                  f"history.jsonl and run {replay}: its header names the build):")  # fmt: skip
            print(histories.get(entry["batch"], ""), end="")
        else:
            print(f"artifact: {entry['artifact']} (reproduce: {entry['reproduce']})")
    print_findings(document, args.known)
    if args.native_coverage and "native_coverage" in document:
        print(native_coverage.summary_line(document["native_coverage"]))
    if args.lua_coverage and "lua_coverage" in document:
        print(lua_coverage.summary_line(document["lua_coverage"]))
    # the same line report.html shows: every option that changes the histories or which is found first
    files = "report.html, summary.json, coverage.txt, junit.xml"
    written = f"{result.config.reports} ({files})" if unwritten is None else "NOT written"
    print(f"\nreports: {written}; reproduce: {document['reproduce']}")  # fmt: skip
    sys.stdout.flush()


def _print_problems(args: argparse.Namespace, result: CampaignResult, document: Summary,
                    lost: EnvironmentFailure | None, unsaved: list[Failure], missing: list[str],
                    examples: int | None) -> None:  # fmt: skip
    """On stderr: the files the machine refused, a void run's budget, the labels a --require-coverage
    run did not reach."""
    if lost is not None:
        print(f"difftest: {lost}", file=sys.stderr)
    for failure in unsaved:
        print(f"difftest: the artifact of batch {failure.batch} could not be written to {failure.artifact}: "
              f"{failure.unsaved}; its history is printed above; free some space or pass another --reports",
              file=sys.stderr)  # fmt: skip
    if document["verdict"] == "void":
        budget = f"--seconds {args.seconds:g}" if examples is None else f"--examples {examples}"
        print(f"difftest: void: no history was compared ({budget} ran out before the first batch of {BATCH} "
              "histories began: the servers' start took longer); give a larger budget", file=sys.stderr)  # fmt: skip
    elif args.require_coverage and missing and not result.interrupted and not result.failures:
        print(f"coverage incomplete: {', '.join(missing)}", file=sys.stderr)
    sys.stderr.flush()


def _verdict(args: argparse.Namespace, result: CampaignResult, document: Summary,
             lost: EnvironmentFailure | None, unsaved: list[Failure], missing: list[str]) -> int:  # fmt: skip
    """The run's last line, its verdict whatever happened to the files, and its exit code."""
    from difftest.campaign.progress import verdict_line
    from difftest.findings.tally import verdict_words

    stopped_by = "" if not result.interrupted else ("SIGTERM" if result.interrupted_by == signal.SIGTERM else "Ctrl-C")
    print(verdict_line(document["verdict"], result.histories, result.steps, len(document["divergences"]),
                       len(missing), require_coverage=args.require_coverage, stopped_by=stopped_by,
                       reports_lost=lost is not None or bool(unsaved),
                       findings=verdict_words(document["findings"])), flush=True)  # fmt: skip
    if result.interrupted:
        return EXIT_TERMINATED if result.interrupted_by == signal.SIGTERM else EXIT_INTERRUPTED
    if document["divergences"]:
        return EXIT_DIVERGENCE  # outranks a lost file: the executors diverged, and the history is printed
    if lost is not None:
        return EXIT_IOERR
    if document["verdict"] == "void":
        return EXIT_VOID
    if document["verdict"] == "known":
        return EXIT_KNOWN
    if args.require_coverage and missing:
        return EXIT_COVERAGE
    return EXIT_OK


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    """`run`'s page: the options every replaying command has, then the campaign's own."""
    run = subcommand(
        commands, "run", "the main job: a campaign of generated histories on server pairs",
        """Generate queue histories with Hypothesis and replay each on a Lua-script server and a
        native-module server, in seeded batches spread over worker processes (a server pair each). The
        budget is a number of histories (--examples) or of seconds (--seconds). A divergence is
        shrunk to a minimal history, saved under reports/<run>/failures/ and kept in Hypothesis's
        example database (a local directory, or a Valkey server that many machines share), which
        replays it first next time; the run goes on over its whole budget, each distinct finding
        (by signature) shrunk once and counted every time it is met (--stop-at-first: the first
        divergence stops the run). Findings the known-findings file accepts (known-findings.toml,
        docs/known-findings.md) are counted, not shrunk: a run that met only those exits 6.
        Progress goes to stderr: a live bar on a terminal, a plain line every 30 s otherwise.
        summary.json, coverage.txt and junit.xml go to reports/<run>/.""",
        [
            "difftest run --examples 400 --seed 7",
            "difftest run --seconds 1800 --backend docker",
            "difftest run --lua-scripts my-scripts/ --module my-build/libemq_native.so",
            "difftest run --seconds 3600 --database valkey://10.0.0.5:6379/2   # one of many machines",
            "DIFFTEST_DATABASE=valkey://10.0.0.5:6379/2 difftest run",
            "difftest run --no-database --require-coverage",
            "difftest run --stop-at-first --examples 400 --seed 7               # stop at the first divergence",
            "difftest run --known-findings nightly/known-findings.toml",
            "difftest run --examples 400 --valkey 9.1.0                         # another Valkey release",
        ],
        EXIT_MEANINGS,
    )  # fmt: skip
    common_options(run)
    _campaign_options(run)


def _campaign_options(run: argparse.ArgumentParser) -> None:
    """The budget, seed, workers, coverage, example database and shard of a campaign."""
    run.add_argument("--examples", type=histories_count, default=None,
                     help=f"histories to run, 1 to {MAX_EXAMPLES:,} (default {DEFAULT_EXAMPLES})")  # fmt: skip
    run.add_argument("--seconds", type=seconds_budget, default=None,
                     help="run for this long (seconds above 0) instead of a count")  # fmt: skip
    run.add_argument("--seed", type=int, default=None, help="reproduce a run exactly (default: random, printed)")
    run.add_argument("--workers", type=workers_count, default=min(len(os.sched_getaffinity(0)), MAX_WORKERS),
                     help=f"worker processes (1 to {MAX_WORKERS}), each with its own server pair pinned to a core "
                     "(default: one per core)")  # fmt: skip
    run.add_argument("--no-restarts", action="store_true", help="generate no restarts or crashes")
    run.add_argument("--stop-at-first", action="store_true",
                     help="stop at the first divergence (default: go on over the whole budget, each distinct "
                     "finding shrunk once and counted)")  # fmt: skip
    add_known_findings_options(run)
    run.add_argument("--no-production-size", action="store_true",
                     help="generate no history at production's size (bulk steps of thousands of calls, about "
                     "one history in twenty, most of a campaign's calls): a quick run of everything else")  # fmt: skip
    run.add_argument("--native-coverage", action="store_true",
                     help="measure which lines of the module's source the histories reach: the module built "
                     "instrumented (executors/native/target/coverage), native-coverage.json and a report.html "
                     "section (needs rustup's llvm-tools)")  # fmt: skip
    run.add_argument("--lua-coverage", action="store_true",
                     help="measure which lines of each Lua script the histories run: an instrumented copy of the "
                     "scripts logs the lines each call ran (what they write is unchanged); lua-coverage.json and "
                     "a report.html section")  # fmt: skip
    database = run.add_mutually_exclusive_group()
    database.add_argument("--database", metavar="SPEC", default=None,
                          help="Hypothesis's example database: a directory, or valkey://HOST:PORT[/DB] "
                          "shared by many machines (default: $DIFFTEST_DATABASE, else "
                          ".hypothesis/difftest-examples)")  # fmt: skip
    database.add_argument("--no-database", action="store_true", help="keep no Hypothesis example database")
    run.add_argument("--require-coverage", action="store_true",
                     help=f"exit {EXIT_COVERAGE} unless every behaviour label was reached")  # fmt: skip
    run.add_argument("--coverage", choices=("missing", "full"), default="missing",
                     help="the coverage table on the terminal: only the labels not reached, or one line when "
                     "none is missing (default), or the whole table (coverage.txt always holds it)")  # fmt: skip
    run.add_argument("--shard", metavar="K/N", type=shard_spec, default=None,
                     help="run only shard K of N of the seed's batches (batches b with b %% N == K-1); "
                     "join the shards' run directories with difftest merge")  # fmt: skip
