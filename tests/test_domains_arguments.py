"""The argument rules' classes (difftest/spec/domains.py): derived from the table and the decisions, each
classified back as what it is, held to the host's guards, and each with its one coverage label (pure)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from difftest.coverage.labels import CLASS_LABELS, REQUIRED
from difftest.spec import domains, errors, guards
from difftest.spec.calls import Call
from difftest.spec.commands import TRANSITIONS, ArgKind, Layout, queue_of_base
from strategies.engine import Draws
from strategies.pools import BAD_INTEGERS, QUEUES
from strategies.steps import malformed_once_or_twice

INT_ARGS = [(verb, a) for verb, t in TRANSITIONS.items() for a in t.args if a.kind is ArgKind.INT]
CODES = {errors.NOTINT: domains.NOTINT, errors.OVERFLOW: domains.OVERFLOW, errors.ARG: domains.ARG}


def _plain(verb: str, queue: bytes = b"q") -> Call:
    return Call.of(verb, queue, *(b"1" for _ in TRANSITIONS[verb].args))


def test_every_class_has_its_one_label() -> None:
    labels = domains.argument_labels()
    assert len(set(labels)) == len(labels)
    assert {label.split(":", 2)[2] for label in labels if label.startswith("edge:int:")} == set(domains.INT_CLASSES)
    assert {label.split(":", 2)[2] for label in labels if label.startswith("edge:shape:")} == set(domains.SHAPE_CLASSES)
    layout = {tuple(label.split(":")[2:]) for label in labels if label.startswith("edge:layout:")}
    assert layout == {
        (position, cls)
        for t in TRANSITIONS.values()
        for position in domains.layout_positions(t)
        for cls in domains.layout_classes(t, position)
    }
    counted = Counter(REQUIRED)
    assert all(counted[label] == 1 and label in CLASS_LABELS for label in labels)


def test_the_layout_positions_follow_the_table() -> None:
    # the base and every derived key's suffix; meta (PAUSE/RESUME's one key) has no other queue to be of
    assert domains.SUFFIXES == ("pending", "delayed", "active", "done", "dead", "meta")
    assert "edge:layout:meta:other-queue" not in domains.argument_labels()
    assert "edge:layout:dead:other-queue" in domains.argument_labels()
    assert domains.layout_classes(TRANSITIONS["EXTEND"], domains.BASE)[-1] != domains.OTHER_QUEUE  # one derived key
    assert domains.layout_classes(TRANSITIONS["CLAIM"], domains.BASE)[-1] == domains.OTHER_QUEUE


@pytest.mark.parametrize("cls", list(domains.INT_CLASSES))
def test_each_integer_class_earns_what_the_decisions_say(cls: str) -> None:
    raw = domains.INT_CLASSES[cls].raw
    assert domains.int_class(raw) == cls
    for verb, spec in INT_ARGS:
        try:
            guards.parse_integer(raw, spec.minimum, spec.maximum)
            got = None
        except guards.GuardError as refusal:
            got = CODES[refusal.message]
        assert got == domains.int_outcome(verb, spec.name, cls), (verb, spec.name)


def test_the_integer_classes_are_both_sides_of_each_rule() -> None:
    outcome = {cls: domains.int_outcome("SWEEP", "limit", cls) for cls in domains.INT_CLASSES}
    assert outcome["plain"] is None and outcome["i64-max"] is None and outcome["nineteen-digits"] is None
    assert outcome["negative-zero"] == outcome["plus-sign"] == outcome["leading-zero"] == domains.NOTINT
    assert outcome["above-i64-max"] == outcome["below-i64-min"] == outcome["many-digits"] == domains.OVERFLOW
    assert outcome["i64-min"] == outcome["zero"] == outcome["negative"] == domains.ARG
    # the form is read before the length: forty digits then a letter are not an integer
    assert outcome["many-digits-then-text"] == outcome["many-leading-zeros"] == domains.NOTINT
    assert domains.int_outcome("FAIL", "token", "zero") is None  # token >= 0
    assert domains.int_outcome("CLAIM", "lease_ms", "i64-max") == domains.ARG  # durations stop at 2^52
    assert len(set(BAD_INTEGERS)) == len(domains.INT_CLASSES)


@pytest.mark.parametrize("verb", list(TRANSITIONS))
def test_each_shape_class_is_refused_and_read_back(verb: str) -> None:
    t, call = TRANSITIONS[verb], _plain(verb)
    assert domains.shape_class(t, call.numkeys, call.rest) is None
    assert ("argc-keys-only" in domains.shape_classes(t)) == bool(t.args)  # without arguments, the call itself
    for cls in domains.shape_classes(t):
        numkeys, rest = domains.shaped(t, call.rest, cls)
        with pytest.raises(guards.GuardError, match="SHAPE"):
            guards.check_call(verb, numkeys, rest)
        # where two classes make the same bytes (PAUSE's numkeys one less is zero) the first names it
        same = [c for c in domains.SHAPE_CLASSES if domains.shaped(t, call.rest, c) == (numkeys, rest)]
        assert domains.shape_class(t, numkeys, rest) == same[0]
        assert domains.argument_edges(t, numkeys, rest) == [f"edge:shape:{same[0]}"]


def test_each_shape_class_is_its_own_on_some_transition() -> None:
    for cls in domains.SHAPE_CLASSES:
        assert any(
            domains.shape_class(t, *domains.shaped(t, _plain(verb).rest, cls)) == cls for verb, t in TRANSITIONS.items()
        ), cls


@pytest.mark.parametrize("verb", list(TRANSITIONS))
def test_each_layout_class_is_read_back_and_refused_or_accepted(verb: str) -> None:
    t = TRANSITIONS[verb]
    for queue, other in (QUEUES, QUEUES[::-1]):
        call = _plain(verb, queue)
        assert domains.layout_reached(t, call.rest[: t.numkeys]) == []
        for position in domains.layout_positions(t):
            for cls in domains.layout_classes(t, position):
                keys = domains.laid_out(t, queue, position, cls, other)
                assert domains.layout_reached(t, keys) == [(position, cls)], (position, cls)
                rest = (*keys, *call.rest[t.numkeys :])
                if cls in domains.ACCEPTED_QUEUES:
                    assert guards.check_call(verb, call.numkeys, rest)[0] == domains.ACCEPTED_QUEUES[cls](queue)
                else:
                    with pytest.raises(guards.GuardError, match="LAYOUT"):
                        guards.check_call(verb, call.numkeys, rest)


def test_the_first_failing_check_names_the_class() -> None:
    t = TRANSITIONS["FAIL"]
    call = _plain("FAIL")
    keys, args = list(call.rest[: t.numkeys]), list(call.rest[t.numkeys :])
    bad_keys = list(domains.laid_out(t, b"q", "dead", "case", b"r"))
    args[1] = domains.INT_CLASSES["plus-sign"].raw  # token
    args[3] = domains.INT_CLASSES["hex"].raw  # max_attempts
    # two bad integers: the first is met, the second never checked
    assert domains.argument_edges(t, call.numkeys, (*keys, *args)) == ["edge:int:plus-sign"]
    # a bad key before them: the layout is met, no integer
    assert domains.argument_edges(t, call.numkeys, (*bad_keys, *args)) == ["edge:layout:dead:case"]
    # an accepted integer does not stop the next one
    args[1] = domains.INT_CLASSES["i64-max"].raw
    assert domains.argument_edges(t, call.numkeys, (*keys, *args)) == ["edge:int:i64-max", "edge:int:hex"]
    # an accepted queue name does not stop the integers
    odd = domains.laid_out(t, b"q", domains.BASE, "nul", b"r")
    assert domains.argument_edges(t, call.numkeys, (*odd, *args)) == [
        "edge:layout:base:nul", "edge:int:i64-max", "edge:int:hex",
    ]  # fmt: skip


def test_the_generator_draws_every_class() -> None:
    """`malformed` reaches each label (with small weight in a history: malformed steps are rare), and
    with a second rule broken, each pair of faults."""
    rng = random.Random(14)
    # the machine's Draws, each choice uniform here rather than Hypothesis's
    draw = Draws(lambda _, constraints, *, observe, forced: rng.randint(0, constraints["max_value"]))
    reached: set[str] = set()
    for _ in range(6000):
        verb = rng.choice(list(TRANSITIONS))
        call = malformed_once_or_twice(draw, _plain(verb, rng.choice(QUEUES)))
        reached.update(domains.argument_edges(TRANSITIONS[verb], call.numkeys, call.rest))
        fault = domains.fault_label(TRANSITIONS[verb], call.numkeys, call.rest)
        reached.update([fault] if fault is not None else [])
    assert [label for label in domains.argument_labels() if label not in reached] == []


def test_the_base_classes_read_the_base_as_the_guards_do() -> None:
    """One reader of `emq:{q}:` (commands.parse_key): a base a class breaks is no base to the guards,
    and an accepted queue's base is read back as that queue and classed by it."""
    for cls, make in domains.BASE_CLASSES.items():
        base = make(b"q")
        assert queue_of_base(base) is None and domains.base_class(base) == cls, cls
    for cls, name in domains.ACCEPTED_QUEUES.items():
        base = Layout(name(b"q")).base
        assert queue_of_base(base) == name(b"q") and domains.base_class(base) == cls, cls
    assert domains.base_class(Layout(b"q").base) is None


def test_every_accepted_queue_class_applies_to_a_name_another_made() -> None:
    """A call's layout may be broken twice (`malformed_once_or_twice`): each accepted queue class
    makes a name from any other's, the longest included (a digits name of a 4 KiB name once raised
    Python's integer-string limit inside the generator)."""
    for first in domains.ACCEPTED_QUEUES.values():
        for cls, second in domains.ACCEPTED_QUEUES.items():
            name = second(first(b"q"))
            assert name and Layout(name).base.startswith(b"emq:{"), cls
