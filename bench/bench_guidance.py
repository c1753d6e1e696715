"""Coverage guidance measured: the fuzzing service guided (target() on what each history reached, or on
how rarely it was reached) and unguided, same seeds and budgets, on the catalogue's mutants and on
the unmodified pair.

Both sides run the same service code (`difftest/fuzz/`, one worker, a private store flushed before
each run, a fresh Hypothesis example database each run, no class corpus) on the coverage build of
the module with the instrumented Lua scripts, so they pay the same costs; the only difference is
whether (and which) score of each history goes to Hypothesis's `target()` (--modes: off, reach,
rare). A run stops at its first finding, recorded without Hypothesis's shrink (its last pass of
step deletion only).

- **Histories to a kill**: for each mutant and seed, the generated histories until the first
  divergence (the failing one counted), up to --budget (a mutant not killed by then counts as the
  budget and is listed as survived): median, mean and worst per side.
- **Native counters per minute**: on the unmodified pair, for each seed, a --seconds run; the
  counters (of the coverage build) any history made non-zero, at each minute and at the end, and
  the histories compared.

    .venv/bin/python bench/bench_guidance.py                          # the Lua mutants, seeds 1 and 2
    .venv/bin/python bench/bench_guidance.py --seeds 1 2 3 --budget 300 --native 5 --seconds 180
    .venv/bin/python bench/bench_guidance.py --out bench/guidance.json

The figures of the last run are in docs/fuzz.md ("Coverage guidance").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def one_run(store_url: str, module: Path, scripts: Path | None, seed: int, mode: str, budget: int | None,
            seconds: float | None, work: Path) -> dict[str, Any]:  # fmt: skip
    """One single-worker service run on a flushed store; what it found and reached."""
    from difftest.fuzz.service import serve
    from difftest.fuzz.store import Store
    from difftest.fuzz.worker import FuzzConfig
    from difftest.replay import build as builds
    from executors.lua.instrument import measuring

    store = Store(store_url)
    store.client.flushdb()
    store.check()
    run_dir = work / f"run-{seed}-{mode}-{time.monotonic_ns()}"
    run_dir.mkdir(parents=True)
    config = FuzzConfig(database=store_url, module=module, reports=run_dir, build=builds.record(module, scripts),
                        service=f"bench:{os.getpid()}", workers=1, lua_scripts=scripts, seconds=seconds,
                        histories=budget, native_counters=True, lua_lines=True, guidance=mode, class_corpus=False,
                        seed=seed, profiles=run_dir / "profiles", stop_on_finding=True, pin=False,
                        shrink_tries=0)  # fmt: skip
    started = time.monotonic()
    with measuring(run_dir), open(os.devnull, "w") as quiet:
        serve(config, quiet)
    elapsed = time.monotonic() - started
    findings = store.findings()
    series = store.series()
    totals = store.totals()
    coverage = store.coverage()
    store.close()
    return {"seed": seed, "mode": mode, "elapsed_s": round(elapsed, 1), "histories": totals.get("histories", 0),
            "killed_after": min((int(f.get("found_after") or 0) for f in findings), default=None),
            "native": coverage["native"], "native_total": coverage["native_total"], "lua": coverage["lua"],
            "labels": len(coverage["labels"]),
            "series": [{"t": round(p["t"] - series[0]["t"], 1), "histories": p["histories"], "native": p["native"],
                        "lua": p["lua"], "labels": p["labels"]} for p in series] if series else []}  # fmt: skip


def _summary(values: list[int]) -> dict[str, float]:
    return {"median": statistics.median(values), "mean": round(statistics.mean(values), 1), "worst": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--modes", nargs="+", default=["off", "reach", "rare"], help="guidance modes to compare")
    parser.add_argument("--budget", type=int, default=200, help="histories per mutant run before it counts as survived")
    parser.add_argument("--native", type=int, default=0, help="also the first N native mutants (built instrumented)")
    parser.add_argument("--only", nargs="*", default=None, help="these mutant ids only")
    parser.add_argument("--seconds", type=float, default=120.0, help="each coverage run on the unmodified pair")
    parser.add_argument("--no-coverage-runs", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)

    from difftest.coverage import native as native_coverage
    from difftest.servers.group import ServerGroup
    from mutants.catalogue import load
    from mutants.workspace import apply_patch, prepare, source_files
    from tests.helpers import LUA_DIR

    tools = native_coverage.find_tools()
    plain = native_coverage.build(tools)
    catalogue = [m for m in load() if not m.canary]
    chosen = [m for m in catalogue if m.executor == "lua"]
    chosen += [m for m in catalogue if m.executor == "native"][: args.native]
    if args.only:
        chosen = [m for m in catalogue if m.id in args.only]
    results: dict[str, Any] = {"seeds": args.seeds, "budget": args.budget, "mutants": {}, "coverage_runs": []}
    with tempfile.TemporaryDirectory(prefix="difftest-bench-guidance-") as scratch, ServerGroup() as group:
        work = Path(scratch)
        url = f"valkey://127.0.0.1:{group.add('bench-store', tcp_port=0).tcp_port}/0"
        for mutant in chosen:
            if mutant.executor == "lua":
                space = prepare("lua", LUA_DIR, mutant.patch_for("lua"), cache=work / "cache")
                module, scripts = plain, space.artifact
            else:  # the patched crate built instrumented only (its dependencies are in target/coverage already)
                tree = work / "native" / mutant.id
                source = ROOT / "executors" / "native"
                for path in source_files("native", source):
                    (tree / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, tree / path.relative_to(source))
                unviable = apply_patch(mutant.patch_for("native"), tree)
                if unviable:
                    print(f"{mutant.id}: unviable ({unviable[:80]})", flush=True)
                    continue
                module, scripts = native_coverage.build(tools, tree, mutant.id), None
            runs = []
            for seed in args.seeds:
                for mode in args.modes:
                    run = one_run(url, module, scripts, seed, mode, args.budget, None, work)
                    run.pop("series")
                    runs.append(run)
                    killed = "survived" if run["killed_after"] is None else run["killed_after"]
                    print(f"{mutant.id} seed {seed} {mode:>5}: {killed} histories "
                          f"({run['elapsed_s']} s)", flush=True)  # fmt: skip
            results["mutants"][mutant.id] = runs
        if not args.no_coverage_runs:
            for seed in args.seeds:
                for mode in args.modes:
                    run = one_run(url, plain, None, seed, mode, None, args.seconds, work)
                    results["coverage_runs"].append(run)
                    print(f"unmodified seed {seed} {mode:>5}: {run['native']} of "
                          f"{run['native_total']} native counters, {run['lua']} Lua lines, {run['labels']} labels, "
                          f"{run['histories']} histories in {run['elapsed_s']} s", flush=True)  # fmt: skip
    for side in args.modes:
        kills = [args.budget if run["killed_after"] is None else run["killed_after"]
                 for runs in results["mutants"].values() for run in runs if run["mode"] == side]  # fmt: skip
        survived = sorted({m for m, runs in results["mutants"].items() for r in runs
                           if r["mode"] == side and r["killed_after"] is None})  # fmt: skip
        coverage = [r for r in results["coverage_runs"] if r["mode"] == side]
        per_minute = [round(60.0 * r["native"] / r["elapsed_s"], 1) for r in coverage if r["elapsed_s"]]
        results[side] = {"histories_to_kill": _summary(kills) if kills else None, "survived": survived,
                         "native_counters_end": [r["native"] for r in coverage],
                         "native_counters_per_minute": per_minute,
                         "histories": [r["histories"] for r in coverage]}  # fmt: skip
        print(f"{side}: histories to a kill {results[side]['histories_to_kill']}, survived {survived or 'none'}; "
              f"native counters at the end {results[side]['native_counters_end']} "
              f"({per_minute} per minute), histories {results[side]['histories']}", flush=True)  # fmt: skip
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
