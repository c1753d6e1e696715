"""The command line's side of the fuzzing service: `difftest fuzz`, `fuzz status` and `fuzz --dashboard-only`."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.base.exits import EXIT_DIVERGENCE, EXIT_INTERRUPTED, EXIT_KNOWN, EXIT_OK, EXIT_TERMINATED, EXIT_VOID
from difftest.base.problems import SetupProblem

if TYPE_CHECKING:
    from difftest.fuzz.store import Store
    from difftest.fuzz.worker import FuzzConfig


@contextlib.contextmanager
def database_of(args: argparse.Namespace) -> Iterator[str]:
    """--database (or $DIFFTEST_DATABASE) when it names a Valkey server; else this machine's own store
    in --state (a valkey-server this command keeps there, or the one a running service keeps)."""
    from difftest.campaign.exampledb import ENVIRONMENT, check_spec, is_server
    from difftest.fuzz.service import local_store

    spec = args.database or os.environ.get(ENVIRONMENT)
    origin = "--database" if args.database else ENVIRONMENT
    if spec:
        check_spec(spec, origin)
        if not is_server(spec):
            raise SetupProblem(f"{origin} {spec}: difftest fuzz keeps its records in a Valkey database; give "
                               "valkey://HOST:PORT[/DB], or leave it out for a store of this machine's own "
                               "(in --state)")  # fmt: skip
        yield spec
        return
    with local_store(args.state) as url:
        yield url


def command_fuzz(args: argparse.Namespace) -> int:
    from difftest.fuzz.store import Store

    if args.action in ("export", "import"):
        return _carry(args)
    if args.files:
        raise SetupProblem(f"difftest fuzz{' ' + args.action if args.action else ''} takes no file "
                           f"({args.files[0]}): only `fuzz export FILE` and `fuzz import FILE...` do")  # fmt: skip
    if args.action == "status":
        with database_of(args) as database:
            store = Store(database)
            store.check()
            try:
                print(status_text(store, args.reports))
            finally:
                store.close()
        return EXIT_OK
    if args.dashboard_only:
        return _dashboard_only(args)
    return _fuzz(args)


def _carry(args: argparse.Namespace) -> int:
    """`fuzz export FILE`: the store's corpus to a file; `fuzz import FILE...`: files' corpora into the store."""
    from difftest.campaign.exampledb import ENVIRONMENT
    from difftest.fuzz.corpusfile import export_corpus, import_corpus, read_corpus
    from difftest.fuzz.store import Store

    files: list[Path] = args.files
    if args.action == "export" and len(files) != 1:
        raise SetupProblem(f"difftest fuzz export takes one file, the corpus's path ({len(files)} given): "
                           "e.g. difftest fuzz export reports/fuzz/corpus.jsonl")  # fmt: skip
    if args.action == "import" and not files:
        raise SetupProblem("difftest fuzz import takes the corpus files to add: e.g. difftest fuzz import corpus.jsonl")
    reads = []
    for path in files if args.action == "import" else []:  # every file checked before the store is touched
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as problem:
            reason = problem.strerror if isinstance(problem, OSError) and problem.strerror else str(problem)
            raise SetupProblem(f"corpus file {path}: {reason}: give a file `difftest fuzz export` wrote") from None
        reads.append((path, read_corpus(text, f"corpus file {path}")))
    with database_of(args) as database:
        # the local store's URL has a new port each time: name its state directory instead
        where = _shown(database) if args.database or os.environ.get(ENVIRONMENT) else f"the store in {args.state}"
        store = Store(database)
        try:
            store.check()
            if args.action == "export":
                held = export_corpus(store, files[0], where)
                print(f"fuzz: exported the corpus of {where}, {held:,} histories, to {files[0]}")
                return EXIT_OK
            for path, read in reads:
                added = import_corpus(store, read)
                refused = ""
                if read.refused:
                    more = ", ..." if len(read.refused) > 1 else ""
                    refused = f"; {len(read.refused)} refused, this difftest cannot load them ({read.refused[0]}{more})"
                print(
                    f"fuzz: imported {path} into {where}: {added:,} new histories, "
                    f"{len(read.entries) - added:,} already held{refused}; corpus now {store.corpus_size():,}"
                )
        finally:
            store.close()
    return EXIT_OK


def _dashboard_only(args: argparse.Namespace) -> int:
    from difftest.fuzz.dashboard import start_dashboard
    from difftest.fuzz.store import Store

    with database_of(args) as database:
        store = Store(database)
        store.check()
        store.close()
        server = start_dashboard(database, args.dashboard or 0, args.reports)
        print(f"fuzz: dashboard on http://127.0.0.1:{server.server_address[1]}/ (from {_shown(database)}); "
              "Ctrl-C or SIGTERM stops it", flush=True)  # fmt: skip
        stopped = threading.Event()
        received: list[int] = []

        def note(signum: int, _: object) -> None:
            received.append(signum)
            stopped.set()

        previous = {number: signal.signal(number, note) for number in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stopped.wait(0.5):
                pass
        finally:
            for number, before in previous.items():
                signal.signal(number, before)
            server.shutdown()
            server.server_close()
    print("fuzz: dashboard stopped", flush=True)
    return EXIT_TERMINATED if received and received[0] == signal.SIGTERM else EXIT_INTERRUPTED


def _shown(database: str) -> str:
    from difftest.campaign.exampledb import describe

    return describe(database)


def _fuzz(args: argparse.Namespace) -> int:
    import datetime

    from difftest.findings.known import DIVERGENCE, known_findings_of

    # a bad entry is one line now, before any server starts; a long service reads today's acceptances once
    accepted = known_findings_of(args).accepted(DIVERGENCE, datetime.date.today())
    native = args.native_coverage or args.guidance != "off"
    module = _module_to_load(args, native)
    _check_before_servers(args)
    run_dir = (args.reports / "fuzz" / f"service-{os.getpid()}").absolute()
    with database_of(args) as database, _lua_lines(args.lua_coverage, run_dir) as lua:
        config = _config(args, database, module, accepted, lua, (run_dir / "profiles") if native else None)
        print(f"fuzz: service {config.service}, {args.workers} worker(s) {_budget_words(args)}; database "
              f"{_shown(database)}; guidance {args.guidance}; findings in {args.reports / 'fuzz' / 'findings'}",
              flush=True)  # fmt: skip
        started = time.monotonic()
        stopped_by, mine = _serve_in(config, run_dir, None if args.no_dashboard else (args.dashboard or 0))
        from difftest.fuzz.store import Store

        store = Store(database)
        try:
            print(status_text(store, args.reports), flush=True)
        finally:
            store.close()
    return _verdict(stopped_by, mine, time.monotonic() - started)


def _check_before_servers(args: argparse.Namespace) -> None:
    """The clock library built and the scripts checked: a problem is one line before any server starts."""
    from difftest.servers.compiled import clock_library

    clock_library()
    if args.lua_scripts is not None:
        from difftest.replay.replayer import check_scripts

        check_scripts(args.lua_scripts)


def _config(args: argparse.Namespace, database: str, module: Path, accepted: frozenset[str], lua: bool,
            profiles: Path | None) -> FuzzConfig:  # fmt: skip
    from difftest.fuzz.service import service_name
    from difftest.fuzz.worker import FuzzConfig

    build = args.build  # the command line checked the module and recorded the build (difftest/cli/fuzz.py)
    return FuzzConfig(database=database, module=module, reports=args.reports.absolute(), build=build,
                      service=service_name(), workers=args.workers, lua_scripts=args.lua_scripts,
                      seconds=args.seconds, histories=args.histories, restarts=not args.no_restarts,
                      sizes=not args.no_production_size, accepted=accepted,
                      native_counters=profiles is not None, lua_lines=lua, guidance=args.guidance,
                      class_corpus=not args.no_class_corpus, seed=args.seed, profiles=profiles)  # fmt: skip


def _budget_words(args: argparse.Namespace) -> str:
    if args.seconds is not None:
        return f"for {args.seconds:g} s"
    if args.histories is not None:
        return f"for {args.histories:,} histories"
    return "until stopped"


def _serve_in(config: FuzzConfig, run_dir: Path, dashboard: int | None) -> tuple[int, dict[str, int]]:
    """The service run with its files under `run_dir`, which goes when it ends (what it holds is its own)."""
    from difftest.fuzz.service import serve

    try:
        return serve(config, sys.stdout, dashboard)
    finally:
        with contextlib.suppress(OSError):
            for leftover in sorted(run_dir.rglob("*"), reverse=True):
                leftover.rmdir() if leftover.is_dir() else leftover.unlink()
            run_dir.rmdir()


def _module_to_load(args: argparse.Namespace, native: bool) -> Path:
    """The module the workers load: --module (or the release build), or with coverage on, this
    checkout's module built instrumented."""
    if not native:
        module: Path = args.module
        return module
    from difftest.coverage.native import build as coverage_build
    from difftest.coverage.native import find_tools

    if args.module_given:
        raise SetupProblem("--native-coverage and --guidance build and load this checkout's module, "
                           "instrumented: drop --module")  # fmt: skip
    return coverage_build(find_tools())


