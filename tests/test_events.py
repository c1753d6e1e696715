"""Keyspace notifications as data: the subscriber's messages parsed, and the pure verdict on two event lists."""

from __future__ import annotations

from difftest.history.format import call_step, raw
from difftest.history.resolve import Resolved, resolve
from difftest.judge.events import (
    MARKER_CHANNEL,
    Event,
    events_problem,
    expected_native,
    fires,
    parse_message,
)
from difftest.spec.notifications import flags_problem

ROW = b"emq:{q}:job:j1"


def one(step: object) -> Resolved:
    (resolved,) = resolve([step])  # type: ignore[list-item]
    return resolved


def both(event: bytes, key: bytes) -> tuple[Event, ...]:
    return (Event("keyspace", 0, event, key), Event("keyevent", 0, event, key))


def test_messages_parse_into_events_and_markers() -> None:
    assert parse_message([b"pmessage", b"__keyspace@*", b"__keyspace@0__:" + ROW, b"hset"]) == Event(
        "keyspace", 0, b"hset", ROW
    )
    assert parse_message([b"pmessage", b"__keyevent@*", b"__keyevent@3__:hincrby", ROW]) == Event(
        "keyevent", 3, b"hincrby", ROW
    )
    # a key holding the channel's separator is the key still: only the first `__:` ends the db
    assert parse_message([b"pmessage", b"p", b"__keyspace@0__:a__:b", b"del"]) == Event("keyspace", 0, b"del", b"a__:b")
    assert parse_message([b"message", MARKER_CHANNEL, b"17"]) == 17
    assert parse_message([b"psubscribe", b"__keyspace@*", 1]) is None
    assert parse_message([b"message", b"other", b"17"]) is None


def test_flags_choose_channels_and_classes() -> None:
    assert fires("KEA", "h", b"hset", ROW) == both(b"hset", ROW)
    assert fires("Kh", "h", b"hset", ROW) == (Event("keyspace", 0, b"hset", ROW),)
    assert fires("Ez", "h", b"hset", ROW) == ()  # hash events not asked for
    assert fires("KA", "m", b"keymiss", ROW) == ()  # A is every class but m and n
    assert flags_problem("KEA") is None and flags_problem("") is None
    assert "'q'" in (flags_problem("KEq") or "")


def test_equal_lists_agree_and_any_difference_is_found() -> None:
    step = one(call_step("COMPLETE", "q", "j1", 1))
    lua = both(b"zrem", b"emq:{q}:active") + both(b"hset", ROW)
    assert events_problem(step, False, "KEA", lua, lua, 1) is None
    swapped = both(b"hset", ROW) + both(b"zrem", b"emq:{q}:active")
    assert "at message 0" in (events_problem(step, False, "KEA", lua, swapped, 1) or "")
    missing = lua[:-1]
    problem = events_problem(step, False, "KEA", lua, missing, 1) or ""
    assert "at message 3" in problem and "it fired nothing more" in problem
    assert "must fire nothing more" in (events_problem(step, False, "KEA", missing, lua, 1) or "")


def test_sweep_must_fire_what_the_scripts_fire() -> None:
    """The unmodified module's SWEEP: one hset on the row where the scripts fire hincrby, then hset."""
    step = one(call_step("SWEEP", "q", 3, 10))
    lua = both(b"zrem", b"emq:{q}:active") + both(b"hincrby", ROW) + both(b"hset", ROW)
    native = both(b"zrem", b"emq:{q}:active") + both(b"hset", ROW)
    assert "must fire keyspace@0 hincrby" in (events_problem(step, False, "KEA", lua, native, [1, 0, 0, 0]) or "")


def test_n1_extend_fires_exactly_one_hset_more() -> None:
    step = one(call_step("EXTEND", "q", "j1", 1, 100))
    lua = both(b"zadd", b"emq:{q}:active")
    assert expected_native(step, "KEA", lua, 1) == lua + both(b"hset", ROW)
    assert events_problem(step, False, "KEA", lua, lua + both(b"hset", ROW), 1) is None
    assert events_problem(step, False, "KEA", (), both(b"hset", ROW), 1) is None  # the same deadline: no zadd
    assert events_problem(step, False, "Kz", lua[:1], lua[:1], 1) is None  # hash events off: no re-stamp heard
    # no re-stamp is a divergence, and so are two, or one on another key
    assert events_problem(step, False, "KEA", lua, lua, 1) is not None
    assert events_problem(step, False, "KEA", lua, lua + both(b"hset", ROW) * 2, 1) is not None
    assert events_problem(step, False, "KEA", lua, lua + both(b"hset", b"emq:{q}:job:j2"), 1) is not None
    # a fenced-off EXTEND stamps nothing; nor does the scripts' EXTEND on the native server
    assert events_problem(step, False, "KEA", (), both(b"hset", ROW), 0) is not None
    scripts = one(call_step("EXTEND", "q", "j1", 1, 100, executor="lua"))
    assert events_problem(scripts, False, "KEA", lua, lua + both(b"hset", ROW), 1) is not None


def test_raw_steps_and_resynchronising_rows_are_not_judged() -> None:
    lua, native = both(b"hdel", ROW)[:0], both(b"hdel", ROW)
    assert events_problem(one(raw("HDEL", ROW, "lease_epoch")), False, "KEA", lua, native, 1) is None
    assert events_problem(one(call_step("SWEEP", "q", 3, 10)), True, "KEA", lua, native, [0, 0, 0, 1]) is None
    assert events_problem(one(call_step("SWEEP", "q", 3, 10)), False, "KEA", lua, native, [0, 0, 0, 1]) is not None


def test_key_misses_are_set_aside_and_new_keys_compared() -> None:
    """Under `m` the module's peeks before its first write miss keys the script meets only at its
    write (ENQUEUE: pending as well as the row): reads, not judged; `new` events are writes, judged."""
    step = one(call_step("ENQUEUE", "q", "j1", "p", 0))
    pending = b"emq:{q}:pending"
    lua = kea_m(("keymiss", ROW), ("new", ROW), ("hset", ROW), ("new", pending), ("zadd", pending))
    native = kea_m(("keymiss", ROW), ("keymiss", pending), ("new", ROW), ("hset", ROW), ("new", pending),
                   ("zadd", pending))  # fmt: skip
    assert events_problem(step, False, "KEAmn", lua, native, 1) is None
    assert events_problem(step, False, "KEAn", lua, native, 1) is not None  # without m, a miss is a message
    no_new = tuple(e for e in native if not (e.event == b"new" and e.key == pending))
    assert events_problem(step, False, "KEAmn", lua, no_new, 1) is not None


def kea_m(*fired: tuple[str, bytes]) -> tuple[Event, ...]:
    return tuple(e for event, key in fired for e in both(event.encode(), key))


def test_n1_hset_is_expected_in_the_histories_database() -> None:
    """A queue in database 2: an EXTEND whose deadline does not move fires N1's hset alone, there."""
    step = one(call_step("EXTEND", "q", "j1", 1, 100))
    in_2 = (Event("keyspace", 2, b"hset", ROW), Event("keyevent", 2, b"hset", ROW))
    assert events_problem(step, False, "KEA", (), in_2, 1, db=2) is None
    assert events_problem(step, False, "KEA", (), in_2, 1) is not None
