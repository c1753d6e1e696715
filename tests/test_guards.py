"""The argument rules as pure functions: shape, layout, Valkey integers, ranges, order."""

from __future__ import annotations

import pytest

from difftest.spec import errors
from difftest.spec.commands import MAX_DURATION_MS, TRANSITIONS, queue_keys, queue_of_base
from difftest.spec.errors import error_code
from difftest.spec.guards import GuardError, check_call, parse_integer

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(b"0", 0), (b"1", 1), (b"-1", -1), (str(I64_MAX).encode(), I64_MAX), (str(I64_MIN).encode(), I64_MIN)],
)
def test_integers_in_valkeys_form(raw: bytes, expected: int) -> None:
    assert parse_integer(raw, I64_MIN, I64_MAX) == expected


@pytest.mark.parametrize(
    "raw", [b"", b"-", b"-0", b"007", b"+1", b" 1", b"1 ", b"1.0", b"0x1", b"1e3", b"\x00", "١".encode()]
)
def test_not_integers(raw: bytes) -> None:
    with pytest.raises(GuardError) as refusal:
        parse_integer(raw, I64_MIN, I64_MAX)
    assert refusal.value.message == errors.NOTINT


@pytest.mark.parametrize("raw", [str(I64_MAX + 1).encode(), str(I64_MIN - 1).encode(), b"9" * 25, b"-" + b"9" * 5000])
def test_out_of_i64(raw: bytes) -> None:
    with pytest.raises(GuardError) as refusal:
        parse_integer(raw, I64_MIN, I64_MAX)
    assert refusal.value.message == errors.OVERFLOW


def test_range_is_checked_after_form() -> None:
    assert parse_integer(b"1", 1, MAX_DURATION_MS) == 1
    assert parse_integer(str(MAX_DURATION_MS).encode(), 1, MAX_DURATION_MS) == MAX_DURATION_MS
    for raw in (b"0", b"-3", str(MAX_DURATION_MS + 1).encode()):
        with pytest.raises(GuardError) as refusal:
            parse_integer(raw, 1, MAX_DURATION_MS)
        assert refusal.value.message == errors.ARG


@pytest.mark.parametrize(
    ("base", "queue"),
    [
        (b"emq:{q}:", b"q"),
        (b"emq:{a b\x00\xff}:", b"a b\x00\xff"),
        (b"emq:{}:", None),
        (b"emq:{a{b}:", None),
        (b"emq:{a}b}:", None),
        (b"emq:q:", None),
        (b"emq:{q}", None),
        (b"", None),
        (b"emq:{q}:job:j1", None),  # a key of the queue, not its base
        (b"emq:{a}:b}:", None),
    ],
)
def test_queue_of_base(base: bytes, queue: bytes | None) -> None:
    assert queue_of_base(base) == queue


def test_check_order_shape_then_layout_then_integers() -> None:
    keys = queue_keys(TRANSITIONS["SWEEP"], b"q")
    good = [*keys, b"1", b"1"]
    assert check_call("SWEEP", b"4", good) == (b"q", [1, 1])
    with pytest.raises(GuardError, match="SHAPE"):
        check_call("SWEEP", b"4", [b"bad", *keys[1:], b"x", b"1", b"extra"])
    with pytest.raises(GuardError, match="LAYOUT"):
        check_call("SWEEP", b"4", [b"bad", *keys[1:], b"x", b"1"])
    # integers in argument order: the first bad one wins
    with pytest.raises(GuardError, match="NOTINT"):
        check_call("SWEEP", b"4", [*keys, b"x", b"0"])
    with pytest.raises(GuardError, match="ARG"):
        check_call("SWEEP", b"4", [*keys, b"0", b"x"])


def test_every_transition_accepts_its_own_layout() -> None:
    for verb, transition in TRANSITIONS.items():
        args = [str(a.minimum).encode() if a.kind.value == "int" else b"x" for a in transition.args]
        queue, parsed = check_call(verb, str(transition.numkeys).encode(), [*queue_keys(transition, b"q"), *args])
        assert queue == b"q"
        assert len(parsed) == len(transition.args)


def test_error_codes() -> None:
    assert error_code(errors.NOTINT) == "EMQ NOTINT"
    assert error_code("WRONGTYPE Operation against a key script: x") == "WRONGTYPE"
    assert error_code("") == ""
    assert set(errors.BY_CODE) == {"SHAPE", "LAYOUT", "ARG", "NOTINT", "OVERFLOW", "HOSTREPLY", "LANE"}