def _verdict(stopped_by: int, mine: dict[str, int], elapsed: float) -> int:
    """The service's last line and its exit code: a signal's, else a divergence, void or agree."""
    how = {int(signal.SIGTERM): "stopped by SIGTERM", int(signal.SIGINT): "stopped by Ctrl-C"}.get(
        stopped_by, "budget spent"
    )
    met = mine["findings"] + mine["met_again"]
    known = mine.get("met_known", 0)  # only findings the known-findings file accepts
    # the corpus's histories, replayed first, are compared too (their steps count, the budget's
    # histories do not): a service that spent its budget on them compared something, it is not void
    compared = mine["histories"] or mine["steps"]
    verdict = "divergence" if met else ("known" if known else "agree" if compared else "void")
    print(f"fuzz: {verdict}: {how} after {elapsed:,.0f} s; this service compared {mine['histories']:,} new "
          f"histories ({mine['steps']:,} steps, the corpus's replays included), found {mine['findings']} new "
          f"finding(s), met known ones {mine['met_again']} time(s), accepted ones {known} time(s); "
          f"{mine['replaced']} worker(s) replaced",
          flush=True)  # fmt: skip
    if stopped_by:
        return EXIT_TERMINATED if stopped_by == signal.SIGTERM else EXIT_INTERRUPTED
    if met:
        return EXIT_DIVERGENCE
    if known:
        return EXIT_KNOWN
    return EXIT_OK if compared else EXIT_VOID


