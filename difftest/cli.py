"""The difftest command line: `run` plays the main job, `replay` reproduces a history or artifact."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from difftest import history as hist
from difftest.history import HistoryError
from difftest.problems import SetupProblem
from difftest.replay import Replayer, ReplayResult

EXIT_OK = 0  # the executors agree (and, with --require-coverage, every label was reached)
EXIT_DIVERGENCE = 1  # a divergence: its artifact is under reports/
EXIT_SETUP = 2  # bad set-up or input: one line on stderr says what and how to fix it
EXIT_COVERAGE = 3  # --require-coverage and a behaviour label was not reached
EXIT_INTERRUPTED = 130  # Ctrl-C: servers and temporary files removed, reports so far kept

DEFAULT_REPORTS = Path("reports")


def new_run_dir(reports: Path, label: str) -> Path:
    """reports/<UTC time>-<label>-<pid>: a fresh directory, so no run overwrites another."""
    stamp = dt.datetime.now(tz=dt.UTC).strftime("%Y%m%dT%H%M%S")
    directory = reports / f"{stamp}-{label}-{os.getpid()}"
    suffix = 0
    while directory.exists():
        suffix += 1
        directory = reports / f"{stamp}-{label}-{os.getpid()}-{suffix}"
    return directory


def print_result(result: ReplayResult) -> None:
    print(f"{'#':>3} {'step':<52} {'verdict':<10} {'lua':<30} native")
    for record in result.records:
        step = json.dumps(hist.step_to_json(record.step), ensure_ascii=False)
        verdict = record.verdict.rule or record.verdict.kind
        if record.verdict.kind == "divergence":
            verdict = "DIVERGED"
        print(f"{record.index:>3} {step[:52]:<52} {verdict:<10} {repr(record.lua_reply)[:30]:<30} "
              f"{repr(record.native_reply)[:40]}")  # fmt: skip
    rules = ", ".join(f"{rule}×{n}" for rule, n in sorted(result.rules_hit.items())) or "none"
    print(f"\n{len(result.records)} steps compared in {result.elapsed_s * 1000:.0f} ms; "
          f"allowed differences: {rules}")  # fmt: skip


def replay_and_report(history: hist.History, args: argparse.Namespace, label: str) -> tuple[int, ReplayResult]:
    from difftest.artifacts import save_divergence

    with Replayer(args.module, lua_scripts=args.lua_scripts, backend=backend_of(args)) as replayer:
        result = replayer.replay(history)
    print_result(result)
    if result.divergence is None:
        print("verdict: the two executors agree under the parity contract")
        return EXIT_OK, result
    print(f"verdict: DIVERGENCE at step {result.divergence.index}: {result.divergence.reason}")
    directory = save_divergence(result, new_run_dir(args.reports, label) / "divergence")
    print(f"artifact: {directory} (reproduce: difftest replay {directory})")
    return EXIT_DIVERGENCE, result


def command_scenario(args: argparse.Namespace) -> int:
    from difftest.scenario import SCENARIO

    code, _ = replay_and_report(SCENARIO, args, "scenario")
    return code


def command_run(args: argparse.Namespace) -> int:
    import random

    from difftest import coverage, reports
    from difftest.campaign import CampaignConfig, run_campaign
    from difftest.exampledb import DEFAULT_DIRECTORY, ENVIRONMENT, describe
    from difftest.progress import CampaignProgress, print_table, summary_table

    if not args.module.is_file():
        raise SetupProblem(f"module {args.module} does not exist: build it with 'make setup' or pass --module PATH")
    if args.attach is not None:
        args.workers = 1  # an attached pair is one pair: one worker replays on it
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    shard = _shard(args.shard)
    directory = new_run_dir(args.reports, "run")
    examples = None if args.seconds is not None and args.examples is None else (args.examples or 2000)
    # --database, else $DIFFTEST_DATABASE, else the local directory; --no-database: none at all
    database = None if args.no_database else (args.database or os.environ.get(ENVIRONMENT) or str(DEFAULT_DIRECTORY))
    config = CampaignConfig(
        seed=seed, module=args.module, reports=directory, examples=examples, seconds=args.seconds,
        workers=args.workers, lua_scripts=args.lua_scripts, restarts=not args.no_restarts,
        database=database,
        backend=backend_of(args), shard=shard,
    )  # fmt: skip
    budget = f"{examples} histories" if examples is not None else f"{args.seconds:g} s"
    part = f" (shard {args.shard}: batches {shard[0] - 1}, {shard[0] - 1 + shard[1]}, ...)" if args.shard else ""
    print(f"campaign: seed {seed}, {budget}{part}, {args.workers} worker(s); reports in {directory}", flush=True)
    # progress goes to stderr: a live bar on a terminal, a plain line now and then in a log
    with CampaignProgress(sys.stderr, examples, args.seconds if examples is None else None) as progress:
        result = run_campaign(config, on_progress=progress)
    reports.write(result, directory)
    print()
    print_table(summary_table(result, seed, describe(database) if database else "none"), sys.stdout)
    print()
    print(coverage.table(result.labels))
    for failure in result.failures:
        print(f"\nDIVERGENCE (batch {failure.batch}, {failure.steps} steps): {failure.reason}")
        print(f"artifact: {failure.artifact} (reproduce: difftest replay {failure.artifact})")
    print(
        f"\nreports: {directory} (report.html, summary.json, coverage.txt, junit.xml); "
        f"reproduce: difftest run --seed {seed}"
        + (f" --examples {examples}" if examples is not None else "")
        + (f" --shard {args.shard}" if args.shard else "")
    )
    if result.interrupted:
        return EXIT_INTERRUPTED
    if result.failures:
        return EXIT_DIVERGENCE
    if args.require_coverage and coverage.missing(result.labels):
        print(f"coverage incomplete: {', '.join(coverage.missing(result.labels))}", file=sys.stderr)
        return EXIT_COVERAGE
    return EXIT_OK


def command_replay(args: argparse.Namespace) -> int:
    from difftest.artifacts import expected_verdict, history_path

    path = history_path(args.file)
    history = hist.load(path)
    code, result = replay_and_report(history, args, "replay")
    expect = expected_verdict(path)
    if expect is not None:
        same = (
            result.divergence is not None
            and expect.get("verdict") == "divergence"
            and expect.get("step") == result.divergence.index
            and expect.get("reason") == result.divergence.reason
        )
        print(f"recorded verdict: divergence at step {expect.get('step')}: {expect.get('reason')}")
        print("reproduced: " + ("yes, the same step and reason" if same else "NO"))
    return code


def _shard(text: str | None) -> tuple[int, int]:
    from difftest.shards import parse_shard

    if text is None:
        return 1, 1
    try:
        return parse_shard(text)
    except ValueError as problem:
        raise SetupProblem(str(problem)) from None


def _summary_of(directory: Path) -> dict[str, object]:
    from difftest.reports import SUMMARY

    path = directory / SUMMARY
    if not path.is_file():
        raise SetupProblem(f"{directory} has no {SUMMARY}: pass run directories that difftest run wrote")
    try:
        document: dict[str, object] = json.loads(path.read_text())
    except (OSError, ValueError) as problem:
        raise SetupProblem(f"{path} cannot be read: {problem}") from None
    return document


def command_merge(args: argparse.Namespace) -> int:
    """`difftest merge OUT DIR...`: one report from the run directories of a campaign's shards."""
    from difftest import reports
    from difftest.shards import ShardMismatch, merge

    if args.out.exists() and any(args.out.iterdir()):
        raise SetupProblem(f"{args.out} is not empty: merge into a new directory (no report is overwritten)")
    parts = [(directory, _summary_of(directory)) for directory in args.dirs]
    try:
        document = merge(parts, args.out)
    except ShardMismatch as problem:
        raise SetupProblem(str(problem)) from None
    reports.write_document(document, args.out)
    print(f"merged {len(parts)} shard(s): seed {document['seed']}, {document['histories']} histories, "
          f"{document['steps']} steps; verdict: {document['verdict']}")  # fmt: skip
    for failure in document["divergences"]:
        print(f"DIVERGENCE (batch {failure['batch']}, {failure['steps']} steps): {failure['reason']}")
        print(f"artifact: {failure['artifact']} (reproduce: difftest replay {failure['artifact']})")
    print(f"reports: {args.out} (report.html, summary.json, coverage.txt, junit.xml)")
    if document["verdict"] == "divergence":
        return EXIT_DIVERGENCE
    if document["verdict"] == "interrupted":
        return EXIT_INTERRUPTED
    if args.require_coverage and document["coverage_missing"]:
        print(f"coverage incomplete: {', '.join(document['coverage_missing'])}", file=sys.stderr)
        return EXIT_COVERAGE
    return EXIT_OK


