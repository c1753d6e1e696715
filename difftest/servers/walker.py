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


def module_walk_wanted() -> bool:
    """Whether sides walk with DIFFTEST.WALK where the server has it (DIFFTEST_WALKER=lua: never)."""
    choice = os.environ.get(CHOICE_VARIABLE, "module")
    if choice not in ("module", "lua"):
        raise SetupProblem(f"{CHOICE_VARIABLE}={choice}: use 'module' (the default) or 'lua'")
    return choice == "module"
