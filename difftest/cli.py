"""The difftest command line: `run` plays the main job on a fresh pair of embedded servers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from difftest.calls import Call
from difftest.problems import SetupProblem
from difftest.replies import Reply
from difftest.scenario import SCENARIO, Advance, Restart
from difftest.servers.local import ServerGroup
from difftest.snapshot import Entry, Snapshot, diff, take_snapshot

EXIT_OK = 0
EXIT_DIVERGENCE = 1
EXIT_SETUP = 2

LEASE_EPOCH = b"lease_epoch"


def _show(reply: Reply) -> str:
    return repr(reply)


def _set_aside_epochs(snapshot: Snapshot) -> tuple[Snapshot, dict[bytes, bytes]]:
    """The snapshot without `lease_epoch` fields, and those fields by key (contract row N1)."""
    epochs: dict[bytes, bytes] = {}
    cleaned: Snapshot = {}
    for key, entry in snapshot.items():
        if entry.kind == "hash" and isinstance(entry.value, dict) and LEASE_EPOCH in entry.value:
            epochs[key] = entry.value[LEASE_EPOCH]
            value = {f: v for f, v in entry.value.items() if f != LEASE_EPOCH}
            entry = Entry(entry.kind, value, entry.pttl)
        cleaned[key] = entry
    return cleaned, epochs


def run_scenario(module: Path) -> int:
    from executors.lua.adapter import LuaHost
    from executors.native.adapter import NativeModule

    with ServerGroup() as group:
        lua_server = group.add("lua")
        native_server = group.add("native", module=module)
        lua, native = LuaHost(lua_server.client), NativeModule(native_server.client)
        print(f"{'step':<44} {'lua':<34} native")
        for step in SCENARIO:
            if isinstance(step, Advance):
                group.advance(step.ms)
                print(f"advance {step.ms} ms -> t={group.clock.now_ms}")
                continue
            if isinstance(step, Restart):
                for server in (lua_server, native_server):
                    server.crash() if step.crash else server.restart()
                print("restart both servers")
                continue
            assert isinstance(step, Call)
            left, right = lua.call(step), native.call(step)
            label = f"{step.verb} {b' '.join(step.rest[step_keys(step):]).decode(errors='replace')}"
            print(f"{label[:44]:<44} {_show(left)[:34]:<34} {_show(right)}")
        lua_keys, _ = _set_aside_epochs(take_snapshot(lua_server.client))
        native_keys, epochs = _set_aside_epochs(take_snapshot(native_server.client))
        print("\nkeyspace, lua:")
        for key, entry in sorted(lua_keys.items()):
            print(f"  {key!r}: {entry.kind} {entry.value!r}")
        print(f"native lease_epoch fields: {len(epochs)}; run_id now {native_server.run_id}")
        differences = diff(lua_keys, native_keys)
        if differences:
            print(f"\n{len(differences)} keys differ (lease_epoch set aside):")
            for key, (a, b) in differences.items():
                print(f"  {key!r}\n    lua:    {a}\n    native: {b}")
            return EXIT_DIVERGENCE
        print("\nthe two keyspaces are equal, lease_epoch set aside")
        return EXIT_OK


def step_keys(call: Call) -> int:
    try:
        return int(call.numkeys)
    except ValueError:
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    from executors.native.adapter import DEFAULT_MODULE

    parser = argparse.ArgumentParser(prog="difftest", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the main job on embedded servers")
    run.add_argument("--module", type=Path, default=DEFAULT_MODULE, help="the native module (.so)")
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return run_scenario(args.module)
    except SetupProblem as problem:
        print(f"difftest: {problem}", file=sys.stderr)
        return EXIT_SETUP
    except KeyboardInterrupt:
        print("difftest: interrupted; servers stopped", file=sys.stderr)
        return 130
    return EXIT_OK