def command_report(args: argparse.Namespace) -> int:
    """`difftest report DIR`: report.html again from a run's summary.json (or a mutation run's
    outcomes.json, whose page mutants/report.py renders)."""
    from difftest import reports

    directory: Path = args.dir
    if (directory / "outcomes.json").is_file():
        import importlib

        try:
            # mutants/ renders its own page; looked up by name, as that package is owned apart
            mutation_report = importlib.import_module("mutants.report")
        except ImportError as missing:
            raise SetupProblem(f"{directory} is a mutation run, but mutants/report.py cannot load: {missing}") from None
        try:
            document = json.loads((directory / mutation_report.OUTCOMES).read_text())
        except ValueError as problem:
            raise SetupProblem(f"{directory / mutation_report.OUTCOMES} cannot be read: {problem}") from None
        page = directory / mutation_report.HTML
        page.write_text(mutation_report.html_page(document), encoding="utf-8")
    else:
        _summary_of(directory)  # one clear line if it is missing or broken
        page = reports.rerender(directory)
    print(f"report: {page}")
    return EXIT_OK


def command_servers(args: argparse.Namespace) -> int:
    """`difftest servers up|down|build`: the long-lived pair of docker-compose.yml."""
    from difftest.servers import compose

    settings = compose.settings_from(os.environ, args.project)
    if args.action == "build":
        images = compose.build(settings, args.module)
        print(f"images: lua {images['lua']}, native {images['native']} (tagged as docker-compose.yml's defaults)")
        print(f"clock: {settings.clock_dir / compose.CLOCK_FILE}; now 'docker compose up -d' starts the pair")
        return EXIT_OK
    if args.action == "up":
        addresses = compose.up(settings, args.module)
        print(f"servers: compose project {settings.project} is up")
        for service, address in addresses.items():
            print(f"  {service:<7} {address}")
        print(f"  clock   {settings.clock_dir / compose.CLOCK_FILE}")
        named = "" if settings.project == compose.DEFAULT_PROJECT else f" {settings.project}"
        down = f"difftest servers down{named and ' --project' + named}"
        print(f"replay on them: difftest run --attach{named}; remove them: {down}")
        return EXIT_OK
    left = compose.down(settings)
    if left:
        raise SetupProblem(f"compose down left {', '.join(left)}: remove them with docker rm / network rm / volume rm")
    print(f"servers: compose project {settings.project} removed (containers, network, data volumes)")
    return EXIT_OK


