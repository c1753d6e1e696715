"""The engine hooks (strategies/engine.py): the one module that reaches into Hypothesis's internals,
each hook switchable, and the machine valid on the public API alone (DIFFTEST_ENGINE_HOOKS=0, or a
Hypothesis other than the pinned one)."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import itertools
from pathlib import Path

import hypothesis
import pytest
from hypothesis import Phase

from difftest.base.problems import SetupProblem
from difftest.history import format as hist
from difftest.history.format import Advance, CallStep, History, RawWrite
from strategies import engine
from strategies.machine import START_MS, QueueMachine, machine_settings, run_machine
from strategies.shape import HistoryShape

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("difftest", "strategies", "mutants", "bench")
ENGINE = "strategies/engine.py"


def drawn(examples: int = 40, seed: int = 7, shape: HistoryShape | None = None) -> list[History]:
    shape = shape or HistoryShape()
    made: list[History] = []
    run_machine(shape, made.append, machine_settings(examples, shape.max_steps, phases=[Phase.generate]), seed=seed)
    return made


def imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """Each import of the file: its line, the module, the names taken from it (none: the module)."""
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return found


def internal(module: str, names: list[str]) -> bool:
    """Whether an import reaches Hypothesis's internals: `hypothesis.internal`, a private module
    (`hypothesis.strategies._internal`), or a private name."""
    parts = module.split(".")
    if parts[0] != "hypothesis":
        return False
    if parts[1:2] == ["internal"] or any(part.startswith("_") for part in parts[1:]):
        return True
    return any(name.startswith("_") or name == "internal" for name in names)


def python_files() -> list[Path]:
    return sorted(path for top in SCANNED for path in (ROOT / top).rglob("*.py"))


def test_the_engine_module_alone_imports_hypothesis_internals() -> None:
    reaching = {
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in python_files()
        for line, module, names in imports(path)
        if internal(module, names) and path.relative_to(ROOT).as_posix() != ENGINE
    }
    assert reaching == set()
    # the check can fail: it sees the engine's own imports
    engine_imports = imports(ROOT / ENGINE)
    assert any(internal(module, names) for _, module, names in engine_imports)


def test_the_scan_sees_every_form_of_reaching_in() -> None:
    assert internal("hypothesis.internal.conjecture.data", ["ConjectureData"])
    assert internal("hypothesis", ["internal"])
    assert internal("hypothesis.strategies._internal.core", ["DataObject"])
    assert internal("hypothesis.stateful", ["_min_steps"])
    assert not internal("hypothesis.stateful", ["RuleBasedStateMachine", "rule"])
    assert not internal("hypothesis", ["strategies"])


def test_the_generator_shares_no_private_name() -> None:
    """A name with a leading underscore stays in its module: no module takes one from strategies/,
    and strategies/ and bench/ take none from anywhere (what another needs has a public name)."""
    project = {"difftest", "strategies", "mutants", "bench", "executors"}
    private = {
        f"{path.relative_to(ROOT)}:{line}: {module}.{name}"
        for path in [*python_files(), *sorted((ROOT / "tests").glob("*.py"))]
        for line, module, names in imports(path)
        if module.split(".")[0] in project
        and (module.startswith("strategies") or path.relative_to(ROOT).parts[0] in ("strategies", "bench"))
        for name in names
        if name.startswith("_") and not name.startswith("__")
    }
    assert private == set()


def test_a_hypothesis_other_than_the_pinned_one_takes_no_hook() -> None:
    assert engine.available(engine.PINNED) == frozenset(engine.HOOKS)
    assert engine.available("6.999.0") == frozenset()
    assert engine.available(hypothesis.__version__) == engine.AVAILABLE
    with pytest.raises(ValueError, match="unavailable"), engine.using({"no-such-hook"}):
        pass


def test_the_variable_switches_every_hook_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert engine.wanted({}) == engine.wanted({engine.VARIABLE: ""}) == engine.AVAILABLE
    assert engine.wanted({engine.VARIABLE: "1"}) == engine.AVAILABLE
    assert engine.wanted({engine.VARIABLE: "0"}) == frozenset()
    with pytest.raises(SetupProblem, match="DIFFTEST_ENGINE_HOOKS='off' is neither 0 nor 1"):
        engine.wanted({engine.VARIABLE: "off"})
    monkeypatch.setenv(engine.VARIABLE, "0")
    assert engine.hooks() == frozenset()
    with engine.using(engine.AVAILABLE):
        assert engine.hooks() == engine.AVAILABLE  # the benchmark's switch outranks the variable


def test_the_public_api_alone_draws_valid_histories_that_depend_on_the_seed_alone() -> None:
    """The fallback: Hypothesis's own rule choice, st.data() draws, its mutations and constants."""
    with engine.using(()):
        first, again, other = drawn(seed=11), drawn(seed=11), drawn(seed=12)
        assert engine.runnable(QueueMachine) is not QueueMachine  # the rules take st.data() draws
    assert [repr(h) for h in first] == [repr(h) for h in again]
    assert [repr(h) for h in first] != [repr(h) for h in other]
    assert len(first) == 40  # every run kept is a history, one that stopped before a rule too
    assert sum(not h.steps for h in first) < 5
    for history in first:
        assert hist.loads(hist.dumps(history)) == history  # claims paired, users declared, bytes kept
        # (one advance after another only where a restart stepped the clock back first: not merged)
        assert not any(isinstance(a, Advance) and a.ms > 0 and isinstance(b, Advance)
                       for a, b in itertools.pairwise(history.steps))  # fmt: skip
    assert [repr(h) for h in first] != [repr(h) for h in drawn(seed=11)]  # the hooks draw others


