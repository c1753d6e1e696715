"""`difftest scenario`: the scripted scenario (every transition, D1, D6, D7) replayed on a fresh pair."""

from __future__ import annotations

import argparse

from difftest.base.exits import EXIT_MEANINGS, OneLineParser
from difftest.cli.arguments import REPLAY_EXITS, common_options, module_of, subcommand
from difftest.cli.replay import replay_and_report


def command_scenario(args: argparse.Namespace) -> int:
    from difftest.history.scenario import SCENARIO

    module_of(args)
    code, _ = replay_and_report(SCENARIO, args, "scenario")
    return code


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    """`scenario`'s page: the options every replaying command has."""
    scenario = subcommand(
        commands, "scenario", "the scripted scenario: every transition, D1, D6, D7",
        """Replay the scripted scenario, a hand-written history that walks every transition of the queue
        and the decided differences D1, D6 and D7, on a fresh server pair, and print each step's verdict.
        A divergence is saved as an artifact under reports/.""",
        ["difftest scenario", "difftest scenario --backend docker", "difftest scenario --lua-scripts my-scripts/"],
        {c: EXIT_MEANINGS[c] for c in REPLAY_EXITS},
    )  # fmt: skip
    common_options(scenario)
