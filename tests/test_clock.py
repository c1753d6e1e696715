"""The frozen clock: TIME and a script's TIME read it on every server, moving only on advance."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from difftest.base.problems import SetupProblem
from difftest.history.format import DEFAULT_START_MS
from difftest.servers.clock import FrozenClock
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer
from executors.native.adapter import DEFAULT_MODULE

SCRIPT_TIME = b"local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)"


def script_ms(server: EmbeddedServer) -> int:
    return int(server.client.execute_command(b"EVAL", SCRIPT_TIME, b"0"))


def test_the_clock_file_holds_the_frozen_milliseconds_and_only_moves_forward(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = FrozenClock(tmp_path / "ts")
    assert (tmp_path / "ts").read_bytes() == struct.pack("<q", DEFAULT_START_MS)
    clock.advance(5)
    assert clock.now_ms == DEFAULT_START_MS + 5
    assert (tmp_path / "ts").read_bytes() == struct.pack("<q", DEFAULT_START_MS + 5)  # in place, at once
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="before the epoch"):
        clock.set(-1)


def test_a_clock_file_of_another_kind_is_made_a_clock_in_place(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "ts"
    path.write_text("2026-01-01 00:00:00.0000001\n")  # what an older difftest wrote there
    inode = path.stat().st_ino
    FrozenClock(path, start_ms=7)
    assert path.read_bytes() == struct.pack("<q", 7) and path.stat().st_ino == inode


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


def test_every_reading_is_the_frozen_time_exactly(group: ServerGroup) -> None:
    """Thousands of readings, TIME and a script's, all the frozen time to the microsecond."""
    server = group.add("a")
    group.set_time(1_200)
    pipe = server.client.pipeline(transaction=False)
    for _ in range(1_500):
        pipe.execute_command(b"EVAL", SCRIPT_TIME, b"0")
        pipe.time()
    readings = pipe.execute()
    assert set(readings[0::2]) == {1_200}
    assert set(readings[1::2]) == {(1, 200_000)}


def test_a_moved_clock_is_read_by_the_very_next_command(group: ServerGroup) -> None:
    """No wait and no confirmation: each move, however small and however soon after the last
    reading, is what the next command reads (Valkey 9 on the TSC would read the wall clock at most
    once a millisecond: the clock library makes it take the monotonic clock that reads it always)."""
    server = group.add("a", module=DEFAULT_MODULE)
    info = server.client.info("server")
    assert "POSIX" in str(info["monotonic_clock"])  # not the TSC: see difftest/servers/c/frozen_clock.c
    for ms in range(DEFAULT_START_MS, DEFAULT_START_MS + 2_000):
        group.clock.set(ms)
        assert server.time_ms() == ms


@pytest.mark.servers
def test_a_server_whose_clock_file_is_gone_does_not_start(tmp_path: Path) -> None:
    """A server that cannot map the clock stops at once, naming the file: never the real clock."""
    with ServerGroup(root=tmp_path / "group") as group:
        group.clock.path.unlink()
        with pytest.raises(
            SetupProblem, match=r"exited with code 112 at start: frozen_clock: cannot open the clock file"
        ):
            group.add("a")