@contextlib.contextmanager
def _lua_lines(on: bool, run_dir: Path) -> Iterator[bool]:
    """--lua-coverage: the workers' Lua servers run the instrumented scripts (difftest/coverage/lua.py)."""
    if not on:
        yield False
        return
    from executors.lua.instrument import measuring

    with measuring(run_dir):
        yield True


def status_text(store: Store, reports: Path | None) -> str:
    """What the dashboard shows, for a terminal."""
    from difftest.fuzz.dashboard import RECENT_S, status_document

    document = status_document(store, reports)
    totals, coverage = document["totals"], document["coverage"]
    lines = [f"fuzz status ({document['format']}, database {document['database']}, "
             f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(document['at']))})",
             f"  histories {totals.get('histories', 0):,}, steps {totals.get('steps', 0):,}, "
             f"{document['histories_per_min']:,} histories/min over the last minute",
             f"  reached: {len(coverage['labels'])} behaviour labels, {coverage['native']:,} native counters"
             + (f" of {coverage['native_total']:,}" if coverage.get("native_total") else "")
             + f", {coverage['lua']:,} Lua lines; corpus {document['corpus']:,} histories",
             f"  findings {len(document['findings'])} (met again {totals.get('met_again', 0):,} times; accepted "
             f"ones met {totals.get('met_known', 0):,} times), "
             f"pending {document['pending']}"]  # fmt: skip
    for finding in document["findings"]:
        lines.append(f"  FINDING {finding.get('signature')} ({finding.get('described', '')}): "
                     f"{finding.get('reason', '')}; {finding.get('steps', '?')} steps, met {finding.get('seen', 1)} "
                     "time(s)")  # fmt: skip
        lines.append(f"    reproduce: {finding.get('reproduce_here') or finding.get('reproduce', '(being recorded)')}")
    live = {k: v for k, v in document["workers"].items() if v["alive"]}
    lines.append(f"  workers: {len(live)} live of {len(document['workers'])} known")
    host = socket.gethostname()
    for name, record in document["workers"].items():
        if record["alive"] or (record.get("host") == host and record["age_s"] < RECENT_S):
            lines.append(f"    {name}: {record['state'] if record['alive'] else 'stopped'}; "
                         f"{record.get('histories', 0):,} histories, {record.get('findings', 0)} finding(s), "
                         f"heard {record['age_s']:.0f} s ago")  # fmt: skip
    return "\n".join(lines)


