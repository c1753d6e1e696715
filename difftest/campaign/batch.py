"""What every batch runner shares (the campaign's, the fuzz service's, the mutant runner's through the
campaign): Hypothesis's settings of one batch, the shrink's budget, the smallest failure, the last pass."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hypothesis import settings
    from hypothesis.database import ExampleDatabase

    from difftest.history.format import History, Step
    from difftest.replay.replayer import Replayer, ReplayResult


def machine_settings(size: int, max_steps: int, database: ExampleDatabase | None, reuse: bool = True) -> settings:
    """One batch's run of the machine (strategies/machine.py): `size` histories of at most `max_steps`
    steps, no deadline, every health check off, quiet (a failure is saved and printed by the runner),
    one failure reported; `reuse`: the example database's stored failures first."""
    from hypothesis import HealthCheck, Phase, Verbosity
    from hypothesis import settings as hypothesis_settings

    return hypothesis_settings(
        max_examples=size,
        deadline=None,
        database=database,
        stateful_step_count=max_steps,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
        phases=[*([Phase.reuse] if reuse else []), Phase.generate, Phase.target, Phase.shrink],
        verbosity=Verbosity.quiet,
    )


@dataclass
class ShrinkBudget:
    """How long a batch shrinks its first failure: at most `tries` replays after it and `seconds` of
    time (the guard of a history whose replays are slow); started at the first failure."""

    tries: int
    seconds: float
    used: int = 0
    deadline: float = field(default=0.0)

    def start(self) -> None:
        self.used, self.deadline = 0, time.monotonic() + self.seconds

    def take(self) -> bool:
        """One more replay of the shrink, or False when the budget is spent (the replay not taken)."""
        if self.used >= self.tries or time.monotonic() > self.deadline:
            return False
        self.used += 1
        return True


def failure_key(history: History) -> str:
    """What a batch's failing replays are cached by: Hypothesis replays a failure to confirm it (and at
    the end), and the cached verdict answers, whatever the shrink's budget did meanwhile (a history
    holds a dict: not hashable itself)."""
    return repr(history)


def smallest_failure(failures: Mapping[str, ReplayResult]) -> ReplayResult:
    """The shortest failing replay, the latest of equals (Hypothesis only moves on to smaller ones)."""
    return min(reversed(list(failures.values())), key=lambda replayed: len(replayed.history.steps))


def last_pass(replayer: Replayer, failed: ReplayResult, seconds: float | None = None) -> ReplayResult:
    """Delete the steps Hypothesis's minimal history can still do without; returns its replay.
    `seconds`: the time guard of a history with bulk steps."""
    from difftest.history.format import CallStep, step_to_json
    from difftest.history.shrink import minimise

    def kind(step: Step) -> tuple[str, str]:
        shape = step_to_json(step)
        return shape["op"], shape.get("verb", "")

    assert failed.divergence is not None  # a failing replay: Hypothesis's minimal history
    failing_kind = kind(failed.divergence.step)
    results: dict[int, ReplayResult] = {}

    def still_fails(candidate: History) -> bool:
        result = replayer.replay(candidate)
        if result.divergence is None or kind(result.divergence.step) != failing_kind:
            return False
        results[id(candidate)] = result
        return True

    # a history with bulk steps has the shrink's time guard too: each try replays thousands of calls
    # (one without keeps every try: its minimal history depends on nothing but the history)
    bulky = any(isinstance(step, CallStep) and step.bulk is not None for step in failed.history.steps)
    smaller = minimise(failed.history, still_fails, seconds=seconds if bulky else None)
    return results.get(id(smaller), failed)
