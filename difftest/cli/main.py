"""The difftest command line: the parser (each command's module adds its own page) and main(), which runs
a command and turns every way out into a documented exit code. One module per command: run, fuzz, scenario,
replay, bisect, merge, report, servers, mutants; the options they share are cli/arguments.py's."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

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
    OneLineParser,
)
from difftest.base.files import write_traceback
from difftest.base.problems import EnvironmentFailure, SetupProblem
from difftest.campaign.driver import Terminated, sigterm_as_interrupt
from difftest.cli import bisect, fuzz, merge, mutants, replay, report, run, scenario, servers
from difftest.cli.arguments import epilog, paragraph, subcommands
from difftest.history.format import HistoryError

__all__ = [
    "EXIT_COVERAGE",
    "EXIT_DIVERGENCE",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_IOERR",
    "EXIT_MEANINGS",
    "EXIT_NOT_REPRODUCED",
    "EXIT_OK",
    "EXIT_SETUP",
    "EXIT_TERMINATED",
    "EXIT_VOID",
    "HANDLERS",
    "MUTANTS_EXITS",
    "build_parser",
    "main",
    "subcommands",
]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="difftest",
        description=paragraph(
            """Differential testing of the EMQ job queue's two executors: the retired Lua scripts and the
            native Valkey module. Generated queue histories are replayed on a Lua-script server and a
            native-module server side by side, on one frozen clock; after every step the replies and the
            whole keyspaces are judged under the parity contract, and a divergence is shrunk to a minimal
            history saved as an artifact that `difftest replay` reproduces."""
        ),
        epilog=epilog(
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
    # each command's page, in the order of the command list
    run.add_parser(commands)
    fuzz.add_parser(commands)
    scenario.add_parser(commands)
    replay.add_parser(commands)
    bisect.add_parser(commands)
    merge.add_parser(commands)
    report.add_parser(commands)
    servers.add_parser(commands)
    mutants.add_parser(commands)
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


SERVER_COMMANDS = ("run", "replay", "scenario", "servers", "fuzz", "bisect")  # the commands that start or reach servers
HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run.command_run, "scenario": scenario.command_scenario, "replay": replay.command_replay,
    "servers": servers.command_servers, "merge": merge.command_merge, "report": report.command_report,
    "fuzz": fuzz.command_fuzz, "bisect": bisect.command_bisect,
}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mutants"]:
        # the runner parses its own arguments and has its own codes; --help shows this command's page first
        return mutants.command_mutants(argv[1:], lambda: subcommands(build_parser())["mutants"].format_help())
    args: argparse.Namespace | None = None
    try:
        try:
            args = build_parser().parse_args(argv)  # bad options: one line from OneLineParser.error
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