def add_arguments(fuzz: argparse.ArgumentParser, workers_type: Callable[[str], int],
                  histories_type: Callable[[str], int], seconds_type: Callable[[str], float],
                  default_workers: int) -> None:  # fmt: skip
    from difftest.fuzz.service import STATE_DIR

    fuzz.add_argument("action", nargs="?", choices=("status", "export", "import"),
                      help="status: print the service's figures (what the dashboard shows) and exit; export FILE: "
                      "write the corpus to FILE; import FILE...: add the corpora of files export wrote (the "
                      "nightly carries the corpus between nights so)")  # fmt: skip
    fuzz.add_argument("files", nargs="*", type=Path, metavar="FILE", help="export's file, or import's files")
    fuzz.add_argument("--database", metavar="URL", default=None,
                      help="the shared Valkey database (valkey://HOST:PORT[/DB]) that every service of the fuzzing "
                      "service joins: its records and Hypothesis's example database (default: $DIFFTEST_DATABASE, "
                      "else a store of this machine's own in --state)")  # fmt: skip
    fuzz.add_argument(
        "--state",
        type=Path,
        default=STATE_DIR,
        help=f"without --database: where this machine's store keeps its data (default {STATE_DIR})",
    )
    fuzz.add_argument(
        "--workers",
        type=workers_type,
        default=default_workers,
        help="worker processes, each with its own server pair (default: one per core)",
    )
    fuzz.add_argument("--seconds", type=seconds_type, default=None, help="stop after this long (default: never)")
    fuzz.add_argument("--histories", type=histories_type, default=None,
                      help="stop after this service generated this many histories (default: never)")  # fmt: skip
    fuzz.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the batches' seeds derive from it (default: random); findings replay by artifact",
    )
    fuzz.add_argument("--no-restarts", action="store_true", help="generate no restarts or crashes")
    fuzz.add_argument("--no-production-size", action="store_true",
                      help="generate no history at production's size (bulk steps of thousands of calls)")  # fmt: skip
    from difftest.findings.known import add_known_findings_options

    add_known_findings_options(fuzz)
    _coverage_arguments(fuzz)
    _dashboard_arguments(fuzz)


def _coverage_arguments(fuzz: argparse.ArgumentParser) -> None:
    """What the workers measure (native counters, Lua lines), what steers them, what they replay first."""
    fuzz.add_argument("--native-coverage", action="store_true",
                      help="run the coverage build of the module and read its counters after every history "
                      "(the dashboard's native counters)")  # fmt: skip
    fuzz.add_argument(
        "--lua-coverage", action="store_true", help="run instrumented Lua scripts and read the lines each history ran"
    )
    fuzz.add_argument("--guidance", choices=("off", "reach", "rare"), default="off",
                      help="steer generation with Hypothesis's target(): reach scores a history by what it touched "
                      "(native counters, Lua lines, contract and sweep labels), rare weighs each thing by how few "
                      "histories touched it before; implies --native-coverage (default: off, see docs/fuzz.md for "
                      "the measurements)")  # fmt: skip
    fuzz.add_argument(
        "--no-class-corpus",
        action="store_true",
        help="do not replay the class corpus first (one short history per behaviour label)",
    )


def _dashboard_arguments(fuzz: argparse.ArgumentParser) -> None:
    """Where the live dashboard is served, or that it is not, or that it alone is."""
    fuzz.add_argument(
        "--dashboard",
        type=int,
        metavar="PORT",
        default=None,
        help="the dashboard's port on 127.0.0.1 (default: a free one, printed)",
    )
    fuzz.add_argument("--no-dashboard", action="store_true", help="serve no dashboard")
    fuzz.add_argument(
        "--dashboard-only",
        action="store_true",
        help="only serve the dashboard of the shared database (no workers), until stopped",
    )