MUTANTS_HELP = ("-h", "--help")


def command_mutants(argv: Sequence[str]) -> int:
    """`difftest mutants ...`: the catalogue runner, every argument passed on unchanged."""
    from mutants.__main__ import main as mutants_main

    rest = list(argv)
    if rest[:1] != ["merge"] and set(rest) & set(MUTANTS_HELP):
        # this command's paragraph, examples and exit codes, then the runner's own options
        print(subcommands(build_parser())["mutants"].format_help())
        print("The catalogue runner's own options (the same as python -m mutants --help):\n", flush=True)
        rest = ["--help"]
    try:
        return mutants_main(rest)
    except SystemExit as leaving:  # a runner that leaves through argparse's exit still gives main() a code
        return leaving.code if isinstance(leaving.code, int) else int(leaving.code is not None)


def _paragraph(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), width=92, break_on_hyphens=False)


EXIT_MEANINGS = {
    EXIT_OK: "the two executors agree under the parity contract",
    EXIT_DIVERGENCE: "a divergence: its artifact is under reports/",
    EXIT_SETUP: "bad set-up or input: one line on stderr says what and how to fix it",
    EXIT_COVERAGE: "--require-coverage and a behaviour label was not reached",
    EXIT_INTERRUPTED: "interrupted: servers and temporary files removed",
}
MUTANTS_EXITS = {  # mutants/README.md: the runner's own codes, passed through unchanged
    0: "every mutant caught",
    1: "some mutant missed, timed out, unviable or errored (merge: shards incomplete)",
    2: "void: the null run found a divergence, or the canary was not caught",
    3: "bad arguments (unknown mutant id, bad --shard or --jobs; merge: shards that do not fit)",
    130: "interrupted: campaigns stopped, servers removed, the report so far written",
}


