"""Hypothesis draws that depend on the seed alone, not on which of this project's modules are loaded.

Hypothesis (6.1xx) now and then draws a "local constant": a literal harvested from every module of the
project that happens to be imported at that moment. Which modules those are differs between the
first batch of a process and the next (lazy imports), between `difftest run`, a mutant's child
process and pytest, and between machines: the same seed drew different histories. A campaign, its
shards on many machines and its mutant runs must draw the same histories from the same seed, so the
harvest is switched off here (the global constants, which are fixed, stay). There is no public
setting for it; the pinned Hypothesis version in pyproject.toml and the determinism tests in
tests/test_campaign.py guard this reach into its internals.
"""

from __future__ import annotations

from hypothesis.internal.conjecture import providers
from hypothesis.internal.constants_ast import Constants

_NONE = Constants()


def _no_local_constants() -> Constants:
    return _NONE


def draw_from_the_seed_alone() -> None:
    """Idempotent; called on import of the history strategy."""
    if getattr(providers, "_get_local_constants", None) is not _no_local_constants:
        providers._get_local_constants = _no_local_constants
        providers.CONSTANTS_CACHE.cache.clear()  # pools already built held local constants
