"""Benchmark: what a compared step costs as the queue grows (10 to 100,000 jobs), and the memory a replay holds.

Each size N is one history: N ENQUEUEs fill one queue, then a tail of mixed steps runs on it (an
ENQUEUE, a CLAIM, the COMPLETE of the job it claimed, PAUSE, RESUME, PROMOTE, SWEEP and a clock
advance, round after round). The tail's cost a step is clocked inside the replay, over the segments
that hold only tail steps (sending them, moving the clock, judging them): the figure the issue asks
to stay flat (a step at 100,000 jobs within 2x of a step at 10). Each size runs in a process of
its own, so that its peak memory is its own.

`--tree PATH` runs the children from another checkout (its difftest, the same bench): the figures of
an older commit in the same sitting, as ratios (this machine is noisy). `--walker whole` compares
with a whole walk after every step (DIFFTEST_WALKER).

`--bulk` fills the queue with bulk steps and makes the tail's ENQUEUEs and CLAIMs bulks of 50 (each
call a step, walked once after its bulk's last: docs/history-format.md, "Bulk steps"): what a step
costs where production's size is drawn, and sizes of 100,000 a single-call fill cannot reach.

Usage: python bench/bench_size.py [--sizes 10 1000 10000] [--tail 400] [--tree PATH] [--walker module|whole]
                                  [--bulk] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROUND = 8  # steps a round of the tail
REPEATS = 2  # each history replayed this many times (after a warm-up): the fastest counts


def _round_end() -> list[object]:
    """A tail round's last steps: PAUSE, RESUME, PROMOTE, SWEEP and a clock advance."""
    from difftest.history import format as hist

    return [hist.call_step("PAUSE", "q"), hist.call_step("RESUME", "q"), hist.call_step("PROMOTE", "q", 10),
            hist.call_step("SWEEP", "q", 3, 10), hist.Advance(5)]  # fmt: skip


BULK_ROUND = 50  # `--bulk`: the calls of each of a tail round's two bulks


