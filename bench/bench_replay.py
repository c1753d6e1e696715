"""Benchmark: compared steps per second, and the ratio to generating the same histories alone.

Both figures come from one run on the same machine, so the ratio holds even when the machine is
noisy. Usage: python bench/bench_replay.py [--examples N] [--pin] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings

from difftest.replay import Replayer
from difftest.servers.local import pin_to_core
from executors.native.adapter import DEFAULT_MODULE
from strategies.histories import HistoryShape, histories

MIXES = {
    "default": HistoryShape(),
    "no-restarts": HistoryShape(restarts=False, crashes=False),
    "calls-only": HistoryShape(restarts=False, crashes=False, corruption=False, users=False,
                               interleaving=False, malformed=False),
}  # fmt: skip


@dataclass
class Figure:
    mix: str
    histories: int
    steps: int
    generate_steps_per_s: float
    compared_steps_per_s: float
    ratio: float
    divergences: int


def _run(shape: HistoryShape, examples: int, replayer: Replayer | None) -> tuple[int, int, float, int]:
    counts = {"histories": 0, "steps": 0, "divergences": 0}

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(histories(shape))
    def body(history):  # type: ignore[no-untyped-def]
        counts["histories"] += 1
        counts["steps"] += len(history.steps)
        if replayer is not None and replayer.replay(history).divergence is not None:
            counts["divergences"] += 1

    started = time.perf_counter()
    body()
    return counts["histories"], counts["steps"], time.perf_counter() - started, counts["divergences"]


def measure(mix: str, examples: int, replayer: Replayer) -> Figure:
    shape = MIXES[mix]
    _, gen_steps, gen_s, _ = _run(shape, examples, None)
    count, steps, total_s, divergences = _run(shape, examples, replayer)
    assert steps == gen_steps, "derandomized generation must give the same histories"
    generate_rate, compared_rate = gen_steps / gen_s, steps / total_s
    return Figure(mix, count, steps, generate_rate, compared_rate, compared_rate / generate_rate, divergences)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=300, help="histories per mix")
    parser.add_argument("--pin", action="store_true", help="pin harness and servers to one core")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.pin:
        print(f"pinned to core {pin_to_core(0)}")
    figures = []
    with Replayer(DEFAULT_MODULE) as replayer:
        for mix in MIXES:
            figures.append(measure(mix, args.examples, replayer))
    header = ("mix", "histories", "steps", "gen steps/s", "compared steps/s", "ratio", "div")
    print(f"{header[0]:<12} " + " ".join(f"{h:>{w}}" for h, w in zip(header[1:], (9, 7, 12, 17, 6, 4), strict=True)))
    for f in figures:
        print(f"{f.mix:<12} {f.histories:>9} {f.steps:>7} {f.generate_steps_per_s:>12.0f} "
              f"{f.compared_steps_per_s:>17.0f} {f.ratio:>6.2f} {f.divergences:>4}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=2) + "\n")


if __name__ == "__main__":
    main()
