"""`python -m mutants [--only ID ...] [--jobs N] [--shard K/N] [--examples N] [--seed S] [--reports DIR]`:
score the catalogue; `python -m mutants merge OUT DIR [DIR ...]`: join shard reports into one."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from mutants.child import default_jobs
from mutants.run import EXIT_INTERRUPTED, EXIT_USAGE, merge, run
from mutants.score import Budget
from mutants.workspace import DEFAULT_CACHE


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        k, n = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a shard is K/N, e.g. 1/3") from None
    if n < 1 or not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be between 1 and N")
    return k, n


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | int:
    """The arguments, or the exit code: argparse's own exit is 2, which here means "void"."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0


def _merge_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m mutants merge", description="Join shard reports into one.")
    parser.add_argument("out", type=Path, help="the merged report's directory")
    parser.add_argument("shards", type=Path, nargs="+", metavar="DIR", help="each shard's report directory")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    code = merge(args.out, args.shards, say=lambda line: print(line, flush=True))
    if code != EXIT_USAGE:
        print(f"report: {args.out / 'report.html'}")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["merge"]:
        return _merge_main(argv[1:])
    defaults = Budget()
    parser = argparse.ArgumentParser(
        prog="python -m mutants", description="Build and score the mutant catalogue (`merge OUT DIR...`: join shards)."
    )
    parser.add_argument("--only", nargs="+", metavar="ID", help="these mutants only (null run and canary still run)")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="campaigns at once (default: the cores)")
    parser.add_argument("--shard", type=_shard, metavar="K/N", help="the K-th of N shards (round-robin over ids)")
    parser.add_argument("--examples", type=int, default=defaults.examples, help="histories per campaign")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--timeout", type=float, default=defaults.timeout_s, help="seconds per campaign")
    parser.add_argument("--grace", type=float, default=defaults.grace_s, help="seconds past --timeout before a kill")
    parser.add_argument("--no-restarts", action="store_true", help="histories never restart nor crash the servers")
    parser.add_argument("--replicas", action="store_true",
                        help="a replica beside each server, compared with it after every segment")  # fmt: skip
    parser.add_argument("--reports", type=Path, default=None, help="default: reports/mutants-<time>")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if args.jobs < 1:
        print("--jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    reports = args.reports or Path("reports") / f"mutants-{time.strftime('%Y%m%dT%H%M%S')}"
    budget = Budget(seed=args.seed, examples=args.examples, timeout_s=args.timeout, grace_s=args.grace,
                    restarts=not args.no_restarts, replicas=args.replicas)  # fmt: skip
    signal.signal(signal.SIGTERM, _interrupt)  # like Ctrl-C: every campaign stopped, its servers removed
    try:
        code, _ = run(reports, budget, args.only, args.cache, say=lambda line: print(line, flush=True),
                      jobs=args.jobs, shard=args.shard)  # fmt: skip
    except KeyboardInterrupt:
        print(f"interrupted; what was scored is in {reports / 'outcomes.json'}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"report: {reports / 'report.html'} (outcomes: {reports / 'outcomes.json'})")
    return code


if __name__ == "__main__":
    sys.exit(main())
