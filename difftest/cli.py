"""The difftest command line: `run` plays the main job, `replay` reproduces a history or artifact."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from difftest import history as hist
from difftest.history import HistoryError
from difftest.problems import SetupProblem
from difftest.replay import Replayer, ReplayResult

EXIT_OK = 0  # the executors agree (and, with --require-coverage, every label was reached)
EXIT_DIVERGENCE = 1  # a divergence: its artifact is under reports/
EXIT_SETUP = 2  # bad set-up or input: one line on stderr says what and how to fix it
EXIT_COVERAGE = 3  # --require-coverage and a behaviour label was not reached
EXIT_INTERRUPTED = 130  # Ctrl-C: servers and temporary files removed, reports so far kept

DEFAULT_REPORTS = Path("reports")


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


def replay_and_report(history: hist.History, args: argparse.Namespace, label: str) -> tuple[int, ReplayResult]:
    from difftest.artifacts import save_divergence

    with Replayer(args.module, lua_scripts=args.lua_scripts, backend=args.backend) as replayer:
        result = replayer.replay(history)
    print_result(result)
    if result.divergence is None:
        print("verdict: the two executors agree under the parity contract")
        return EXIT_OK, result
    print(f"verdict: DIVERGENCE at step {result.divergence.index}: {result.divergence.reason}")
    directory = save_divergence(result, new_run_dir(args.reports, label) / "divergence")
    print(f"artifact: {directory} (reproduce: difftest replay {directory})")
    return EXIT_DIVERGENCE, result


def command_scenario(args: argparse.Namespace) -> int:
    from difftest.scenario import SCENARIO

    code, _ = replay_and_report(SCENARIO, args, "scenario")
    return code


def command_run(args: argparse.Namespace) -> int:
    import random

    from difftest import coverage, reports
    from difftest.campaign import CampaignConfig, run_campaign

    if not args.module.is_file():
        raise SetupProblem(f"module {args.module} does not exist: build it with 'make setup' or pass --module PATH")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    directory = new_run_dir(args.reports, "run")
    examples = None if args.seconds is not None and args.examples is None else (args.examples or 2000)
    config = CampaignConfig(
        seed=seed, module=args.module, reports=directory, examples=examples, seconds=args.seconds,
        workers=args.workers, lua_scripts=args.lua_scripts, restarts=not args.no_restarts,
        database=None if args.no_database else Path(".hypothesis") / "difftest-examples",
        backend=args.backend,
    )  # fmt: skip
    budget = f"{examples} histories" if examples is not None else f"{args.seconds:g} s"
    print(f"campaign: seed {seed}, {budget}, {args.workers} worker(s); reports in {directory}", flush=True)
    result = run_campaign(config)
    reports.write(result, directory)
    rate = result.steps / result.elapsed_s if result.elapsed_s else 0.0
    print(f"\n{result.histories} histories, {result.steps} steps compared in {result.elapsed_s:.1f} s "
          f"({rate:.0f} steps/s), {len(result.failures)} divergence(s)\n")  # fmt: skip
    print(coverage.table(result.labels))
    for failure in result.failures:
        print(f"\nDIVERGENCE (batch {failure.batch}, {failure.steps} steps): {failure.reason}")
        print(f"artifact: {failure.artifact} (reproduce: difftest replay {failure.artifact})")
    print(
        f"\nreports: {directory} (summary.json, coverage.txt, junit.xml); reproduce: difftest run --seed {seed}"
        + (f" --examples {examples}" if examples is not None else "")
    )
    if result.interrupted:
        return EXIT_INTERRUPTED
    if result.failures:
        return EXIT_DIVERGENCE
    if args.require_coverage and coverage.missing(result.labels):
        print(f"coverage incomplete: {', '.join(coverage.missing(result.labels))}", file=sys.stderr)
        return EXIT_COVERAGE
    return EXIT_OK


def command_replay(args: argparse.Namespace) -> int:
    from difftest.artifacts import expected_verdict, history_path

    path = history_path(args.file)
    history = hist.load(path)
    code, result = replay_and_report(history, args, "replay")
    expect = expected_verdict(path)
    if expect is not None:
        same = (
            result.divergence is not None
            and expect.get("verdict") == "divergence"
            and expect.get("step") == result.divergence.index
            and expect.get("reason") == result.divergence.reason
        )
        print(f"recorded verdict: divergence at step {expect.get('step')}: {expect.get('reason')}")
        print("reproduced: " + ("yes, the same step and reason" if same else "NO"))
    return code


def _common(parser: argparse.ArgumentParser) -> None:
    from executors.native.adapter import DEFAULT_MODULE

    parser.add_argument(
        "--module",
        type=Path,
        default=DEFAULT_MODULE,
        help="the native module to load (default: this checkout's release build)",
    )
    parser.add_argument(
        "--lua-scripts",
        type=Path,
        default=None,
        help="a directory of <verb>.lua scripts to use instead of executors/lua",
    )
    parser.add_argument(
        "--backend",
        choices=("local", "docker"),
        default="local",
        help="embedded server processes (default) or containers of images built here",
    )
    parser.add_argument("--reports", type=Path, default=DEFAULT_REPORTS,
                        help="where run directories and failure artifacts go (default: reports/)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="difftest",
        description="Differential testing of the EMQ Lua scripts against the native Valkey module.",
        epilog=f"exit codes: {EXIT_OK} agree, {EXIT_DIVERGENCE} divergence, {EXIT_SETUP} bad set-up or input, "
        f"{EXIT_COVERAGE} coverage incomplete (--require-coverage), {EXIT_INTERRUPTED} interrupted",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="the main job: a campaign of generated histories on embedded server pairs",
        description="Generate histories, replay each on a Lua and a native server, judge every step. "
        "Stops at the first divergence, shrinks it and saves it as an artifact.",
    )  # fmt: skip
    _common(run)
    run.add_argument("--examples", type=int, default=None, help="histories to run (default 2000)")
    run.add_argument("--seconds", type=float, default=None, help="run for this long instead of a count")
    run.add_argument("--seed", type=int, default=None, help="reproduce a run exactly (default: random, printed)")
    run.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                     help="worker processes, each with its own server pair pinned to a core")  # fmt: skip
    run.add_argument("--no-restarts", action="store_true", help="generate no restarts or crashes")
    run.add_argument("--no-database", action="store_true", help="keep no Hypothesis example database")
    run.add_argument("--require-coverage", action="store_true",
                     help=f"exit {EXIT_COVERAGE} unless every behaviour label was reached")  # fmt: skip
    scenario = commands.add_parser("scenario", help="the scripted scenario: every transition, D1, D6, D7")
    _common(scenario)
    replay = commands.add_parser("replay", help="replay a history file or a failure artifact")
    replay.add_argument("file", type=Path, help="a history (.jsonl) or an artifact directory")
    _common(replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        handler = {"run": command_run, "scenario": command_scenario, "replay": command_replay}[args.command]
        return handler(args)
    except (SetupProblem, HistoryError) as problem:
        print(f"difftest: {problem}", file=sys.stderr)
        return EXIT_SETUP
    except KeyboardInterrupt:
        print("difftest: interrupted; servers and temporary files removed", file=sys.stderr)
        return EXIT_INTERRUPTED
