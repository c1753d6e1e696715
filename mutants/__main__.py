"""`python -m mutants [--generated [--list]] [--only ID ...] [--jobs N] [--shard K/N] [--in-diff REF]
[--incremental] [--examples N] [--seed S] [--reports DIR]`: score the catalogue (or the generated mutants);
`python -m mutants merge OUT DIR [DIR ...]`: join shard reports into one."""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from difftest.base.exits import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_IOERR,
    EXIT_SETUP,
    EXIT_TERMINATED,
    MUTANTS_EXITS,
    OneLineParser,
)
from difftest.base.problems import EnvironmentFailure, SetupProblem
from difftest.campaign.driver import Terminated
from difftest.findings.known import add_known_findings_options, known_findings_of
from mutants.child import default_jobs
from mutants.generated import GeneratedMutant
from mutants.known import gate
from mutants.report import DEFAULT_THRESHOLDS, Thresholds
from mutants.run import EXIT_SOME_MISSED, RunConfig, merge, run
from mutants.score import Budget
from mutants.trend import FILE_NAME, default_file
from mutants.triage import Triage
from mutants.workspace import DEFAULT_CACHE

CODES = "exit codes:\n" + "\n".join(f"  {code:<4} {meaning}" for code, meaning in MUTANTS_EXITS.items())


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        k, n = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a shard is K/N, e.g. 1/3") from None
    if n < 1 or not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be between 1 and N")
    return k, n


def _terminate(*_: object) -> None:
    raise Terminated  # like Ctrl-C (every campaign stopped, its servers removed), but exits 143


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give a percentage, 0 to 100") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0 and 100")
    return value


_UNSET = object()  # --threshold-break not given (None is given: "none")


def _break(text: str) -> float | None:
    """A percentage, or "none": no score gate, every mutant must be caught (a workflow input's default)."""
    return None if text.strip().lower() == "none" else _percent(text)


def _thresholds(parser: argparse.ArgumentParser, merged: bool = False) -> None:
    default = "default: the shards' own" if merged else "default"
    parser.add_argument(
        "--threshold-high",
        type=_percent,
        default=None,
        metavar="P",
        help=f"a score at or above P is drawn good ({default}: {DEFAULT_THRESHOLDS.high:g})",
    )
    parser.add_argument(
        "--threshold-low",
        type=_percent,
        default=None,
        metavar="P",
        help=f"a score below P is drawn bad ({default}: {DEFAULT_THRESHOLDS.low:g})",
    )
    parser.add_argument("--threshold-break", type=_break, default=_UNSET, metavar="P",
                        help="the gate: a score below P exits 1, at or above it 0, whatever survived; none: "
                        "every mutant must be caught (default: "
                        + ("the shards' own" if merged else "none") + ")")  # fmt: skip


def _release(parser: argparse.ArgumentParser, where: str) -> None:
    """The score history and the survivors as GitHub annotations: a run's and a merge's."""
    parser.add_argument("--score-history", metavar="FILE", default=None,
                        help=f"the JSON-lines file each finished run appends its scores to, and whose last run of "
                        f"the same scope and budget the report compares with; none: not recorded (default: "
                        f"{FILE_NAME} beside {where})")  # fmt: skip
    parser.add_argument("--github-annotations", action="store_true",
                        help="print each mutant not caught as a GitHub workflow command "
                        "(::error file=...,line=...::)")  # fmt: skip


def _history(args: argparse.Namespace, reports: Path) -> Path | None:
    if args.score_history is None:
        return default_file(reports)
    return None if args.score_history.strip().lower() == "none" else Path(args.score_history)