def _epilog(examples: Sequence[str], codes: dict[int, str]) -> str:
    lines = ["examples:", *(f"  {example}" for example in examples), "", "exit codes:"]
    lines += [f"  {code:<4} {meaning}" for code, meaning in codes.items()]
    return "\n".join(lines)


def _subcommand(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    description: str,
    examples: Sequence[str],
    codes: dict[int, str],
    add_help: bool = True,
) -> argparse.ArgumentParser:
    """A subcommand whose --help teaches: one paragraph, examples, and its exit codes."""
    return commands.add_parser(name, help=summary, description=_paragraph(description),
                               epilog=_epilog(examples, codes), formatter_class=argparse.RawDescriptionHelpFormatter,
                               add_help=add_help)  # fmt: skip


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser by name (for help texts, and for checks that a command is real)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def backend_of(args: argparse.Namespace) -> str:
    """The ServerGroup backend: --attach [PROJECT] means the running compose pair, whatever --backend."""
    from difftest.servers.compose import attach_backend

    return args.backend if args.attach is None else attach_backend(args.attach or None)


def _common(parser: argparse.ArgumentParser) -> None:
    from executors.native.adapter import DEFAULT_MODULE

    parser.add_argument(
        "--module",
        type=Path,
        default=DEFAULT_MODULE,
        help="the native module to load (default: this checkout's release build)",
    )
    parser.add_argument(
        "--lua-scripts",
        type=Path,
        default=None,
        help="a directory of <verb>.lua scripts to use instead of executors/lua",
    )
    parser.add_argument(
        "--backend",
        choices=("local", "docker"),
        default="local",
        help="embedded server processes (default) or containers of images built here",
    )
    parser.add_argument(
        "--attach",
        nargs="?",
        const="",
        default=None,
        metavar="PROJECT",
        help="replay on the running compose pair (difftest servers up) instead of starting servers: "
        "restarts and crashes restart and kill its containers, its keyspace is flushed first",
    )
    parser.add_argument("--reports", type=Path, default=DEFAULT_REPORTS,
                        help="where run directories and failure artifacts go (default: reports/)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="difftest",
        description=_paragraph(
            """Differential testing of the EMQ job queue's two executors: the retired Lua scripts and the
            native Valkey module. Generated queue histories are replayed on a Lua-script server and a
            native-module server side by side, on one frozen clock; after every step the replies and the
            whole keyspaces are judged under the parity contract, and a divergence is shrunk to a minimal
            history saved as an artifact that `difftest replay` reproduces."""
        ),
        epilog=_epilog(
            [
                "difftest run                                  # 2,000 histories on local servers",
                "difftest run --seconds 1800 --backend docker  # half an hour, each server in a container",
                "difftest run --seed 42 --examples 400         # reproduce a run exactly",
                "difftest replay reports/<run>/failures/batch-3",
                "difftest scenario",
                "difftest mutants --jobs 2                     # score the catalogue of planted defects",
                "difftest COMMAND --help                       # what a command does, its options and codes",
            ],
            EXIT_MEANINGS,
        )
        + "\n(difftest mutants passes on the mutant runner's own codes: see difftest mutants --help)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = _subcommand(
        commands, "run", "the main job: a campaign of generated histories on server pairs",
        """Generate queue histories with Hypothesis and replay each on a Lua-script server and a
        native-module server, in seeded batches spread over worker processes (a server pair each). The
        budget is a number of histories (--examples) or of seconds (--seconds). The first divergence
        stops the run; it is shrunk to a minimal history, saved under reports/<run>/failures/ and kept
        in Hypothesis's example database (a local directory, or a Valkey server that many machines
        share), which replays it first next time. Progress goes to stderr: a live bar on a terminal, a
        plain line every 30 s otherwise. summary.json, coverage.txt and junit.xml go to reports/<run>/.""",
        [
            "difftest run --examples 400 --seed 7",
            "difftest run --seconds 1800 --backend docker",
            "difftest run --lua-scripts my-scripts/ --module my-build/libemq_native.so",
            "difftest run --seconds 3600 --database valkey://10.0.0.5:6379/2   # one of many machines",
            "DIFFTEST_DATABASE=valkey://10.0.0.5:6379/2 difftest run",
            "difftest run --no-database --require-coverage",
        ],
        EXIT_MEANINGS,
    )  # fmt: skip
    _common(run)
    run.add_argument("--examples", type=int, default=None, help="histories to run (default 2000)")
    run.add_argument("--seconds", type=float, default=None, help="run for this long instead of a count")
    run.add_argument("--seed", type=int, default=None, help="reproduce a run exactly (default: random, printed)")
    run.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                     help="worker processes, each with its own server pair pinned to a core")  # fmt: skip
    run.add_argument("--no-restarts", action="store_true", help="generate no restarts or crashes")
    database = run.add_mutually_exclusive_group()
    database.add_argument("--database", metavar="SPEC", default=None,
                          help="Hypothesis's example database: a directory, or valkey://HOST:PORT[/DB] "
                          "shared by many machines (default: $DIFFTEST_DATABASE, else "
                          ".hypothesis/difftest-examples)")  # fmt: skip
    database.add_argument("--no-database", action="store_true", help="keep no Hypothesis example database")
    run.add_argument("--require-coverage", action="store_true",
                     help=f"exit {EXIT_COVERAGE} unless every behaviour label was reached")  # fmt: skip
    run.add_argument("--shard", metavar="K/N", default=None,
                     help="run only shard K of N of the seed's batches (batches b with b %% N == K-1); "
                     "join the shards' run directories with difftest merge")  # fmt: skip
    scenario = _subcommand(
        commands, "scenario", "the scripted scenario: every transition, D1, D6, D7",
        """Replay the scripted scenario, a hand-written history that walks every transition of the queue
        and the decided differences D1, D6 and D7, on a fresh server pair, and print each step's verdict.
        A divergence is saved as an artifact under reports/.""",
        ["difftest scenario", "difftest scenario --backend docker", "difftest scenario --lua-scripts my-scripts/"],
        {c: EXIT_MEANINGS[c] for c in (EXIT_OK, EXIT_DIVERGENCE, EXIT_SETUP, EXIT_INTERRUPTED)},
    )  # fmt: skip
    _common(scenario)
    replay = _subcommand(
        commands, "replay", "replay a history file or a failure artifact",
        """Replay one history (a .jsonl file) or a failure artifact (a directory under reports/) on a
        fresh server pair and print every step's verdict. For an artifact, also say whether it reproduces
        the recorded divergence: the same step and the same reason. A new divergence is saved as a new
        artifact; none is overwritten.""",
        [
            "difftest replay tests/histories/d1_pause_lands_between.jsonl",
            "difftest replay reports/<run>/failures/batch-3",
            "difftest replay reports/<run>/failures/batch-3 --lua-scripts fixed-scripts/   # is it fixed?",
        ],
        {c: EXIT_MEANINGS[c] for c in (EXIT_OK, EXIT_DIVERGENCE, EXIT_SETUP, EXIT_INTERRUPTED)},
    )  # fmt: skip
    replay.add_argument("file", type=Path, help="a history (.jsonl) or an artifact directory")
    _common(replay)
    merge = _subcommand(
        commands, "merge", "join the run directories of a campaign's shards into one report",
        """Join the run directories that `difftest run --shard K/N` wrote (on one machine or many) into
        one report in OUT: summary.json, coverage.txt, junit.xml and report.html. The merged verdict,
        first divergent batch, histories, steps and coverage counts equal those of the unsharded run
        with the same seed and budget (one worker, no stored failures in the example database).
        Shards that do not fit together (another seed or budget, a shard twice or missing, a batch
        never finished) are refused with one line and exit code 2.""",
        [
            "difftest run --seed 7 --examples 4000 --shard 1/2   # on machine A",
            "difftest run --seed 7 --examples 4000 --shard 2/2   # on machine B",
            "difftest merge reports/merged-7 reports/<run-on-A> reports/<run-on-B>",
        ],
        {EXIT_OK: EXIT_MEANINGS[EXIT_OK], EXIT_DIVERGENCE: "a divergence: the first divergent batch's artifact, "
         "in its shard's directory", EXIT_SETUP: "shards that do not fit together, or bad input: one line on stderr",
         EXIT_COVERAGE: EXIT_MEANINGS[EXIT_COVERAGE], EXIT_INTERRUPTED: "a shard of a time budget was interrupted"},
    )  # fmt: skip
    merge.add_argument("out", type=Path, help="a new directory for the merged report")
    merge.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="the shards' run directories")
    merge.add_argument("--require-coverage", action="store_true",
                       help=f"exit {EXIT_COVERAGE} unless every behaviour label was reached")  # fmt: skip
    report = _subcommand(
        commands, "report", "render report.html again from a run directory",
        """Render DIR/report.html again from DIR/summary.json: for a run, a merge of shards, or a run
        from before report.html existed. For a mutation run's directory (it holds outcomes.json), the
        mutation report's page is rendered instead. Nothing else in DIR changes.""",
        ["difftest report reports/<run>", "difftest report reports/mutants-<time>"],
        {EXIT_OK: "report.html written", EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP]},
    )  # fmt: skip
    report.add_argument("dir", type=Path, help="a run directory (summary.json) or a mutation run's (outcomes.json)")
    from executors.native.adapter import DEFAULT_MODULE

    servers = _subcommand(
        commands, "servers", "the long-lived compose pair (docker-compose.yml): up, down, build",
        """Manage the pair of docker-compose.yml: a Lua-script server and a native-module server on fixed
        loopback ports (DIFFTEST_LUA_PORT, default 7701; DIFFTEST_NATIVE_PORT, default 7702), on a private
        network, with data volumes and the shared frozen clock. `up` builds the two images here (FROM
        scratch, no registry), runs docker compose up -d, waits until both answer PING and prints their
        addresses; `run`, `replay` and `scenario` with --attach then replay on it. `down` removes the
        containers, the network and the volumes. `build` only builds the images and the clock file, so
        that a plain `docker compose up -d` works (make setup runs it when a Docker engine answers).""",
        [
            "difftest servers up",
            "difftest servers up --module my-build/libemq_native.so   # refresh the native server",
            "difftest run --attach --seconds 600",
            "DIFFTEST_LUA_PORT=8801 DIFFTEST_NATIVE_PORT=8802 difftest servers up --project mine",
            "difftest servers down",
        ],
        {EXIT_OK: "done", EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP],
         EXIT_INTERRUPTED: "interrupted: a half-made pair removed"},
    )  # fmt: skip
    servers.add_argument("action", choices=("up", "down", "build"), help="what to do with the pair")
    servers.add_argument("--module", type=Path, default=DEFAULT_MODULE,
                         help="the native image's module (default: this checkout's release build)")  # fmt: skip
    servers.add_argument("--project", default=None,
                         help="the compose project (default: $COMPOSE_PROJECT_NAME, else difftest)")  # fmt: skip
    mutants = _subcommand(
        commands, "mutants", "score the catalogue of planted defects (python -m mutants)",
        """Score the mutant catalogue: build each planted defect of mutants/catalogue/ into its own copy
        of an executor, run a seeded campaign against it, and report which were caught. A null run on
        the unmodified pair and a canary mutant come first and must pass, or the report is void. Every
        argument after `mutants` goes unchanged to the catalogue runner (python -m mutants), including
        `merge OUT DIR...`, which joins the reports of shards run on several machines. Reports go to
        reports/mutants-<time>/ (report.html, outcomes.json, mutation-report.json, junit.xml); see
        mutants/README.md.""",
        [
            "difftest mutants                                   # null run, canary, the whole catalogue",
            "difftest mutants --only ID [ID ...]",
            "difftest mutants --jobs 2 --examples 300 --reports reports/mutants",
            "difftest mutants --shard 1/3                       # this machine's third",
            "difftest mutants merge reports/all reports/shard-1 reports/shard-2 reports/shard-3",
        ],
        MUTANTS_EXITS, add_help=False,
    )  # fmt: skip
    # main() hands everything after `mutants` to the runner before argparse sees it (argparse cannot
    # pass on options it does not know); this entry is for the command list and --help
    mutants.add_argument("args", nargs=argparse.REMAINDER, help="the runner's arguments (difftest mutants --help)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mutants"]:
        return command_mutants(argv[1:])  # the runner parses its own arguments and has its own codes
    args = build_parser().parse_args(argv)
    try:
        handler = {"run": command_run, "scenario": command_scenario, "replay": command_replay,
                   "servers": command_servers, "merge": command_merge,
                   "report": command_report}[args.command]  # fmt: skip
        return handler(args)
    except (SetupProblem, HistoryError) as problem:
        print(f"difftest: {problem}", file=sys.stderr)
        return EXIT_SETUP
    except KeyboardInterrupt:
        print("difftest: interrupted; servers and temporary files removed", file=sys.stderr)
        return EXIT_INTERRUPTED
