"""The history state machine: its histories are valid and depend on the seed alone, its rules follow
their weights and switches, and its TestCase (spread by pytest-xdist) replays what it draws."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any, ClassVar

import pytest
from hypothesis import Phase, settings

from difftest.history import format as hist
from difftest.history.format import Advance, BeginClaim, CallStep, EndClaim, History, Restart
from difftest.replay.replayer import Replayer
from executors.native.adapter import DEFAULT_MODULE
from strategies import engine
from strategies.machine import RULE_ORDER, RULE_WEIGHTS, QueueMachine, machine_settings, run_machine
from strategies.shape import HistoryShape
from strategies.upgrade import ran_via_scripts
from tests.helpers import class_steps

CALLS_ONLY = HistoryShape(restarts=False, crashes=False, corruption=False, users=False, interleaving=False,
                          malformed=False, transactions=False, notifications=False, memory=False,
                          replica_calls=False)  # fmt: skip


def drawn(shape: HistoryShape | None = None, examples: int = 60, seed: int = 7) -> list[History]:
    shape = shape or HistoryShape()
    made: list[History] = []
    run_machine(shape, made.append, machine_settings(examples, shape.max_steps, phases=[Phase.generate]), seed=seed)
    return made


def test_every_rule_has_a_weight_and_a_place_in_the_shrink_order() -> None:
    rules = {r.function.__name__ for r in QueueMachine.setup_state().rules}
    assert rules == set(RULE_WEIGHTS) == set(RULE_ORDER)
    assert RULE_ORDER["enqueue"] == 0  # a rule choice shrinks towards a plain ENQUEUE


def test_the_seed_alone_decides_the_histories() -> None:
    first, again, other = drawn(seed=11), drawn(seed=11), drawn(seed=12)
    assert [repr(h) for h in first] == [repr(h) for h in again]
    assert [repr(h) for h in first] != [repr(h) for h in other]
    assert len(first) == 60  # every valid run is a history: the budget counts them exactly


def test_every_run_the_machine_draws_is_a_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """No run is drawn to be thrown away: the engine's mutations, replayed unextended, overran (a
    third of the runs), and they are off while the machine runs (strategies/engine.py)."""
    runs = Counter[str]()
    teardown = QueueMachine.teardown

    def counted(machine: QueueMachine) -> None:
        runs["drawn"] += 1
        runs["overran"] += engine.cut_short()
        teardown(machine)

    monkeypatch.setattr(QueueMachine, "teardown", counted)
    histories = drawn(examples=150)
    assert len(histories) == 150 and runs == {"drawn": 150, "overran": 0}
    runs.clear()
    with engine.using(engine.AVAILABLE - {"mutations"}):  # the check can fail: with them, runs overrun
        assert len(drawn(examples=150)) == 150
    assert runs["overran"] > 0 and runs["drawn"] == 150 + runs["overran"]


def test_every_history_is_loadable_and_its_claims_paired() -> None:
    for history in drawn(examples=150):
        assert history.steps
        assert hist.loads(hist.dumps(history)) == history  # claims paired, users declared, bytes kept
        # advances joined (one wait for the clock, not two), but a step back stays one of its own
        assert not any(isinstance(a, Advance) and isinstance(b, Advance) and a.ms >= 0
                       for a, b in itertools.pairwise(history.steps))  # fmt: skip


def test_the_shape_switches_rules_off() -> None:
    for history in drawn(CALLS_ONLY, examples=60):
        assert all(isinstance(s, CallStep | Advance) for s in history.steps), history
        assert all(s.user is None for s in history.steps if isinstance(s, CallStep))
        assert history.users == {}


def test_the_weights_hold() -> None:
    """The transitions take about half the steps and restarts are rare, as the weights say: a uniform
    choice over the rules would spend a tenth of the steps on restarts and crashes."""
    kinds: Counter[str] = Counter()
    for history in drawn(examples=150):
        for step in history.steps:
            kinds[type(step).__name__] += 1
    total = sum(kinds.values())
    assert kinds["CallStep"] / total > 0.4
    assert 0 < kinds["Restart"] / total < 0.04


def test_the_classes_are_drawn() -> None:
    """Values other writers leave, wrong types, long-lived counters, bounds, permission users, split
    claims, crashes and malformed calls all appear, each class right before what reads it."""
    seen: set[str] = set()
    for history in drawn(examples=300):
        seen |= class_steps(history.steps)
        for step in history.steps:
            if isinstance(step, BeginClaim | EndClaim):
                seen.add("split")
            if isinstance(step, Restart):
                seen.add("crash" if step.crash else "restart")
        via = [ran_via_scripts(s) for s in history.steps if isinstance(s, CallStep | BeginClaim)]
        if via and via[0] and not via[-1]:
            seen.add("lua-era then the module")
        if any(not a and b for a, b in itertools.pairwise(via)):
            seen.add("scripts worker after a module call")
    assert seen == {"value", "wrongtype", "long", "acl", "bound", "split", "crash", "restart",
                    "lua-era then the module", "scripts worker after a module call"}  # fmt: skip


# The machine as a test of the suite: each TestCase below replays what the machine draws on a real
# server pair and fails on the first divergence, a short smoke of what `difftest run` does at length.
# They are separate test items, so `pytest -n` spreads them over its workers.


class ReplayedQueueMachine(QueueMachine):
    """The machine whose histories are replayed and judged as they are drawn."""

    shape: ClassVar[HistoryShape] = HistoryShape()
    replayer: ClassVar[Replayer | None] = None
    replayed: ClassVar[list[int]] = []

    def __init__(self) -> None:
        super().__init__(type(self).shape, self.judge)

    def judge(self, history: History) -> None:
        assert self.replayer is not None
        result = self.replayer.replay(history)
        type(self).replayed.append(len(history.steps))
        assert result.divergence is None, f"{result.divergence.reason}\n{hist.dumps(history)}"


def _replayed_case(name: str, shape: HistoryShape) -> Any:
    # (the class to run: with DIFFTEST_ENGINE_HOOKS=0, one that takes its draws from st.data())
    machine = engine.runnable(type(f"Replayed{name}Machine", (ReplayedQueueMachine,), {"shape": shape, "replayed": []}))

    class Case(machine.TestCase):  # type: ignore[name-defined,misc]
        pytestmark = pytest.mark.servers  # setUpClass starts a Replayer's pair
        settings = settings(max_examples=20, stateful_step_count=30, deadline=None, derandomize=True, database=None)

        @classmethod
        def setUpClass(cls) -> None:
            machine.replayer = Replayer(DEFAULT_MODULE).__enter__()

        @classmethod
        def tearDownClass(cls) -> None:
            if machine.replayer is not None:
                machine.replayer.__exit__(None, None, None)
            machine.replayer = None
            assert machine.replayed, "the machine replayed no history"

    Case.__name__ = Case.__qualname__ = f"TestReplayed{name}"
    return Case


TestReplayedDefault = _replayed_case("Default", HistoryShape())
TestReplayedCallsOnly = _replayed_case("CallsOnly", CALLS_ONLY)
TestReplayedNoRestarts = _replayed_case("NoRestarts", HistoryShape(restarts=False, crashes=False))


@pytest.mark.parametrize("case", [TestReplayedDefault, TestReplayedCallsOnly, TestReplayedNoRestarts])
def test_each_replayed_case_is_a_hypothesis_state_machine_test(case: Any) -> None:
    assert getattr(case.runTest, "is_hypothesis_test", False)
