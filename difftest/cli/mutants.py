"""`difftest mutants ...`: the mutant catalogue's runner (python -m mutants), every argument passed on unchanged."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from difftest.base.exits import EXIT_SETUP, MUTANTS_EXITS, OneLineParser
from difftest.base.problems import SetupProblem
from difftest.cli.arguments import subcommand

MUTANTS_HELP = ("-h", "--help")


def command_mutants(argv: Sequence[str], page: Callable[[], str]) -> int:
    """`difftest mutants ...`: the catalogue runner, every argument passed on unchanged; `page` is this
    command's --help page (difftest's parser holds it)."""
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
        print(page())
        print("The catalogue runner's own options (the same as python -m mutants --help):\n", flush=True)
        rest = ["--help"]
    try:
        return mutants_main(rest)
    except SystemExit as leaving:  # a runner that leaves through argparse's exit still gives main() a code
        return leaving.code if isinstance(leaving.code, int) else EXIT_SETUP


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    """`mutants`'s page: its options are the runner's (main() hands them on before argparse sees them)."""
    mutants = subcommand(
        commands, "mutants", "score the catalogue of planted defects (python -m mutants)",
        """Score the mutant catalogue: build each planted defect of mutants/catalogue/ into its own copy
        of an executor, run a seeded campaign against it, and report which were caught. A null run on
        the unmodified pair and a canary mutant come first and must pass, or the report is void. Every
        argument after `mutants` goes unchanged to the catalogue runner (python -m mutants), including
        `merge OUT DIR...`, which joins the reports of shards run on several machines; `--generated`
        scores the generated mutants instead (cargo-mutants' of the crate, the Lua operators' of the
        scripts, triaged in mutants/triage.toml). Reports go to
        reports/mutants-<time>/ (report.html, outcomes.json, mutation-report.json, junit.xml); see
        mutants/README.md.""",
        [
            "difftest mutants                                   # null run, canary, the whole catalogue",
            "difftest mutants --only ID [ID ...]",
            "difftest mutants --jobs 2 --examples 300 --reports reports/mutants",
            "difftest mutants --shard 1/3                       # this machine's third",
            "difftest mutants --generated --jobs 2              # cargo-mutants' and the Lua operators' mutants",
            "difftest mutants merge reports/all reports/shard-1 reports/shard-2 reports/shard-3",
        ],
        MUTANTS_EXITS, add_help=False,
    )  # fmt: skip
    # main() hands everything after `mutants` to the runner before argparse sees it (argparse cannot
    # pass on options it does not know); this entry is for the command list and --help
    mutants.add_argument("args", nargs=argparse.REMAINDER, help="the runner's arguments (difftest mutants --help)")
