"""Benchmark: how replay time grows with a history's length, for a keyspace that grows and one that does not.

Every step walks both keyspaces whole and judges them (the parity contract compares every step's
keyspaces), so a step costs in proportion to the keys and members it walks:

- `growing`: N ENQUEUEs of distinct jobs into one queue; step k walks k rows and a pending set of k
  members, so the whole history costs in the square of N. Lengths past MAX_STEPS
  (difftest/history/format.py) are refused at load: the figure printed is that refusal (one line, at once).
  `--past-limit` replays them anyway, built in Python as the loader would not (minutes at 5,000).
- `steady`: N steps alternating PAUSE and RESUME of one queue; the keyspace stays one key, so the
  cost is linear in N, whatever N: replayed at every length asked (no load limit applies to a
  history built in Python, only to one read from a file).

Per length: seconds (wall), compared steps/s, the CPU seconds of this process (the harness: reading
walks, judging) and of the two servers (walking, replying), which a busy machine does not inflate as
it does the wall time, and the peak resident memory of this process so far.

Usage: python bench/bench_long_history.py [--lengths 2000 20000 200000] [--growing 500 1000 2000]
                                          [--past-limit] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from servercpu import servers_cpu_s  # (bench/, beside this file)

from difftest.history import format as hist
from difftest.replay.replayer import Replayer
from executors.native.adapter import DEFAULT_MODULE


def growing(length: int) -> hist.History:
    return hist.History(tuple(hist.call_step("ENQUEUE", "q", f"j{i}", "payload", 0) for i in range(length)))


def steady(length: int) -> hist.History:
    return hist.History(tuple(hist.call_step("PAUSE" if i % 2 == 0 else "RESUME", "q") for i in range(length)))


def as_file(history: hist.History) -> str:
    return hist.dumps(history)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def replay(replayer: Replayer, history: hist.History) -> dict[str, float]:
    started, cpu, servers = time.perf_counter(), time.process_time(), servers_cpu_s(replayer)
    result = replayer.replay(history)
    elapsed = time.perf_counter() - started
    assert result.ok, result.divergence
    assert len(result.records) == len(history.steps), "every step compared"
    return {"seconds": round(elapsed, 3), "steps_per_s": round(len(history.steps) / elapsed, 1),
            "harness_cpu_s": round(time.process_time() - cpu, 2),
            "servers_cpu_s": round(servers_cpu_s(replayer) - servers, 2)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2_000, 20_000, 200_000],
                        help="lengths of both series (growing ones past MAX_STEPS: the refusal at load)")  # fmt: skip
    parser.add_argument("--growing", type=int, nargs="+", default=[500, 1_000, hist.MAX_STEPS],
                        help="extra lengths of the growing series, to see its square growth")  # fmt: skip
    parser.add_argument("--past-limit", action="store_true", help="replay growing histories past MAX_STEPS too")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    print(f"{'series':<8} {'steps':>8} {'seconds':>9} {'steps/s':>9} {'cpu s':>7} {'servers':>8} {'peak MB':>8}  note")
    with Replayer(DEFAULT_MODULE) as replayer:
        for series, build, lengths in (("growing", growing, sorted({*args.growing, *args.lengths})),
                                       ("steady", steady, sorted(set(args.lengths)))):  # fmt: skip
            for length in lengths:
                history = build(length)
                note = ""
                if series == "growing" and length > hist.MAX_STEPS and not args.past_limit:
                    started = time.perf_counter()
                    try:
                        hist.loads(as_file(history), f"growing-{length}.jsonl")
                        raise AssertionError("a history past MAX_STEPS loaded")
                    except hist.HistoryError as refused:
                        figures = {"seconds": round(time.perf_counter() - started, 3), "steps_per_s": 0.0,
                                   "harness_cpu_s": 0.0, "servers_cpu_s": 0.0}  # fmt: skip
                        note = f"refused at load: {str(refused)[:60]}..."
                else:
                    figures = replay(replayer, history)
                row = {"series": series, "steps": length, **figures, "peak_mb": round(peak_mb()), "note": note}
                rows.append(row)
                print(f"{series:<8} {length:>8,} {figures['seconds']:>9.2f} {figures['steps_per_s']:>9,.0f} "
                      f"{figures['harness_cpu_s']:>7.2f} {figures['servers_cpu_s']:>8.2f} {row['peak_mb']:>8}  {note}",
                      flush=True)  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
