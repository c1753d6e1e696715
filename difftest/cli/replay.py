"""`difftest replay`: one history or failure artifact replayed on a fresh pair, each step's verdict
printed; for an artifact, whether its recorded divergence reproduces."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from difftest.base.exits import (
    EXIT_DIVERGENCE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_IOERR,
    EXIT_MEANINGS,
    EXIT_NOT_REPRODUCED,
    EXIT_OK,
    EXIT_SETUP,
    EXIT_TERMINATED,
    OneLineParser,
)
from difftest.base.problems import SetupProblem
from difftest.cli.arguments import (
    backend_of,
    build_of,
    check_module,
    common_options,
    module_of,
    replicas_of,
    subcommand,
    warn,
)
from difftest.cli.rundirs import check_reports, new_run_dir
from difftest.history import format as hist
from difftest.replay.replayer import Replayer, ReplayResult


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


def replay_and_report(history: hist.History, args: argparse.Namespace, label: str,
                      recorded_replicas: bool | None = None) -> tuple[int, ReplayResult]:  # fmt: skip
    from difftest.replay.artifacts import save_divergence
    from difftest.replay.build import replay_command

    check_module(args.module)
    check_reports(args.reports)
    replicas = replicas_of(args, recorded_replicas)
    with Replayer(args.module, lua_scripts=args.lua_scripts, backend=backend_of(args),
                  replicas=replicas) as replayer:  # fmt: skip
        result = replayer.replay(history)
    print_result(result)
    if result.divergence is None:
        print("verdict: the two executors agree under the parity contract")
        return EXIT_OK, result
    print(f"verdict: DIVERGENCE at step {result.divergence.index}: {result.divergence.reason}")
    build = build_of(args)
    target = new_run_dir(args.reports, label) / "divergence"
    try:
        directory = save_divergence(result, target, build)
    except OSError as problem:
        from difftest.base.files import environment_failure, is_environmental

        if not is_environmental(problem):
            raise
        # the divergence outranks the lost file (exit 1); the history replayed is the input, still there
        print(f"artifact: NOT written ({problem.strerror})", flush=True)
        print(f"difftest: {environment_failure(problem, 'the artifact', target)}", file=sys.stderr)
        return EXIT_DIVERGENCE, result
    print(f"artifact: {directory} (reproduce: {replay_command(directory, build, replicas)})")
    return EXIT_DIVERGENCE, result


def command_replay(args: argparse.Namespace) -> int:
    from difftest.replay import build
    from difftest.replay.artifacts import EXPECT_FIELD, history_path

    path = history_path(args.file)
    if path != args.file and not path.exists():
        raise SetupProblem(f"{args.file} is a directory without history.jsonl: pass a history (.jsonl) or an "
                           "artifact's directory (reports/<run>/failures/batch-N)")  # fmt: skip
    # a malformed history, a FIFO, a device or an oversized file: one line before any server starts
    history, header = hist.load_with_header(path)
    expect = header.get(EXPECT_FIELD) if isinstance(header.get(EXPECT_FIELD), dict) else None
    found_on = header.get(build.BUILD_FIELD)
    recorded_build: dict[str, Any] = found_on if isinstance(found_on, dict) else {}
    # an artifact replays on the build it was found on, unless the command line says otherwise
    given_module = args.module
    args.module = build.recorded_module(recorded_build, args.module, warn)
    args.lua_scripts = build.recorded_scripts(recorded_build, args.lua_scripts, warn)
    module_of(args)
    if given_module is None and recorded_build.get("module_given"):
        args.module_given = True
    # an artifact replays with replicas as it was recorded (no "replicas": none); a plain history: the default
    recorded = None if expect is None else expect.get("replicas") is True
    with _recorded_valkey(args, recorded_build):
        code, result = replay_and_report(history, args, "replay", recorded)
    if expect is not None:
        same = (
            result.divergence is not None
            and expect.get("verdict") == "divergence"
            and expect.get("step") == result.divergence.index
            and expect.get("reason") == result.divergence.reason
        )
        print(f"recorded verdict: divergence at step {expect.get('step')}: {expect.get('reason')}"
              + (" (with replicas)" if expect.get("replicas") else ""))  # fmt: skip
        print("reproduced: " + ("yes, the same step and reason" if same else "NO"))
        if result.divergence is None:
            return EXIT_NOT_REPRODUCED  # the recorded divergence is gone: never "agree" (0) for a found defect
    return code


@contextlib.contextmanager
def _recorded_valkey(args: argparse.Namespace, recorded: dict[str, Any]) -> Iterator[None]:
    """The Valkey version an artifact was found on, when it was chosen (--valkey) and this command
    line chooses none; another version than recorded otherwise is one line of warning."""
    from difftest.servers import valkeys

    version = recorded.get("valkey")
    chosen = args.valkey is not None or os.environ.get(valkeys.ENVIRONMENT) or os.environ.get("DIFFTEST_VALKEY_SERVER")
    if not version or chosen or args.attach is not None:
        yield
        return
    if recorded.get("valkey_requested") and version in valkeys.SUPPORTED:
        args.valkey = version
        with valkeys.for_command(args):
            yield
        return
    now = valkeys.version_in_use()
    if now is not None and now != version:
        warn(f"difftest: warning: the artifact was found on Valkey {version}, this replay runs {now} "
              f"(pass --valkey {version} to replay on it)")  # fmt: skip
    yield


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    """`replay`'s page: the history or artifact to replay, and the options every replaying command has."""
    replay = subcommand(
        commands, "replay", "replay a history file or a failure artifact",
        """Replay one history (a .jsonl file) or a failure artifact (a directory under reports/) on a
        fresh server pair and print every step's verdict. For an artifact, also say whether it reproduces
        the recorded divergence: the same step and the same reason. An artifact replays on the build it
        recorded (module, Lua scripts, Valkey version, replicas) unless options say otherwise; a
        recorded module that changed since is one line of warning, one that is gone is refused. A
        history longer than MAX_STEPS steps, or a file past MAX_MIB MiB, is refused at load. A new
        divergence is saved as a new artifact; none is overwritten.""".replace("MAX_STEPS", f"{hist.MAX_STEPS:,}")
        .replace("MAX_MIB", str(hist.MAX_FILE_BYTES // 2**20)),
        [
            "difftest replay tests/histories/d1_pause_lands_between.jsonl",
            "difftest replay reports/<run>/failures/batch-3",
            "difftest replay reports/<run>/failures/batch-3 --lua-scripts fixed-scripts/   # is it fixed?",
        ],
        {EXIT_OK: EXIT_MEANINGS[EXIT_OK], EXIT_DIVERGENCE: "a divergence (for an artifact, a new one unless "
         "'reproduced: yes'): its artifact is under reports/", EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP],
         EXIT_NOT_REPRODUCED: "an artifact's recorded divergence did not reproduce: the executors agree on it now",
         EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL], EXIT_IOERR: EXIT_MEANINGS[EXIT_IOERR],
         EXIT_INTERRUPTED: EXIT_MEANINGS[EXIT_INTERRUPTED], EXIT_TERMINATED: EXIT_MEANINGS[EXIT_TERMINATED]},
    )  # fmt: skip
    replay.add_argument("file", type=Path, help="a history (.jsonl) or an artifact directory")
    common_options(replay)
