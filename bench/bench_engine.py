"""Benchmark: the state machine's generation rate with each of the engine's hooks, and with none (the public API).

strategies/engine.py reaches past Hypothesis's public API in five places; this measures what each
buys. Per way of drawing (every hook; every hook but one, for each; none: `hypothesis.stateful` as
documented, unpatched), generation only, no server: histories/s and steps/s in CPU time (the
process's own, so that other work on the machine counts less), the best of `--repeat` rounds (the
ways take turns in each), and what the histories hold (the runs Hypothesis drew and how many were
cut short, an overrun or a rejection; the share of the steps that are transitions and that restart
a server). Each run draws `--examples` histories of each mix from seeds 1000, 1001, ... (`--batches`
of them), as a campaign's batches do.

`--digest` prints a digest of every way's histories (the same seed must give the same histories
whatever this module's layout: compare it before and after a change). `--constants` measures the
`constants` hook: the same seeds drawn in a fresh process that loaded the machine alone and in one
that loaded the campaign, the mutant runner and the report first, with the hook on and off, and how
many histories differ.

Usage: python bench/bench_engine.py [--examples N] [--batches B] [--repeat R] [--mixes M...]
                                    [--ways W...] [--digest] [--constants] [--json PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from hypothesis import Phase

from difftest.history.format import CallStep, History, Restart, dumps
from strategies import engine
from strategies.machine import QueueMachine, machine_settings, run_machine
from strategies.shape import HistoryShape

MIXES = {
    "default": HistoryShape(),
    "no-restarts": HistoryShape(restarts=False, crashes=False),
    "calls-only": HistoryShape(restarts=False, crashes=False, corruption=False, users=False, interleaving=False,
                               malformed=False, transactions=False, notifications=False, memory=False,
                               replica_calls=False),
}  # fmt: skip
FIRST_SEED = 1000
# the ways of drawing: every hook, every hook but one, none (the public API, unpatched)
WAYS: dict[str, frozenset[str]] = {
    "hooks": frozenset(engine.HOOKS),
    **{f"without {hook}": frozenset(engine.HOOKS) - {hook} for hook in engine.HOOKS},
    "public": frozenset(),
}
# what --constants loads first in the second process: most of the project, as a campaign's worker has
LOADED = "import difftest.campaign.driver, difftest.cli.main, difftest.report.reports, mutants.run, strategies.corpus"


@dataclass
class Figure:
    mix: str
    way: str
    histories: int
    steps: int
    cpu_s: float  # the best run's
    histories_per_s: float
    steps_per_s: float
    runs: int  # runs Hypothesis drew, those cut short included
    cut_short: int  # overran or rejected: thrown away
    calls_share: float  # of the steps, transitions (CallStep)
    restarts_share: float  # of the steps, restarts and crashes
    digest: str


def draw(shape: HistoryShape, examples: int, batches: int, body: list[History]) -> Counter[str]:
    """`batches` seeded runs of `examples` histories each into `body`; the runs drawn and cut short."""
    runs: Counter[str] = Counter()
    teardown = QueueMachine.teardown

    def counted(machine: QueueMachine) -> None:
        runs["drawn"] += 1
        runs["cut short"] += engine.cut_short()
        teardown(machine)

    QueueMachine.teardown = counted  # type: ignore[method-assign]
    try:
        for batch in range(batches):
            settings = machine_settings(examples, shape.max_steps, phases=[Phase.generate])
            run_machine(shape, body.append, settings, seed=FIRST_SEED + batch)
    finally:
        QueueMachine.teardown = teardown  # type: ignore[method-assign]
    return runs


def measure(mix: str, ways: list[str], examples: int, batches: int, repeat: int) -> list[Figure]:
    """Each way's figures for the mix; the ways take turns, `repeat` rounds, so that the machine's
    other work falls on all of them alike; each keeps its best round."""
    shape = MIXES[mix]
    best = dict.fromkeys(ways, float("inf"))
    made: dict[str, list[History]] = {}
    runs: dict[str, Counter[str]] = {}
    for _ in range(repeat):
        for way in ways:
            with engine.using(WAYS[way] & engine.AVAILABLE):
                made[way] = []
                started = time.process_time()
                runs[way] = draw(shape, examples, batches, made[way])
                best[way] = min(best[way], time.process_time() - started)
    return [figure(mix, way, made[way], runs[way], best[way]) for way in ways]


def figure(mix: str, way: str, made: list[History], runs: Counter[str], cpu_s: float) -> Figure:
    steps = sum(len(h.steps) for h in made)
    kinds = Counter(type(step) for h in made for step in h.steps)
    digest = hashlib.sha256()
    for history in made:
        digest.update(dumps(history).encode())
    return Figure(mix, way, len(made), steps, round(cpu_s, 3), len(made) / cpu_s, steps / cpu_s, runs["drawn"],
                  runs["cut short"], kinds[CallStep] / steps, kinds[Restart] / steps,
                  digest.hexdigest()[:16])  # fmt: skip


def print_figures(figures: list[Figure]) -> None:
    print(f"{'mix':<12} {'way':<20} {'histories':>9} {'steps':>7} {'hist/s':>7} {'steps/s':>8} {'vs hooks':>8} "
          f"{'runs':>5} {'cut short':>9} {'calls':>6} {'restarts':>8}  digest")  # fmt: skip
    hooked = {f.mix: f for f in figures if f.way == "hooks"}
    for f in figures:
        base = hooked.get(f.mix)
        versus = f"{f.steps_per_s / base.steps_per_s:.2f}" if base else "-"
        print(f"{f.mix:<12} {f.way:<20} {f.histories:>9} {f.steps:>7} {f.histories_per_s:>7.1f} "
              f"{f.steps_per_s:>8.0f} {versus:>8} {f.runs:>5} {f.cut_short:>9} {f.calls_share:>6.1%} "
              f"{f.restarts_share:>8.1%}  {f.digest}")  # fmt: skip


def constants(examples: int, batches: int) -> dict[str, int]:
    """How many of the same seeds' histories differ between a process that loaded the machine alone
    and one that loaded most of the project first, with the `constants` hook on and off."""
    differ: dict[str, int] = {}
    for hook in ("on", "off"):
        ways = sorted(engine.AVAILABLE - ({"constants"} if hook == "off" else set()))
        lists = []
        for preload in ("", LOADED):
            argv = ["bench_engine", "--lines", str(examples), str(batches), ",".join(ways)]
            code = (
                f"{preload}\nimport runpy, sys\nsys.argv = {argv!r}\nrunpy.run_path({__file__!r}, run_name='__main__')"
            )
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            lists.append(done.stdout.splitlines())
        differ[hook] = sum(a != b for a, b in zip(*lists, strict=True))
        print(f"constants hook {hook}: {differ[hook]} of {len(lists[0])} histories differ between the two processes")
    return differ


def lines(examples: int, batches: int, ways: str) -> None:
    """One digest line per history of the default mix (--constants' child processes)."""
    made: list[History] = []
    with engine.using(frozenset(filter(None, ways.split(","))) & engine.AVAILABLE):
        draw(MIXES["default"], examples, batches, made)
    for history in made:
        print(hashlib.sha256(dumps(history).encode()).hexdigest()[:16])


def main() -> None:
    if sys.argv[1:2] == ["--lines"]:
        lines(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=100, help="histories per batch (default 100)")
    parser.add_argument("--batches", type=int, default=3, help="seeded batches per mix (default 3)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per way, the best kept (default 3)")
    parser.add_argument("--mixes", nargs="*", default=["default"], choices=list(MIXES))
    parser.add_argument("--ways", nargs="*", default=list(WAYS), choices=list(WAYS))
    parser.add_argument("--digest", action="store_true", help="print the digest of all the histories drawn")
    parser.add_argument("--constants", action="store_true", help="measure the constants hook (two processes)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if not engine.AVAILABLE:
        print(f"hypothesis is not the pinned {engine.PINNED}: no hook is available, only the public API")
    figures = [f for mix in args.mixes for f in measure(mix, args.ways, args.examples, args.batches, args.repeat)]
    print_figures(figures)
    if args.digest:
        total = hashlib.sha256("".join(f.digest for f in figures).encode()).hexdigest()
        print(f"digest of every way and mix: {total}")
    differ = constants(args.examples, args.batches) if args.constants else {}
    if args.json:
        args.json.write_text(json.dumps({"figures": [asdict(f) for f in figures], "constants": differ}, indent=2))


if __name__ == "__main__":
    main()
