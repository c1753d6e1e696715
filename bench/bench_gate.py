"""Benchmark: what the first-write gate's question to the server costs the module (the probe of
"Writes the server denies", docs/contract-decisions.md), as the server itself times its commands.

Two servers, one loading each build of the module (OLD: a build without the probe, given by path;
NEW: this checkout's), take the same calls in alternating rounds: ENQUEUE of new jobs (each reaches
its first write, so each asks), then CLAIM of them. The figure is INFO commandstats' usec_per_call
The figure is each server's own CPU time (INFO cpu: used_cpu_user + used_cpu_sys, from getrusage;
commandstats' timings read the server's clock, which the harness freezes) per call over the round,
reading and parsing the pipelined calls included, and the ratio NEW / OLD per round; the median of
the rounds is the one to quote.

Usage: python bench/bench_gate.py OLD_MODULE [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from difftest.servers.group import ServerGroup
from executors.native.adapter import DEFAULT_MODULE


def cpu_s(client: object) -> float:
    stats = client.info("cpu")  # type: ignore[attr-defined]
    return float(stats["used_cpu_user"]) + float(stats["used_cpu_sys"])


def one_round(server: object, calls: int) -> dict[str, float]:
    client = server.client  # type: ignore[attr-defined]
    client.flushall()
    keys = (b"emq:{q}:pending", b"emq:{q}:delayed", b"emq:{q}:")
    claim_keys = (b"emq:{q}:pending", b"emq:{q}:active", b"emq:{q}:")
    spent = {}
    for verb, args in (("enqueue", None), ("claim", (*claim_keys, 60000))):
        pipe = client.pipeline(transaction=False)
        for n in range(calls):
            pipe.execute_command(f"EMQ.{verb.upper()}", 3, *(args or (*keys, b"j%d" % n, b"p", 0)))
        started = cpu_s(client)
        pipe.execute()
        spent[verb] = (cpu_s(client) - started) / calls * 1e6
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path, help="a build of the module without the probe")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with ServerGroup() as group:
        old, new = group.add("old", module=args.old), group.add("new", module=DEFAULT_MODULE)
        ratios: dict[str, list[float]] = {"enqueue": [], "claim": []}
        for number in range(args.rounds):
            order = (old, new) if number % 2 else (new, old)
            figures = {server.name: one_round(server, args.calls) for server in order}
            for verb in ratios:
                ratios[verb].append(figures["new"][verb] / figures["old"][verb])
            each = (f"{verb} old {figures['old'][verb]:.2f} us, new {figures['new'][verb]:.2f} us" for verb in ratios)
            print(f"round {number + 1}: " + ", ".join(each))
        for verb, found in ratios.items():
            print(f"{verb}: new / old, median of {args.rounds} rounds {statistics.median(found):.3f} "
                  f"(min {min(found):.3f}, max {max(found):.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
