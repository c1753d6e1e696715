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
from difftest.replay import ReplayResult, Replayer

EXIT_OK = 0
EXIT_DIVERGENCE = 1
EXIT_SETUP = 2
EXIT_INTERRUPTED = 130

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

    with Replayer(args.module, lua_scripts=args.lua_scripts) as replayer:
        result = replayer.replay(history)
    print_result(result)
    if result.divergence is None:
        print("verdict: the two executors agree under the parity contract")
        return EXIT_OK, result
    print(f"verdict: DIVERGENCE at step {result.divergence.index}: {result.divergence.reason}")
    directory = save_divergence(result, new_run_dir(args.reports, label) / "divergence")
    print(f"artifact: {directory} (reproduce: difftest replay {directory})")
    return EXIT_DIVERGENCE, result


def command_run(args: argparse.Namespace) -> int:
    from difftest.scenario import SCENARIO

    code, _ = replay_and_report(SCENARIO, args, "run")
    return code


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

    parser.add_argument("--module", type=Path, default=DEFAULT_MODULE,
                        help="the native module to load (default: this checkout's release build)")
    parser.add_argument("--lua-scripts", type=Path, default=None,
                        help="a directory of <verb>.lua scripts to use instead of executors/lua")
    parser.add_argument("--reports", type=Path, default=DEFAULT_REPORTS,
                        help="where run directories and failure artifacts go (default: reports/)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="difftest",
        description="Differential testing of the EMQ Lua scripts against the native Valkey module.",
        epilog="exit codes: 0 agree, 1 divergence, 2 bad set-up or input, 130 interrupted",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="the main job: the scripted scenario on embedded servers")
    _common(run)
    replay = commands.add_parser("replay", help="replay a history file or a failure artifact")
    replay.add_argument("file", type=Path, help="a history (.jsonl) or an artifact directory")
    _common(replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return command_run(args)
        return command_replay(args)
    except (SetupProblem, HistoryError) as problem:
        print(f"difftest: {problem}", file=sys.stderr)
        return EXIT_SETUP
    except KeyboardInterrupt:
        print("difftest: interrupted; servers and temporary files removed", file=sys.stderr)
        return EXIT_INTERRUPTED