def test_the_public_api_leaves_hypothesis_as_it_found_it() -> None:
    """Off, a hook touches nothing: the rule strategy is Hypothesis's own and the local-constant
    harvest is back (on again after, as the default)."""
    from hypothesis.internal.conjecture import engine as conjecture_engine
    from hypothesis.internal.conjecture import providers

    mutate = conjecture_engine.ConjectureRunner.generate_mutations_from
    rule_strategies: list[type] = []
    harvests: list[object] = []

    class Watched(QueueMachine):
        def teardown(self) -> None:
            rule_strategies.append(type(self._rules_strategy))
            harvests.append(providers._get_local_constants)
            assert conjecture_engine.ConjectureRunner.generate_mutations_from is mutate
            super().teardown()

    with engine.using(()):
        Runnable = engine.runnable(Watched)
        engine.run(lambda: Runnable(HistoryShape(), None), machine_settings(5, 10, phases=[Phase.generate]), 2)
    assert {t.__name__ for t in rule_strategies} == {"RuleStrategy"}
    assert all(harvest.__module__ == providers.__name__ for harvest in harvests)  # type: ignore[attr-defined]
    drawn(examples=2)  # the default again: the harvest off
    assert providers._get_local_constants.__module__ == engine.__name__


@pytest.mark.parametrize("hook", engine.HOOKS)
def test_each_hook_off_alone_still_draws_valid_histories(hook: str) -> None:
    with engine.using(engine.AVAILABLE - {hook}):
        histories = drawn(examples=20)
    assert len(histories) == 20  # the budget, exactly
    for history in histories:
        assert hist.loads(hist.dumps(history)) == history
    # nearly every history calls a transition: with the rule choice's hook off, Hypothesis's own
    # choice ignores the weights, and a history of restarts alone is valid and now and then drawn
    # (one of these 20 since the server-condition block draws more, issue 36)
    calling = sum(any(isinstance(step, CallStep) for step in h.steps) or not h.steps for h in histories)
    assert calling >= 18, calling


def _on_the_second(step: object) -> object:
    """A PEXPIREAT's absolute time as it was when histories started on the second (START_MS - 999)."""
    if isinstance(step, RawWrite) and step.command[:1] == (b"PEXPIREAT",):
        at = int(step.command[2]) - (START_MS - hist.DEFAULT_START_MS)
        return RawWrite((*step.command[:2], b"%d" % at, *step.command[3:]))
    return step


def test_the_hooks_make_the_histories_a_seed_drew_before_the_split() -> None:
    """The seed's first histories as the machine drew them before strategies/engine.py existed
    (bench/bench_engine.py --digest holds 6,000 of them): the hooks changed no choice."""
    made = drawn(examples=3, seed=1000, shape=HistoryShape())
    # each where every history started before `clock_origin` (issue 36): the last millisecond of a
    # second (strategies/machine.py)
    assert [h.start_ms for h in made] == [START_MS, START_MS, START_MS]
    # the choices as recorded, with the start (and a PEXPIREAT's absolute time) on the second itself,
    # as histories began until they began at its last millisecond
    made = [dataclasses.replace(h, start_ms=hist.DEFAULT_START_MS, steps=tuple(map(_on_the_second, h.steps)))
            for h in made[:2]] + made[2:]  # fmt: skip

    def digest(histories: list[hist.History]) -> str:
        return hashlib.sha256("".join(hist.dumps(h) for h in histories).encode()).hexdigest()[:16]

    # recorded before the split: [39, 53, 47] steps, digest 0d2902283e28e68c. Recorded again since:
    # the third when NOREPLICAS joined the memory limit's block; all three with issue 36, whose new
    # rules (clock_origin, long_advance), id edges (a UUID, colons, several scripts, digits) and
    # second malformation change what a seed draws (the lengths of the first two stayed); the third
    # again when transactions could switch a condition inside and restarts step the clock back; the
    # last two when replicas, another database and RESP3 met the other conditions (first steps that
    # call a replica or pick a database twice as often: the third no longer starts at another origin);
    # the third again when production's size became about one history in twenty (issue 37: the first
    # rule's weights), all three when an ENQUEUE's payload and a FAIL's error drew a megabyte's now and then
    assert [len(h.steps) for h in made] == [39, 43, 51]
    assert (digest(made[:2]), digest(made[2:])) == ("aa7a3c3ea634bc52", "7f8935c5c81174ac")


def test_a_machine_without_a_source_of_draws_says_how_to_run_it() -> None:
    with pytest.raises(AssertionError, match="run_machine"):
        QueueMachine().draws()  # not run by Hypothesis: no draws were handed to it