def _chosen_thresholds(args: argparse.Namespace, recorded: Thresholds | None = None) -> Thresholds:
    """The flags over what was recorded (a merge: the shards' own) over the defaults; one line if low > high."""
    base = recorded or DEFAULT_THRESHOLDS
    chosen = Thresholds(
        high=base.high if args.threshold_high is None else args.threshold_high,
        low=base.low if args.threshold_low is None else args.threshold_low,
        breaking=base.breaking if args.threshold_break is _UNSET else args.threshold_break,
    )
    if chosen.low > chosen.high:
        raise SetupProblem(f"--threshold-low {chosen.low:g} is above --threshold-high {chosen.high:g}: "
                           "give a low threshold at or below the high one")  # fmt: skip
    return chosen


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    return OneLineParser(prog=prog, description=description, epilog=CODES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | int:
    """The arguments, or the exit code: 0 after --help, 2 (one line on stderr) for a bad one."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_SETUP


def _complain(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _say(line: str) -> None:
    print(line, flush=True)


def _merge_main(argv: list[str]) -> int:
    parser = _parser("python -m mutants merge", "Join shard reports into one.")
    parser.add_argument("out", type=Path, help="the merged report's directory")
    parser.add_argument("shards", type=Path, nargs="+", metavar="DIR", help="each shard's report directory")
    _thresholds(parser, merged=True)
    add_known_findings_options(parser)
    _release(parser, "OUT")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    try:
        known = known_findings_of(args)
    except SetupProblem as problem:
        _complain(f"python -m mutants merge: {problem}")
        return EXIT_SETUP
    code = merge(args.out, args.shards, say=_say, complain=_complain,
                 thresholds=lambda recorded: _chosen_thresholds(args, recorded), history=_history(args, args.out),
                 annotate=args.github_annotations)  # fmt: skip
    if code != EXIT_SETUP:
        code = gate(code, args.out, known, datetime.date.today(), _say, EXIT_SOME_MISSED)
        print(f"report: {args.out / 'report.html'}")
    return code


def _guarded(work: Callable[[], int], where: Path | None) -> int:
    """`work`'s code, or the code of how it failed: bad input 2, the machine refusing a write 74,
    Ctrl-C 130, SIGTERM 143, the runner's own failure 70 (one line, the traceback in a log): never 1."""
    from difftest.base.files import SURELY_ENVIRONMENTAL, write_traceback

    try:
        return work()
    except SetupProblem as problem:
        _complain(f"python -m mutants: {problem}")
        return EXIT_SETUP
    except EnvironmentFailure as problem:
        _complain(f"python -m mutants: {problem}")
        return EXIT_IOERR
    except KeyboardInterrupt as stop:
        by = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
        outcomes = None if where is None else where / "outcomes.json"
        what = f"; what was scored is in {outcomes}" if outcomes is not None and outcomes.is_file() else ""
        _complain(f"interrupted by {by}{what}")
        return EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
    except Exception as problem:
        if isinstance(problem, OSError) and problem.errno in SURELY_ENVIRONMENTAL:
            _complain(f"python -m mutants: the machine refused a write: {problem}")
            return EXIT_IOERR
        log = write_traceback(problem, where, None)
        _complain(f"python -m mutants: internal error: {type(problem).__name__}: {problem}; the traceback is in {log}")
        return EXIT_INTERNAL


def _run_parser() -> argparse.ArgumentParser:
    """The run's command line (not merge's): which mutants, the budget, the thresholds, the release options."""
    defaults = Budget()
    parser = _parser("python -m mutants", "Build and score the mutant catalogue (`merge OUT DIR...`: join shards).")
    parser.add_argument("--generated", action="store_const", dest="set", const="generated", default="catalogue",
                        help="score the generated mutants instead of the catalogue: the crate's from cargo-mutants "
                        "(installed on first use), the scripts' by mutation operators; triage in "
                        "mutants/triage.toml")  # fmt: skip
    parser.add_argument(
        "--set",
        choices=("catalogue", "generated"),
        help="which mutants: the catalogue (default) or the generated ones (--generated)",
    )
    parser.add_argument("--list", action="store_true", help="with --generated: print the generated mutants and exit")
    parser.add_argument("--triage", type=Path, default=None, metavar="FILE",
                        help="with --generated: the reviewed triage (default: mutants/triage.toml)")  # fmt: skip
    parser.add_argument("--only", nargs="+", metavar="ID", help="these mutants only (null run and canary still run)")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="campaigns at once (default: the cores)")
    parser.add_argument("--shard", type=_shard, metavar="K/N", help="the K-th of N shards (round-robin over ids)")
    parser.add_argument("--in-diff", metavar="REF", default=None,
                        help="only the mutants on lines that `git diff REF` adds or changes (a bad REF: "
                        "exit 2)")  # fmt: skip
    parser.add_argument("--incremental", action="store_true",
                        help="keep the recorded outcome of each mutant whose patched files, instrument (difftest's "
                        "sources, the executor it is compared with) and budget are unchanged (marked reused); "
                        "off by default, as in Stryker: a plain run scores every mutant")  # fmt: skip
    parser.add_argument("--examples", type=int, default=defaults.examples, help="histories per campaign")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--timeout", type=float, default=defaults.timeout_s, help="seconds per campaign")
    parser.add_argument("--grace", type=float, default=defaults.grace_s, help="seconds past --timeout before a kill")
    parser.add_argument("--no-restarts", action="store_true", help="histories never restart nor crash the servers")
    parser.add_argument("--no-production-size", action="store_true",
                        help="no history at production's size (a quick look; a release draws them)")  # fmt: skip
    parser.add_argument("--replicas", action="store_true",
                        help="a replica beside each server, compared with it after every segment")  # fmt: skip
    _thresholds(parser)
    add_known_findings_options(parser)
    _release(parser, "--reports")
    parser.add_argument("--reports", type=Path, default=None, help="default: reports/mutants-<time>")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    return parser


