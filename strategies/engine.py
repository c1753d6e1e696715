"""The generator's work on Hypothesis's engine: the one module that reaches past Hypothesis's public API.

Everything else in the project draws through `hypothesis.stateful` and `hypothesis.strategies` as
documented; this module alone imports `hypothesis.internal` (a test in tests/test_engine.py holds
that) or touches the state machine's private parts. Each hook below says the measured reason it
exists (bench/bench_engine.py; the figures are in docs/design-notes.md, "The engine hooks") and
falls back to the public API:

- `constants`: Hypothesis's harvest of "local constants" off, so a seed alone decides the histories.
- `rules`: the next rule chosen by weight in one draw, not uniformly with swarm testing.
- `draws`: a rule's choices made by the engine's own integer draw, not a strategy per choice.
- `mutations`: the generate phase's mutations of new runs off (38% of the runs overran).
- `min_steps`: at least one rule after the initialize rules, the stop draws forced.

The hooks were read against the pinned Hypothesis (`PINNED`, pyproject.toml) and are on only there.
With another version, or with DIFFTEST_ENGINE_HOOKS=0, none is: the machine then runs on the public
API alone (Hypothesis's own rule choice, `st.data()` draws, its mutations and local constants): every
history is as valid and judged alike, but a seed draws other histories than with the hooks, at 0.21
of the rate (2,313 against 11,275 steps/s), so the hooks stay. `using` picks hooks one by one (the
benchmark's and the tests' switch).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

import hypothesis
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, run_state_machine_as_test

from difftest.base.problems import SetupProblem

if TYPE_CHECKING:
    from hypothesis import settings

PINNED = "6.170.17"  # the version every hook was read against (pyproject.toml pins it)
VARIABLE = "DIFFTEST_ENGINE_HOOKS"  # unset or 1: the hooks (on the pinned version); 0: the public API only
HOOKS = ("constants", "rules", "draws", "mutations", "min_steps")

try:  # the internals the hooks reach: present on the pinned version (elsewhere: no hook at all)
    from hypothesis.internal.conjecture import engine as conjecture_engine
    from hypothesis.internal.conjecture import providers
    from hypothesis.internal.constants_ast import Constants
except ImportError:  # pragma: no cover (another Hypothesis)
    INTERNALS = False
else:
    INTERNALS = True


def available(version: str) -> frozenset[str]:
    """The hooks a Hypothesis of this version can take: all on the pinned one, none on another."""
    return frozenset(HOOKS) if INTERNALS and version == PINNED else frozenset()


AVAILABLE = available(hypothesis.__version__)
_chosen: list[frozenset[str]] = []  # `using`'s choice, innermost last (empty: the environment's)


def wanted(environ: Mapping[str, str]) -> frozenset[str]:
    """The hooks DIFFTEST_ENGINE_HOOKS asks for (unset or empty: all; a bad value is one line, exit 2)."""
    value = environ.get(VARIABLE) or "1"
    if value not in ("0", "1"):
        raise SetupProblem(f"{VARIABLE}={value!r} is neither 0 nor 1: {VARIABLE}=0 draws histories through "
                           "Hypothesis's public API alone; set it to 0 or 1, or unset it for the default")  # fmt: skip
    return AVAILABLE if value == "1" else frozenset()


def hooks() -> frozenset[str]:
    """The hooks on now: `using`'s choice, else the environment's (none off the pinned version)."""
    return _chosen[-1] if _chosen else wanted(os.environ)


@contextlib.contextmanager
def using(chosen: frozenset[str] | set[str] | tuple[str, ...]) -> Iterator[frozenset[str]]:
    """The machine runs with these hooks alone while in the block (the others fall back to the public
    API); a hook the installed Hypothesis cannot take is refused (ValueError)."""
    chosen = frozenset(chosen)
    if not chosen <= AVAILABLE:
        raise ValueError(f"hooks {sorted(chosen - AVAILABLE)} unavailable with hypothesis {hypothesis.__version__}")
    _chosen.append(chosen)
    try:
        yield chosen
    finally:
        _chosen.pop()


# -- constants ---------------------------------------------------------------------------------
# Hypothesis (6.1xx) now and then draws a "local constant": a literal harvested from every module of
# the project loaded at that moment. Which modules those are differs between the first batch of a
# process and the next (lazy imports), between `difftest run`, a mutant's child process and pytest,
# and between machines, so the same seed drew different histories. Measured (bench/bench_engine.py
# --constants): the same 2,000 seeded histories drawn in a fresh process that loaded the machine
# alone and in one that loaded the campaign, the CLI, the reports and the mutant runner first: 1,938
# of them differ with the harvest on, none with it off; the rate is the same (0.99). There is no
# public setting: with the hook off the harvest is on and the process's imports decide too.


def _no_local_constants() -> Any:
    return _NO_CONSTANTS


_NO_CONSTANTS: Any = Constants() if INTERNALS else None
_harvest: list[Callable[[], Any]] = []  # Hypothesis's own harvest, while the hook replaces it


def draw_from_the_seed_alone(on: bool = True) -> None:
    """The local-constant harvest off (on: False puts Hypothesis's back). Idempotent; the pools the
    provider already built from the harvest are dropped either way."""
    if "constants" not in AVAILABLE:
        return
    current = providers._get_local_constants
    if on and current is not _no_local_constants:
        _harvest.append(current)
        providers._get_local_constants = _no_local_constants
        providers.CONSTANTS_CACHE.cache.clear()
    elif not on and current is _no_local_constants and _harvest:
        providers._get_local_constants = _harvest.pop()
        providers.CONSTANTS_CACHE.cache.clear()


if os.environ.get(VARIABLE) != "0":
    draw_from_the_seed_alone()  # on import (the machine's module imports this one): before any draw


# -- draws ---------------------------------------------------------------------------------------
# A rule's choices are many (about a dozen a step), so what each costs is most of the generation
# rate. Through the public API each is `st.data()`'s draw of `st.integers(0, count - 1)`: a strategy
# validated, a span and a note per choice (and an initialize rule that hands the rules the data
# object). `Draws` calls `ConjectureData._draw` itself instead, with the constraints draw_integer
# would build (equal dicts, kept here per count), so the choices, their constraints and the nodes
# Hypothesis records are those of its own integer choice. Measured (bench/bench_engine.py, generation
# only, best of 5 rounds, 300 histories): without the hook 0.32 of the rate with it (3,595 against
# 11,275 steps/s; calls-only mix 0.37). With the provider of another backend (which avoids realising
# values) the public draw too.

IntegerDraw = Callable[..., int]  # ConjectureData._draw's shape: ("integer", constraints, observe=, forced=)


class _Below(dict[int, dict[str, Any]]):
    """The constraints of an integer choice in [0, count - 1], by count, made on first use."""

    def __missing__(self, count: int) -> dict[str, Any]:
        constraints = {"min_value": 0, "max_value": count - 1, "weights": None, "shrink_towards": 0}
        self[count] = constraints
        return constraints


_BELOW = _Below()
_INTEGERS: dict[int, st.SearchStrategy[int]] = {}  # the public fallback's strategy per count


class Draws:
    """The choices a rule makes inside its body (strategies.steps.Choices), each one integer choice
    in [0, count - 1] that shrinks towards 0, made by `draw` (the engine's `_draw`, or the public
    stand-in of the same shape): each method makes it itself, one call less a choice."""

    __slots__ = ("_draw",)

    def __init__(self, draw: IntegerDraw) -> None:
        self._draw = draw

    def index(self, count: int) -> int:
        """One choice in [0, count - 1], drawn even when count is 1."""
        return self._draw("integer", _BELOW[count], observe=True, forced=None)

    def pick(self, pool: tuple[Any, ...] | list[Any]) -> Any:
        count = len(pool)
        return pool[self._draw("integer", _BELOW[count], observe=True, forced=None)] if count > 1 else pool[0]

    spread = pick  # draws are independent here: nothing comes in lockstep to spread

    def integer(self, low: int, high: int) -> int:
        count = high - low + 1
        return low + self._draw("integer", _BELOW[count], observe=True, forced=None) if count > 1 else low

    def chance(self, out_of: int) -> bool:
        """True one time in `out_of` (False when shrunk)."""
        return self._draw("integer", _BELOW[out_of], observe=True, forced=None) == out_of - 1

    def aim(self, out_of: int) -> bool:
        """True but one time in `out_of`: whether to aim by the hints (shrunk: not aimed)."""
        return self._draw("integer", _BELOW[out_of], observe=True, forced=None) != 0

    def weighted(self, weights: tuple[tuple[str, int], ...]) -> str:
        total = sum(w for _, w in weights)
        n = self._draw("integer", _BELOW[total], observe=True, forced=None) if total > 1 else 0
        for name, weight in weights:
            if n < weight:
                return name
            n -= weight
        return weights[-1][0]


def public_draw(data: Any) -> IntegerDraw:
    """The stand-in for `_draw` through the public API: `data` (an `st.data()` object) draws
    `st.integers(0, count - 1)`."""

    def draw(_: str, constraints: dict[str, Any], *, observe: bool, forced: None) -> int:
        top = constraints["max_value"]
        strategy = _INTEGERS.get(top)
        if strategy is None:
            strategy = _INTEGERS[top] = st.integers(0, top)
        drawn: int = data.draw(strategy)
        return drawn

    return draw


def _direct(conjecture: Any) -> IntegerDraw | None:
    """The engine's own integer draw of this run, when the hook may take it (None: it may not)."""
    if "draws" in hooks() and not conjecture.provider.avoid_realization:
        return conjecture._draw  # type: ignore[no-any-return]
    return None


def attach(machine: Any, data: Any) -> None:
    """Give the machine its run's draws from `data`, the run's `st.data()` object (see `runnable`)."""
    machine.run_draws = machine.draws_type(_direct(data.conjecture_data) or public_draw(data))


@functools.cache
def _sourced(machine_class: type[RuleBasedStateMachine]) -> type[RuleBasedStateMachine]:
    """The machine with one more initialize rule that hands it the run's `st.data()` object."""

    class Sourced(machine_class):  # type: ignore[valid-type,misc]
        @initialize(data=st.data())
        def draws_from(self, data: st.DataObject) -> None:
            """Where the rules' choices come from (the rule choice, when weighted, brings its own)."""
            attach(self, data)

    Sourced.__name__ = Sourced.__qualname__ = machine_class.__name__
    return Sourced


def runnable(machine_class: type[RuleBasedStateMachine]) -> type[RuleBasedStateMachine]:
    """The class to run: `machine_class` itself when the weighted rule choice hands the rules their
    draws (the `rules` and `draws` hooks on), else it with an initialize rule that does."""
    on = hooks()
    return machine_class if {"rules", "draws"} <= on else _sourced(machine_class)


# -- rules ---------------------------------------------------------------------------------------
# Hypothesis's own choice of the next rule is uniform over the valid rules, with swarm testing (some
# rules switched off for a whole run): a feature flag drawn for rule after rule, every precondition
# asked every step. The weighted choice asks the machine class what each rule weighs (a number, a
# transition's aimed weight, or a function of the state) and which preconditions the shape decides,
# works out per state the table of valid rules by weight, and draws once among them. Measured
# (bench/bench_engine.py, generation only, best of 5 rounds, 300 histories): without the hook 0.54 of
# the rate with it (6,082 against 11,275 steps/s; calls-only mix 0.40); and the mix is the uniform
# one, not the machine's: 5.8% of the steps restart or crash a server (12 ms of server time each)
# against 1.9%, 53% are transitions against 62%.

Weight = int | str | Callable[[Any], int]  # a number, an aimed transition's verb, or a function of the state
_Entry = tuple[Any, tuple[tuple[str, Any], ...], tuple[int, ...], int | str | None, int | None]
_Table = tuple[tuple[tuple[Any, tuple[tuple[str, Any], ...]], ...], tuple[int, ...]]
_StateKey = tuple[Any, ...]


class _RulePlan:
    """What choosing a rule needs, for one machine class and shape, worked out once: the rules the
    shape allows (the preconditions the machine class says the shape decides), in the class's shrink
    order; the few whose validity or weight the state decides beyond their bundles; and, per state
    as the choice sees it (the bundles that hold something, those few rules' verdicts, the class's
    aim key), the table of valid rules by weight. A state's table is a pure function of its key, so
    the same states draw the same rules as a fresh computation each step would; a run meets few.

    The machine class answers `rule_rank(name)`, `rule_weight(name)` (a `Weight`),
    `shape_allows(precondition, shape)` (None: the state decides), `aim_key(machine)` (a tuple) and
    `aimed_weights(key)` (an aimed transition's weight by verb)."""

    MAX_TABLES = 1 << 12  # beyond this many states, tables are worked out and not kept

    def __init__(self, machine_class: Any, shape: Hashable) -> None:
        rules = sorted(machine_class.setup_state().rules, key=lambda r: machine_class.rule_rank(r.function.__name__))
        positions: dict[str, int] = {}  # a bundle's name: its position in the state key
        entries: list[list[Any]] = []
        # the rules the state decides beyond their bundles: (entry, bundles' positions, preconditions
        # beyond the shape's, weight function or None: a number or an aimed weight, read by the table)
        decided: list[tuple[list[Any], tuple[int, ...], tuple[Callable[[Any], Any], ...], Weight | None]] = []
        self.aims = False
        for r in rules:
            verdicts = [(p, machine_class.shape_allows(p, shape)) for p in r.preconditions]
            if any(allowed is False for _, allowed in verdicts):
                continue  # never valid in this shape
            rest = tuple(p for p, allowed in verdicts if allowed is None)
            needs = tuple(positions.setdefault(b.name, len(positions)) for b in r.bundles)
            how_often = machine_class.rule_weight(r.function.__name__)
            spec = how_often if isinstance(how_often, int | str) else None
            self.aims = self.aims or isinstance(how_often, str)
            entry = [r, tuple(r.arguments_strategies.items()), needs, spec, None]
            entries.append(entry)
            if rest or spec is None:
                decided.append((entry, needs, rest, how_often if spec is None else None))
        self.bundle_names = tuple(positions)
        # a rule with one precondition and nothing else to decide has its verdict in one test; the
        # others go through the general loop (bundles, each precondition, the weight)
        self.simple: list[Callable[[Any], Any]] = []
        self.general: list[tuple[tuple[int, ...], tuple[Callable[[Any], Any], ...], Weight | None]] = []
        at = len(positions)  # the verdicts follow the bundles in the state key
        for entry, needs, rest, custom in decided:
            if not needs and len(rest) == 1 and custom is None:
                entry[4] = at
                at += 1
                self.simple.append(rest[0])
        for entry, needs, rest, custom in decided:
            if entry[4] is None:
                entry[4] = at
                at += 1
                self.general.append((needs, rest, custom))
        self.aim_at = at  # the aim key follows the verdicts
        self.aim_key: Callable[[Any], tuple[Any, ...]] = machine_class.aim_key
        self.aimed_weights: Callable[[tuple[Any, ...]], Mapping[str, int]] = machine_class.aimed_weights
        self.entries: list[_Entry] = [tuple(e) for e in entries]
        self.tables: dict[_StateKey, _Table] = {}

    def state_key(self, machine: Any) -> _StateKey:
        """Everything the valid rules and their weights depend on now (this runs every step)."""
        bundles = machine.bundles
        key: list[Any] = [bool(bundles.get(name)) for name in self.bundle_names]
        key += [bool(holds(machine)) for holds in self.simple]
        # plain loops: the order (bundles, then each precondition until one fails, then the weight)
        # is the one Hypothesis's own rule choice follows
        for needs, preconditions, how_often in self.general:
            verdict: Any = False
            for i in needs:
                if not key[i]:
                    break
            else:
                for holds in preconditions:
                    if not holds(machine):
                        break
                else:
                    verdict = how_often(machine) if how_often is not None else True  # type: ignore[operator]
            key.append(verdict)
        if self.aims:
            key += self.aim_key(machine)
        return tuple(key)

    def table(self, key: _StateKey) -> _Table:
        """The valid rules of the state, in shrink order, and their weights' running total."""
        by_verb = self.aimed_weights(key[self.aim_at :]) if self.aims else {}
        valid: list[tuple[Any, tuple[tuple[str, Any], ...]]] = []
        running: list[int] = []
        total = 0
        for r, arguments, needs, spec, at in self.entries:
            if at is not None:
                verdict = key[at]
                if spec is None:
                    weight_now = verdict  # a function of the state: its weight now (False: not valid)
                elif not verdict:
                    continue
                else:
                    weight_now = spec if isinstance(spec, int) else by_verb[spec]
            elif all(key[i] for i in needs):
                weight_now = spec if isinstance(spec, int) else by_verb[spec]  # type: ignore[index]
            else:
                continue
            if weight_now > 0:
                total += weight_now
                valid.append((r, arguments))
                running.append(total)
        table = (tuple(valid), tuple(running))
        if len(self.tables) < self.MAX_TABLES:
            self.tables[key] = table
        return table


_PLANS: dict[tuple[type, Hashable], _RulePlan] = {}


class _WeightedRules(st.SearchStrategy[tuple[Any, dict[str, Any]]]):
    """The machine's choice of its next rule: one draw among the valid rules by weight. The
    machine's rules, bundles, preconditions and shrinking are Hypothesis's; only the choice of the
    next rule is weighted (`tests/test_machine.py` checks the weights are obeyed)."""

    def __init__(self, machine: Any) -> None:
        super().__init__()
        self.machine = machine
        plan_key = (type(machine), machine.shape)
        plan = _PLANS.get(plan_key)
        if plan is None:
            plan = _PLANS[plan_key] = _RulePlan(type(machine), machine.shape)
        self.plan = plan
        self.index: Callable[[int], int] | None = None  # the run's integer draw, once a rule is drawn

    def do_draw(self, data: Any) -> tuple[Any, dict[str, Any]]:
        index = self.index
        if index is None:  # the machine's first rule (one run, one ConjectureData)
            direct = _direct(data)
            if direct is None:
                index = self.index = functools.partial(_drawn_below, data)
            else:
                index = self.index = Draws(direct).index
                if self.machine.run_draws is None:
                    self.machine.run_draws = self.machine.draws_type(direct)
        plan = self.plan
        key = plan.state_key(self.machine)
        table = plan.tables.get(key)
        if table is None:
            table = plan.table(key)
        valid, running = table
        # the first rule whose running total exceeds the draw: what subtracting weight after weight
        # from it finds, in one bisection
        chosen, arguments = valid[bisect_right(running, index(running[-1] if running else 0))]
        if not arguments:
            return chosen, {}  # most rules draw all they need in their body
        return chosen, {name: data.draw(strategy) for name, strategy in arguments}


def _drawn_below(data: Any, count: int) -> int:
    return data.draw_integer(0, count - 1)  # type: ignore[no-any-return]


def weigh_rules(machine: RuleBasedStateMachine) -> None:
    """The machine's next rule chosen by weight from here on (when the `rules` hook is on)."""
    if "rules" in hooks():
        machine._rules_strategy = _WeightedRules(machine)  # type: ignore[assignment]


# -- mutations -------------------------------------------------------------------------------------
# Hypothesis's generate phase follows each new test case with up to five mutations of it: the same
# choices with one span copied over another of the same label, replayed as they are, never extended.
# A machine run draws its rule and the choices in its body step by step, so a copied span that is
# shorter than the one it replaced leaves the run short of choices before its last step: an overrun,
# drawn and thrown away. Measured (bench/bench_engine.py, generation only, best of 5 rounds, 300
# histories): with them, 183 of the 483 runs drawn overran (38%) and the rate was 0.51 of the rate
# without them (5,775 against 11,275 steps/s; calls-only mix 0.59). While the machine runs the engine
# makes none (`ConjectureRunner.generate_mutations_from` a no-op): every run it draws is a history.
# Shrinking, the database and targeting are untouched.


@contextlib.contextmanager
def _mutations_off(on: bool) -> Iterator[None]:
    runner = conjecture_engine.ConjectureRunner if on else None
    mutate = runner.__dict__.get("generate_mutations_from") if runner is not None else None
    if runner is None or mutate is None:
        yield
        return
    runner.generate_mutations_from = _no_mutation  # type: ignore[method-assign]
    try:
        yield
    finally:
        runner.generate_mutations_from = mutate  # type: ignore[method-assign]


def _no_mutation(self: Any, data: Any) -> None:
    """What the engine's mutation step does while the machine runs: nothing."""


# -- min_steps -----------------------------------------------------------------------------------
# `run_state_machine_as_test(_min_steps=)` (a private argument) forces the stop draws of the first
# steps: at least one rule runs after the initialize rules. Measured (bench/bench_engine.py, 300
# histories): without it 3 runs in 300 stopped before their first rule, histories of no step (the
# machine hands them on all the same, so that a budget of N histories replays N); and since a forced
# draw takes nothing from the random stream, 292 of the other 297 differ from the histories the same
# seeds drew before this module existed (and from every campaign, shard and mutant figure recorded
# from a seed). The rate is the same either way (0.97, within the noise).


def run(factory: Callable[[], RuleBasedStateMachine], the_settings: settings, initializers: int) -> None:
    """Run the machine `factory` makes as Hypothesis's test, with the hooks on now."""
    on = hooks()
    draw_from_the_seed_alone("constants" in on)
    machine = cast(type[RuleBasedStateMachine], factory)  # (typed as a class; documented as any factory)
    with _mutations_off("mutations" in on):
        if "min_steps" in on:
            run_state_machine_as_test(machine, settings=the_settings, _min_steps=initializers)
        else:
            run_state_machine_as_test(machine, settings=the_settings)


def cut_short() -> bool:
    """Whether the run now ending stops on an exception (called from a machine's teardown, which
    Hypothesis runs in a `finally`): an overrun or a rejected run, which Hypothesis discards."""
    return sys.exc_info()[0] is not None
