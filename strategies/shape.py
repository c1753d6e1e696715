"""What kinds of steps a history may hold: the switches a campaign, the benchmark and the tests give the machine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HistoryShape:
    """What kinds of steps a history may hold; the defaults reach every contract row. Each switch
    turns rules of the state machine (strategies/machine.py) off: `on_shape("<switch>")`."""

    max_steps: int = 40
    restarts: bool = True
    crashes: bool = True
    corruption: bool = True
    users: bool = True
    interleaving: bool = True
    malformed: bool = True
    upgrades: bool = True  # Lua-era prefixes and scripts workers
    transactions: bool = True  # MULTI/EXEC steps
    notifications: bool = True  # notify steps: keyspace events compared
    memory: bool = True  # memory limit steps
    replica_calls: bool = True  # calls to each server's read-only replica (not on an attached pair)
    sizes: bool = True  # production's size: bulk steps of up to thousands of calls, batches of as many
