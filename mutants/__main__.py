# `python -m mutants [--only ID ...] [--examples N] [--seed S] [--reports DIR]`: score the catalogue.

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mutants.run import run
from mutants.score import Budget
from mutants.workspace import DEFAULT_CACHE


def main(argv: list[str] | None = None) -> int:
    defaults = Budget()
    parser = argparse.ArgumentParser(prog="python -m mutants", description="Build and score the mutant catalogue.")
    parser.add_argument("--only", nargs="+", metavar="ID", help="these mutants only (null run and canary still run)")
    parser.add_argument("--examples", type=int, default=defaults.examples, help="histories per campaign")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--timeout", type=float, default=defaults.timeout_s, help="seconds per campaign")
    parser.add_argument("--reports", type=Path, default=None, help="default: reports/mutants-<time>")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    reports = args.reports or Path("reports") / f"mutants-{time.strftime('%Y%m%dT%H%M%S')}"
    budget = Budget(seed=args.seed, examples=args.examples, timeout_s=args.timeout)
    code, _ = run(reports, budget, args.only, args.cache, say=lambda line: print(line, flush=True))
    print(f"outcomes: {reports / 'outcomes.json'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
