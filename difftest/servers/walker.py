"""The walker module (servers/walker-crate, `DIFFTEST.WALK`): where its build lands, and which walk a side sends.

Every server the harness starts loads it beside whatever it runs: the replay's keyspace walk after
every step is then one native command (about a quarter of the Lua walker's cost on the server),
answering exactly what the Lua walker (`snapshot.CANONICAL_WALK_SCRIPT`) answers. A server without
it (an attached compose pair started from an older file) is walked by the script, as is every server
with DIFFTEST_WALKER=lua (to compare the two).
"""

from __future__ import annotations

import os
from pathlib import Path

from difftest.base.problems import SetupProblem

CRATE_DIR = Path(__file__).resolve().with_name("walker-crate")
# built into the native executor's target directory (difftest/servers/walker-crate/.cargo/config.toml)
WALKER_MODULE = CRATE_DIR.parents[2] / "executors" / "native" / "target" / "release" / "libdifftest_walker.so"
WALK_COMMAND = b"DIFFTEST.WALK"
CHOICE_VARIABLE = "DIFFTEST_WALKER"


def walker_module() -> Path:
    """The walker module's build; a missing one is a set-up problem (one line: how to build it)."""
    if not WALKER_MODULE.is_file():
        raise SetupProblem(
            f"the walker module {WALKER_MODULE} is not built: run 'make setup' "
            f"(or 'cargo build --release' in {CRATE_DIR})"
        )
    return WALKER_MODULE


# DIFFTEST_WALKER: "module" (the default) walks with DIFFTEST.WALK, tracked: a step's walk answers
# the keys written since the walk before it, once the history's database holds TRACK_FROM keys
# (below that a whole walk costs as little); "whole" walks the whole keyspace after every step with
# the module (the reference the tracked walk is checked against); "lua" with the Lua walker script
WALKER_CHOICES = ("module", "whole", "lua")
TRACK_FROM_VARIABLE = "DIFFTEST_TRACK_FROM"
# keys in the history's database from which a walk is tracked: below it a whole walk of the default
# mix's keyspaces (a few dozen keys) costs the server about what a tracked one does, and needs no
# verification at the history's end
TRACK_FROM = 256
TRACKED_WALK = b"SINCE"
VERIFY_WALK = (WALK_COMMAND, b"VERIFY")  # names the keys whose rows differ from what the walks reported
FORGET_WALK = (WALK_COMMAND, b"FORGET")  # the next tracked walk is a whole one


def walker_choice() -> str:
    """DIFFTEST_WALKER's value (one of WALKER_CHOICES), checked."""
    choice = os.environ.get(CHOICE_VARIABLE, "module")
    if choice not in WALKER_CHOICES:
        raise SetupProblem(f"{CHOICE_VARIABLE}={choice}: use 'module' (the default: tracked walks), "
                           "'whole' (a whole walk after every step) or 'lua' (the Lua walker script)")  # fmt: skip
    return choice


def module_walk_wanted() -> bool:
    """Whether sides walk with DIFFTEST.WALK where the server has it (DIFFTEST_WALKER=lua: never)."""
    return walker_choice() != "lua"


def tracked_walk() -> tuple[bytes, ...] | None:
    """The tracked walk's command (DIFFTEST_WALKER=module), or None: a whole walk after every step."""
    if walker_choice() != "module":
        return None
    given = os.environ.get(TRACK_FROM_VARIABLE, str(TRACK_FROM))
    if not given.isdigit():
        raise SetupProblem(f"{TRACK_FROM_VARIABLE}={given}: give a number of keys (0: track every walk)")
    return (WALK_COMMAND, TRACKED_WALK, given.encode())
