"""Upgrade histories: the module takes over from the Lua scripts on a live keyspace.

How a generator marks a step as run through the scripts on the native server: set the step's
`executor` to `difftest.history.format.SCRIPTS` (the string "lua"), on a `CallStep` or a `BeginClaim`:

    CallStep(call, user, worker, executor=SCRIPTS)      # or via_scripts(step)
    BeginClaim(worker, call, user, executor=SCRIPTS)    # its EndClaim runs where the begin did

On the Lua server nothing changes. On the native server the step is played by the Lua host (the
guards, the `paused?` read, EVALSHA of the same scripts, loaded there after every start) instead of
the module's command, so the rows it writes carry no `lease_epoch`. In the history's JSON the step
holds `"executor": "lua"`; absent means each server's own executor. Any other step (advance,
restart, raw, end) has no executor.

Two shapes, both judged against the all-scripts server under the contract (docs/contract-decisions.md,
"Upgrades and the mixed fleet"):

- **a Lua-era prefix** (`lua_era`): every call so far ran through the scripts on both servers, and
  the module takes over from the next step on. Rows in every set (pending, active, delayed, dead,
  done) lack `lease_epoch`; an expired lease the scripts took is D7's "taken by the Lua scripts
  before the upgrade" (a module SWEEP exempts it, the scripts count it).
- **a mixed fleet** (`via_scripts` on single steps after module calls): during a rolling upgrade
  some workers still call the scripts on the native server while others call the module.

The coverage labels (`difftest/coverage/upgrades.py`): `upgrade:lua-prefix`, `upgrade:lua-row-in:<set>`,
`upgrade:mixed-fleet`, `upgrade:d7-lua-lease`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from difftest.history.format import SCRIPTS, BeginClaim, CallStep, Step


def via_scripts(step: Step) -> Step:
    """The step run through the Lua scripts on the native server too (a call or a split claim's
    begin; any other step is returned as it is: an end runs where its begin did). A call to a
    replica is returned as it is too: it runs as the admin through each server's own executor, and
    a history that says otherwise does not load (its artifact would not replay)."""
    if isinstance(step, CallStep) and step.target is not None:
        return step
    if isinstance(step, CallStep | BeginClaim) and step.executor != SCRIPTS:
        return replace(step, executor=SCRIPTS)
    return step


def lua_era(steps: Sequence[Step]) -> list[Step]:
    """The steps built so far as a Lua-era prefix: every call (and split claim) in them ran through
    the scripts on both servers; the steps the generator appends next run on the module. Clock
    advances, restarts and raw writes are kept as they are (a restart in the prefix is the restart
    that loads the module: D7's other cause)."""
    return [via_scripts(step) for step in steps]


def ran_via_scripts(step: Step) -> bool:
    """Whether the step is marked to run through the scripts on the native server."""
    return isinstance(step, CallStep | BeginClaim) and step.executor == SCRIPTS


__all__ = ["SCRIPTS", "lua_era", "ran_via_scripts", "via_scripts"]
