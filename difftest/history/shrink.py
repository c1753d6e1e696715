"""A last pass over a failing history after Hypothesis has shrunk it: delete what still fails without.

Hypothesis shrinks the choices behind a history; what it leaves can hold steps that only mattered
to those choices. This pass deletes steps (a split claim's begin and end together) and keeps a
deletion when the history still diverges at a step of the same kind. Each try is a replay, so
the pass has a budget of tries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from difftest.history.format import BeginClaim, Bulk, CallStep, EndClaim, History, Step, bulk_run, well_paired

Predicate = Callable[[History], bool]


def _partners(steps: tuple[Step, ...], indices: range) -> set[int]:
    """Where the split-claim partners of the steps at indices stand: a begin's next end of its
    worker, an end's last begin before it (a begin left open at the history's end has none)."""
    partners: set[int] = set()
    for i in indices:
        step = steps[i]
        if isinstance(step, BeginClaim):
            ahead = range(i + 1, len(steps))
            partners.update(_first_of(steps, ahead, step.worker, EndClaim, BeginClaim))
        elif isinstance(step, EndClaim):
            behind = range(i - 1, -1, -1)
            partners.update(_first_of(steps, behind, step.worker, BeginClaim, EndClaim))
    return partners


def _first_of(
    steps: tuple[Step, ...],
    order: range,
    worker: str,
    wanted: type[BeginClaim] | type[EndClaim],
    stop: type[BeginClaim] | type[EndClaim],
) -> list[int]:
    """The index of the first `wanted` step of worker in that order, unless a `stop` of it comes first."""
    for j in order:
        step = steps[j]
        if isinstance(step, wanted) and step.worker == worker:
            return [j]
        if isinstance(step, stop) and step.worker == worker:
            return []
    return []


def _without(steps: tuple[Step, ...], start: int, stop: int) -> tuple[Step, ...] | None:
    """The steps without [start, stop) and the split-claim partners of what that removes (only
    those: removing every step of a worker lost a needed claim when one begin was left open), or
    None if that would break a split claim's pairing."""
    chunk = range(start, min(stop, len(steps)))
    gone = set(chunk) | _partners(steps, chunk)
    kept = tuple(step for i, step in enumerate(steps) if i not in gone)
    return kept if kept != steps and well_paired(kept) else None


def _bulks(steps: tuple[Step, ...]) -> list[tuple[int, int]]:
    """Where each bulk step stands whole: (its first call's index, its calls)."""
    return [(at, count) for at in range(len(steps)) if (count := bulk_run(steps, at))]


def fewer_bulk_calls(history: History, still_fails: Predicate, max_tries: int = 40,
                     seconds: float | None = None) -> History:  # fmt: skip
    """Each bulk step cut to the fewest of its first calls that still fails (halving, then a binary
    search): the deletions after it go step by step, and a bulk of thousands of calls would spend
    every try of the pass on its calls."""
    best, tries = history, 0
    deadline = None if seconds is None else time.monotonic() + seconds
    for at, count in reversed(_bulks(history.steps)):  # (the last first: the earlier ones keep their index)
        first = best.steps[at]
        assert isinstance(first, CallStep) and first.bulk is not None
        low, high = 0, count  # fails with high calls; not known below
        while high - low > 1 and tries < max_tries and (deadline is None or time.monotonic() < deadline):
            middle = (low + high) // 2
            calls = Bulk(first.bulk.template, middle).steps(first.executor)
            candidate = replace(best, steps=(*best.steps[:at], *calls, *best.steps[at + high :]))
            tries += 1
            if still_fails(candidate):
                best, high = candidate, middle
            else:
                low = middle
    return best


def _units(steps: tuple[Step, ...]) -> list[tuple[int, int]]:
    """The steps as what the pass deletes, [first, stop) each: a bulk's calls one unit, any other
    step one (a chunk through a bulk's middle would leave calls the failure needs one by one)."""
    bulks = dict(_bulks(steps))
    units, at = [], 0
    while at < len(steps):
        stop = at + bulks.get(at, 1)
        units.append((at, stop))
        at = stop
    return units


def minimise(history: History, still_fails: Predicate, max_tries: int = 200, seconds: float | None = None) -> History:
    """Each bulk cut to its fewest calls (`fewer_bulk_calls`), then ddmin over the steps (a bulk one
    of them), chunks halving from the whole length down to single steps; within `max_tries` replays
    and `seconds`."""
    deadline = None if seconds is None else time.monotonic() + seconds
    best = fewer_bulk_calls(history, still_fails, seconds=seconds) if _bulks(history.steps) else history
    tries = 0
    units = _units(best.steps)
    chunk = max(1, len(units) // 2)
    while chunk >= 1 and tries < max_tries and (deadline is None or time.monotonic() < deadline):
        start = 0
        progressed = False
        while start < len(units) and tries < max_tries and (deadline is None or time.monotonic() < deadline):
            steps = _without(best.steps, units[start][0], units[min(start + chunk, len(units)) - 1][1])
            if steps is None or not steps:
                start += chunk
                continue
            candidate = replace(best, steps=steps)
            tries += 1
            if still_fails(candidate):
                best, progressed = candidate, True
                units = _units(best.steps)
            else:
                start += chunk
        if not progressed:
            chunk //= 2
    return best
