"""The history generator: every draw is a valid history, and the decoding is pure and stable."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from difftest.history import format as hist
from difftest.history.format import Advance, BeginClaim, EndClaim, Restart
from strategies.histories import SEED_VALUES, SEED_WIDTH, HistoryShape, build_history, histories
from tests.helpers import class_steps

SEEDS = st.lists(st.tuples(*[st.integers(0, SEED_VALUES - 1)] * SEED_WIDTH), max_size=60)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SEEDS)
def test_any_seed_list_decodes_to_a_loadable_history(seeds: list[tuple[int, ...]]) -> None:
    history = build_history(seeds)
    assert hist.loads(hist.dumps(history)) == history  # claims paired, users declared, bytes kept
    assert build_history(seeds) == history  # pure


@settings(max_examples=200, deadline=None)
@given(SEEDS, st.data())
def test_deleting_a_seed_still_decodes(seeds: list[tuple[int, ...]], data: st.DataObject) -> None:
    if seeds:
        index = data.draw(st.integers(0, len(seeds) - 1))
        shorter = build_history(seeds[:index] + seeds[index + 1 :])
        assert hist.loads(hist.dumps(shorter)) == shorter


@settings(max_examples=100, deadline=None)
@given(histories(HistoryShape(restarts=False, crashes=False, users=False, interleaving=False)))
def test_shape_switches_features_off(history: hist.History) -> None:
    assert not any(isinstance(s, Restart | BeginClaim | EndClaim) for s in history.steps)
    assert history.users == {}
    assert not any(
        isinstance(a, Advance) and isinstance(b, Advance)
        for a, b in zip(history.steps, history.steps[1:], strict=False)
    )


def test_zero_seeds_shrink_to_plain_calls() -> None:
    history = build_history([(0,) * SEED_WIDTH] * 3)
    assert [hist.step_to_json(s)["op"] for s in history.steps] == ["call"] * 3
    assert all(s.call.verb == "ENQUEUE" for s in history.steps)  # type: ignore[union-attr]


def test_the_classes_are_drawn() -> None:
    """Values other writers leave, wrong types, long-lived counters, bounds and permission users all
    appear in generated histories, each right before the transition that reads them."""
    import random

    rng = random.Random(18)
    seen: set[str] = set()
    for _ in range(400):
        seeds = [tuple(rng.randrange(SEED_VALUES) for _ in range(SEED_WIDTH)) for _ in range(30)]
        seen |= class_steps(build_history(seeds).steps)
    assert seen == {"value", "wrongtype", "long", "acl", "bound"}