def _bulk_history(size: int, tail: int) -> tuple[object, object]:
    """`_history` with bulk steps: the fill in bulks of MAX_BULK, the tail's rounds a bulk ENQUEUE and a
    bulk CLAIM of BULK_ROUND calls each, then PAUSE, RESUME, PROMOTE, SWEEP and an advance."""
    from difftest.history import format as hist
    from difftest.spec.calls import Call

    fill: list[hist.Step] = []
    for chunk in range(0, size, hist.MAX_BULK):
        count = min(hist.MAX_BULK, size - chunk)
        fill += hist.Bulk(Call.of("ENQUEUE", "q", f"j{chunk // hist.MAX_BULK}.", "payload", 0), count).steps()
    steps: list[hist.Step] = []
    for i in range(max(1, tail // (2 * BULK_ROUND + 5))):
        steps += [
            *hist.Bulk(Call.of("ENQUEUE", "q", f"t{i}.", "payload", 0), BULK_ROUND).steps(),
            *hist.Bulk(Call.of("CLAIM", "q", 1000), BULK_ROUND).steps(),
            *_round_end(),
        ]
    return hist.History(tuple(fill)), hist.History(tuple(fill + steps))


def _history(size: int, tail: int) -> tuple[object, object]:
    """(the fill alone, the fill and the tail) as histories."""
    from difftest.history import format as hist

    fill = [hist.call_step("ENQUEUE", "q", f"j{i:06d}", "payload", 0) for i in range(size)]
    pending = [f"j{i:06d}" for i in range(size)]  # the order CLAIM pops them: by score, then by id
    steps: list[hist.Step] = []
    for i in range(max(1, tail // ROUND)):
        added = f"t{i:06d}"
        pending.append(added)
        claimed = pending.pop(0)
        steps += [
            hist.call_step("ENQUEUE", "q", added, "payload", 0),
            hist.call_step("CLAIM", "q", 1000),
            hist.call_step("COMPLETE", "q", claimed, 1),
            *_round_end(),
        ]
    return hist.History(tuple(fill)), hist.History(tuple(fill + steps))


def one(size: int, tail: int, bulk: bool = False) -> dict[str, object]:
    """One size's figures (run in a child process)."""
    from servercpu import servers_cpu_s  # (bench/, beside this file)

    from difftest.replay.replayer import Replayer
    from executors.native.adapter import DEFAULT_MODULE

    fill, whole = (_bulk_history if bulk else _history)(size, tail)
    with Replayer(DEFAULT_MODULE) as replayer:
        replayer.replay(fill)  # type: ignore[arg-type]  # (warm: scripts loaded, connections made)
        started = time.perf_counter()
        replayer.replay(fill)  # type: ignore[arg-type]
        fill_s = time.perf_counter() - started
        clock = _TailClock(replayer, size, servers_cpu_s)
        tails = []
        for _ in range(REPEATS):
            clock.reset()
            result = replayer.replay(whole)  # type: ignore[arg-type]
            assert result.ok, result.divergence
            assert len(result.records) == len(whole.steps), "every step compared"  # type: ignore[attr-defined]
            tails.append((clock.wall / clock.steps, clock.cpu / clock.steps, clock.servers / clock.steps))
        walks = getattr(result, "walks", "whole")
    per_step, harness, servers = min(tails)  # the least disturbed by the rest of the machine
    return {
        "jobs": size,
        "tail_steps": clock.steps,
        "fill_s": round(fill_s, 2),
        "step_ms": round(per_step * 1000, 3),
        "steps_per_s": round(1 / per_step, 1),
        "harness_ms": round(harness * 1000, 3),
        "servers_ms": round(servers * 1000, 3),
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "walks": walks,
    }


class _TailClock:
    """The time the replay spends on the tail's segments (those whose first step comes after the
    fill): sending them, moving the clock, judging them; wall, this process's CPU and the servers'.
    It wraps the replayer's per-segment methods on the instance (a benchmark's view inside a replay:
    the difference of two whole replays drowns a tail of 400 steps in a fill of 10,000)."""

    def __init__(self, replayer: Any, size: int, servers_cpu_s: Callable[[object], float]) -> None:
        self.size, self.servers_cpu_s, self.replayer = size, servers_cpu_s, replayer
        self.reset()
        for name, where in (("_send", 0), ("_boundary", 0), ("_judge_segment", 3)):
            setattr(replayer, name, self._timed(getattr(replayer, name), where, name == "_judge_segment"))
        if hasattr(replayer, "_unverified"):  # the tracked walks' verification after a tail segment counts too
            setattr(replayer, "_unverified", self._timed(replayer._unverified, None, False))  # noqa: B010

    def reset(self) -> None:
        self.wall = self.cpu = self.servers = 0.0
        self.steps = 0
        self.in_tail = False

    def _timed(self, method: Callable[..., Any], where: int | None, counts: bool) -> Callable[..., Any]:
        def timed(*args: Any, **options: Any) -> Any:
            if where is not None:
                first = args[where]
                self.in_tail = (first[0] if isinstance(first, list) else first).index >= self.size
            if not self.in_tail:
                return method(*args, **options)
            wall, cpu, servers = time.perf_counter(), time.process_time(), self.servers_cpu_s(self.replayer)
            out = method(*args, **options)
            self.wall += time.perf_counter() - wall
            self.cpu += time.process_time() - cpu
            self.servers += self.servers_cpu_s(self.replayer) - servers
            if counts:
                self.steps += len(args[3])
            return out

        return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1_000, 10_000])
    parser.add_argument("--tail", type=int, default=400, help="steps of the mixed tail (rounds of 8)")
    parser.add_argument("--tree", type=Path, default=HERE.parent.parent, help="the checkout the children run")
    parser.add_argument("--walker", choices=("module", "whole"), default=None, help="DIFFTEST_WALKER for the children")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    parser.add_argument(
        "--bulk",
        action="store_true",
        help="the fill and the tail's ENQUEUEs and CLAIMs as bulk steps (walked once, after the last)",
    )
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # (a child: one size)
    args = parser.parse_args()
    if args.one is not None:
        sys.path.insert(0, str(args.tree))
        print(json.dumps(one(args.one, args.tail, args.bulk)))
        return 0
    env = dict(os.environ, PYTHONPATH=str(args.tree))
    if args.walker:
        env["DIFFTEST_WALKER"] = args.walker
    rows = []
    print(
        f"tree {args.tree}  walker {args.walker or 'default'}  tail {args.tail} steps"
        f"{'  bulk steps' if args.bulk else ''}"
    )
    header = ("jobs", "fill s", "step ms", "steps/s", "harness", "servers", "peak MB")
    print(" ".join(f"{name:>8}" for name in header) + "  walks")
    for size in args.sizes:
        command = [sys.executable, str(HERE), "--one", str(size), "--tail", str(args.tail), "--tree", str(args.tree),
                   *(["--bulk"] if args.bulk else [])]  # fmt: skip
        child = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if child.returncode != 0:
            why = child.stderr.strip().splitlines()[-1] if child.stderr.strip() else child.returncode
            print(f"{size:>8,} failed: {why}")
            continue
        row = json.loads(child.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{size:>8,} {row['fill_s']:>8.2f} {row['step_ms']:>8.3f} {row['steps_per_s'] or 0:>8,.0f} "
              f"{row['harness_ms']:>8.3f} {row['servers_ms']:>8.3f} {row['peak_mb']:>8}  {row['walks']}",
              flush=True)  # fmt: skip
    if len(rows) > 1 and rows[0]["step_ms"]:
        ratio = float(rows[-1]["step_ms"]) / float(rows[0]["step_ms"])
        print(f"a step at {rows[-1]['jobs']:,} jobs costs {ratio:.1f}x one at {rows[0]['jobs']:,}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
