"""The frozen clock: TIME and a script's TIME read it on every server, moving only on advance."""

from __future__ import annotations

import pytest

from difftest.clock import DEFAULT_START_MS, FrozenClock, format_timestamp
from difftest.servers.local import EmbeddedServer, ServerGroup

SCRIPT_TIME = b"local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)"


def script_ms(server: EmbeddedServer) -> int:
    return int(server.client.execute_command(b"EVAL", SCRIPT_TIME, b"0"))


def test_format_timestamp_is_utc_to_the_millisecond() -> None:
    assert format_timestamp(0) == "1970-01-01 00:00:00.0000001"
    assert format_timestamp(DEFAULT_START_MS + 1_234) == "2026-01-01 00:00:01.2340001"
    with pytest.raises(ValueError, match="before the epoch"):
        format_timestamp(-1)


def test_clock_only_moves_forward(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = FrozenClock(tmp_path / "ts")
    clock.advance(5)
    assert clock.now_ms == DEFAULT_START_MS + 5
    assert (tmp_path / "ts").read_text() == "2026-01-01 00:00:00.0050001\n"
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)


def test_both_servers_read_the_frozen_clock(group: ServerGroup) -> None:
    first, second = group.add("a"), group.add("b")
    for server in (first, second):
        assert server.time_ms() == DEFAULT_START_MS
        assert script_ms(server) == DEFAULT_START_MS
    group.advance(1_500)
    for server in (first, second):
        # read twice, 20 ms of real time apart: frozen means it did not move
        assert server.time_ms() == DEFAULT_START_MS + 1_500
        assert script_ms(server) == DEFAULT_START_MS + 1_500
    group.set_time(42)
    assert [first.time_ms(), second.time_ms(), script_ms(first)] == [42, 42, 42]


@pytest.mark.parametrize("how", ["restart", "crash"])
def test_clock_holds_across_restart_and_crash(group: ServerGroup, how: str) -> None:
    server = group.add("a")
    group.advance(777)
    getattr(server, how)()
    assert server.time_ms() == DEFAULT_START_MS + 777
    assert script_ms(server) == DEFAULT_START_MS + 777
    group.advance(1)
    assert script_ms(server) == DEFAULT_START_MS + 778


def test_frozen_time_does_not_drift_in_real_time(group: ServerGroup) -> None:
    import time

    server = group.add("a")
    before = server.time_ms()
    time.sleep(0.05)
    assert server.time_ms() == before


def test_every_reading_falls_in_the_frozen_millisecond(group: ServerGroup) -> None:
    """Thousands of script readings at a millisecond whose fraction a double cannot hold (.200):
    with the fraction written as it was, about one in 300 read the millisecond before."""
    server = group.add("a")
    group.set_time(1_200)
    pipe = server.client.pipeline(transaction=False)
    for _ in range(3_000):
        pipe.execute_command(b"EVAL", SCRIPT_TIME, b"0")
    readings = pipe.execute()
    assert set(readings) == {1_200}
