"""`difftest fuzz [status]`: the fuzzing service's command line (its work is difftest/fuzz/command.py's)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from difftest.base.exits import (
    EXIT_DIVERGENCE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_IOERR,
    EXIT_MEANINGS,
    EXIT_OK,
    EXIT_SETUP,
    EXIT_TERMINATED,
    EXIT_VOID,
    OneLineParser,
)
from difftest.cli.arguments import (
    DEFAULT_REPORTS,
    MAX_WORKERS,
    build_of,
    check_module,
    histories_count,
    module_file,
    module_of,
    scripts_directory,
    seconds_budget,
    subcommand,
    workers_count,
)


def command_fuzz(args: argparse.Namespace) -> int:
    """`difftest fuzz [status]`: the fuzzing service (difftest/fuzz/), its module checked here first."""
    from difftest.fuzz.command import command_fuzz as fuzz

    if args.action is None and not args.dashboard_only:
        module_of(args)
        check_module(args.module)
        args.attach = None
        args.build = build_of(args)  # findings replay on the plain build (the coverage build computes the same)
    return fuzz(args)


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    """`fuzz`'s page: the service's own options (difftest/fuzz/command.py), the build it runs, where findings go."""
    fuzz = subcommand(
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