def _list_generated(generated: list[GeneratedMutant], triaged: dict[str, Triage]) -> int:
    """--generated --list: each generated mutant on a line, then how many of each kind and triaged."""
    for m in generated:
        verdict = f" [triaged {triaged[m.id].verdict}]" if m.id in triaged else ""
        _say(f"{m.id}\t{m.transition}\t{m.defect_class}\t{m.location}\t{m.why}{verdict}")
    _say(f"{len(generated)} generated mutants ({sum(m.executor == 'native' for m in generated)} native, "
         f"{sum(m.executor == 'lua' for m in generated)} lua), {len(triaged)} triaged")  # fmt: skip
    return 0


def _work(args: argparse.Namespace, reports: Path, budget: Budget) -> int:
    """The run itself, once the command line is read: the known findings and the generated set checked
    before anything is written, the run, the gate of known findings."""
    known = known_findings_of(args)  # checked before anything runs: a bad entry is one line, exit 2
    generated, triaged = None, None
    if args.generated:  # the generated set and its triage, checked before anything is written
        from mutants import generated as generation
        from mutants import triage

        generated = generation.generate(say=_complain)
        triaged = triage.load([m.id for m in generated], args.triage or triage.TRIAGE_FILE)
        if args.list:
            return _list_generated(generated, triaged)
    config = RunConfig(reports, budget, args.only, args.cache, jobs=args.jobs, shard=args.shard,
                       thresholds=_chosen_thresholds(args), history=_history(args, reports), reuse=args.incremental,
                       in_diff=args.in_diff, annotate=args.github_annotations, generated=generated,
                       triaged=triaged)  # fmt: skip
    code, _ = run(config, say=_say)
    code = gate(code, reports, known, datetime.date.today(), _say, EXIT_SOME_MISSED)
    if (reports / "outcomes.json").is_file():  # not when --in-diff left nothing to score
        print(f"report: {reports / 'report.html'} (outcomes: {reports / 'outcomes.json'})")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["merge"]:
        return _guarded(lambda: _merge_main(argv[1:]), None)
    args = _parse(_run_parser(), argv)
    if isinstance(args, int):
        return args
    if args.jobs < 1:
        _complain(f"python -m mutants: --jobs {args.jobs}: give at least 1")
        return EXIT_SETUP
    args.generated = args.set == "generated"
    if args.list and not args.generated:
        _complain("python -m mutants: --list lists the generated mutants: give --generated too")
        return EXIT_SETUP
    reports = args.reports or Path("reports") / f"mutants-{time.strftime('%Y%m%dT%H%M%S')}"
    budget = Budget(seed=args.seed, examples=args.examples, timeout_s=args.timeout, grace_s=args.grace,
                    restarts=not args.no_restarts, replicas=args.replicas,
                    sizes=not args.no_production_size)  # fmt: skip
    # Ctrl-C raises KeyboardInterrupt even where the runner was started with SIGINT ignored (a shell's
    # background job ignores it): as `difftest run` does, the handlers are the runner's own
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _terminate),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}  # fmt: skip
    try:
        return _guarded(lambda: _work(args, reports, budget), reports)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


if __name__ == "__main__":
    sys.exit(main())
