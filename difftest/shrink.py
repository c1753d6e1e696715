"""A last pass over a failing history after Hypothesis has shrunk it: delete what still fails without.

Hypothesis shrinks the choices behind a history; what it leaves can hold steps that only mattered
to those choices. This pass deletes steps (a split claim's begin and end together) and keeps a
deletion when the history still diverges at a step of the same kind. Each try is a replay, so
the pass has a budget of tries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from difftest.history import BeginClaim, EndClaim, History, Step, well_paired

Predicate = Callable[[History], bool]


def _without(steps: tuple[Step, ...], start: int, stop: int) -> tuple[Step, ...] | None:
    """The steps without [start, stop), or None if that would break a split claim's pairing."""
    removed = steps[start:stop]
    kept = steps[:start] + steps[stop:]
    begun = {s.worker for s in removed if isinstance(s, BeginClaim)}
    ended = {s.worker for s in removed if isinstance(s, EndClaim)}
    if begun != ended:
        # remove the partner too, when it lies outside the chunk
        lonely = begun ^ ended
        kept = tuple(s for s in kept if not (isinstance(s, BeginClaim | EndClaim) and s.worker in lonely))
    return kept if kept != steps and well_paired(kept) else None


def minimise(history: History, still_fails: Predicate, max_tries: int = 200) -> History:
    """ddmin over steps, chunks halving from the whole length down to single steps."""
    best = history
    tries = 0
    chunk = max(1, len(best.steps) // 2)
    while chunk >= 1 and tries < max_tries:
        start = 0
        progressed = False
        while start < len(best.steps) and tries < max_tries:
            steps = _without(best.steps, start, start + chunk)
            if steps is None or not steps:
                start += chunk
                continue
            candidate = replace(best, steps=steps)
            tries += 1
            if still_fails(candidate):
                best, progressed = candidate, True
            else:
                start += chunk
        if not progressed:
            chunk //= 2
    return best
