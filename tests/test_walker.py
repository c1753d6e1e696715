"""The walker module (DIFFTEST.WALK) answers what the Lua walker answers, on every kind of keyspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from difftest.base.problems import SetupProblem
from difftest.replay.sides import MODULE_WALK, SCRIPT_WALK, NativeSide
from difftest.servers import walker
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer
from difftest.servers.wire import Wire
from difftest.spec.replies import ErrorReply, Simple
from difftest.spec.snapshot import (
    CANONICAL_WALK_SCRIPT,
    WalkReader,
    apply_tracked,
    is_tracked,
    parse_canonical,
    unqualified,
)
from executors.native.adapter import DEFAULT_MODULE

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"walked": ("servers",), "walked_databases": ("servers",), "tracked_server": ("servers",)}

# tiny pools, so that keys collide, fields repeat and every type meets every name
KEY_NAMES = st.sampled_from([b"emq:{q}:pending", b"emq:{q}:job:j1", b"", b"\x00\xff", b"k" * 300, b"s p a c e"])
BYTES = st.one_of(st.sampled_from([b"", b"lease_epoch", b"\x00", b"\xff\xfe", b"x" * 70_000]), st.binary(max_size=40))
SCORES = st.one_of(
    st.sampled_from(["inf", "-inf", "0", "-0", "1e3", "1.5", "123456789012345", "9007199254740993"]),
    st.floats(allow_nan=False).map(repr),
)
WRITES = st.one_of(
    st.tuples(st.just(b"SET"), KEY_NAMES, BYTES),
    st.tuples(st.just(b"HSET"), KEY_NAMES, st.sampled_from([b"lease_epoch", b"state", b"", b"\xff"]), BYTES),
    st.tuples(st.just(b"SADD"), KEY_NAMES, BYTES),
    st.tuples(st.just(b"ZADD"), KEY_NAMES, SCORES.map(str.encode), BYTES),
    st.tuples(st.just(b"RPUSH"), KEY_NAMES, BYTES),
    st.tuples(st.just(b"XADD"), KEY_NAMES, st.just(b"*"), st.just(b"f"), BYTES),
    st.tuples(st.just(b"PEXPIRE"), KEY_NAMES, st.integers(1, 10**12).map(lambda ms: str(ms).encode())),
    st.tuples(st.just(b"DEL"), KEY_NAMES),
)


def _walks(wire: Wire) -> tuple[Any, Any]:
    script = wire.call(b"EVAL", CANONICAL_WALK_SCRIPT, b"0")
    module = wire.call(b"DIFFTEST.WALK")
    return parse_canonical(script), parse_canonical(module)


@pytest.fixture(scope="module")
def walked() -> Any:
    with ServerGroup() as group:
        server = group.add("native", module=DEFAULT_MODULE)
        wire = Wire(server.address)
        yield wire
        wire.close()


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(writes=st.lists(WRITES, max_size=25))
def test_the_module_walk_equals_the_script_walk(walked: Wire, writes: list[tuple[bytes, ...]]) -> None:
    walked.call(b"FLUSHALL")
    for write in writes:
        walked.call(*write)  # a write of the wrong type is refused by the server: the keyspace stays
    by_script, by_module = _walks(walked)
    assert by_module == by_script


DATABASES = st.sampled_from([0, 2, 15])


@pytest.fixture(scope="module")
def walked_databases() -> Any:
    with ServerGroup() as group:
        server = group.add("native", module=DEFAULT_MODULE)
        wires = {db: Wire(server.address, db=db) for db in (0, 2, 15)}
        yield wires
        for wire in wires.values():
            wire.close()


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(writes=st.lists(st.tuples(DATABASES, WRITES), max_size=12), home=DATABASES)
def test_the_walks_agree_on_every_database_and_leave_the_caller_on_its_own(
    walked_databases: dict[int, Wire], writes: list[tuple[int, tuple[bytes, ...]]], home: int
) -> None:
    """Every database that holds keys is walked (its keys named with their database), by both walkers
    alike, and neither moves its caller's connection off the database it selected."""
    walked_databases[0].call(b"FLUSHALL")
    for db, write in writes:
        walked_databases[db].call(*write)
    wire = walked_databases[home]
    script = parse_canonical(wire.call(b"EVAL", CANONICAL_WALK_SCRIPT, b"0", str(home).encode()))
    module = parse_canonical(wire.call(b"DIFFTEST.WALK"))
    assert module == script
    others = {unqualified(name)[0] for name in module[0]} - {None}
    expected = {db for db in (0, 2, 15) if db != home and walked_databases[db].call(b"DBSIZE")}
    assert others == expected and home not in others
    assert wire.call(b"SET", b"mine", b"1") == Simple(b"OK") and walked_databases[home].call(b"EXISTS", b"mine") == 1
    assert all(walked_databases[db].call(b"EXISTS", b"mine") == 0 for db in (0, 2, 15) if db != home)


def test_a_key_that_expired_on_the_frozen_clock_is_in_neither_walk(group: ServerGroup) -> None:
    server = group.add("lua")
    wire = Wire(server.address)
    wire.call(b"SET", b"gone", b"1", b"PX", b"100")
    wire.call(b"SET", b"kept", b"1", b"PX", b"10000")
    group.advance(500)
    by_script, by_module = _walks(wire)
    assert by_module == by_script
    snapshot, _ = by_module
    assert set(snapshot) == {b"kept"} and 0 < snapshot[b"kept"].pttl <= 9500
    wire.close()


def test_sides_walk_with_the_module_and_the_variable_chooses_the_script(
    native_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    side = NativeSide(native_server, {})
    assert side.walk_command == (*MODULE_WALK, b"SINCE", str(walker.TRACK_FROM).encode())  # tracked
    side.close()
    monkeypatch.setenv(walker.TRACK_FROM_VARIABLE, "0")
    side = NativeSide(native_server, {})
    assert side.walk_command == (*MODULE_WALK, b"SINCE", b"0")
    side.track(False)  # (a history replayed again over whole walks: kept past a reconnection)
    side.reconnect()
    assert side.walk_command == MODULE_WALK
    side.track(True)
    assert side.walk_command == (*MODULE_WALK, b"SINCE", b"0")
    side.close()
    monkeypatch.setenv(walker.CHOICE_VARIABLE, "whole")
    side = NativeSide(native_server, {})
    assert side.walk_command == MODULE_WALK
    side.close()
    monkeypatch.setenv(walker.CHOICE_VARIABLE, "lua")
    side = NativeSide(native_server, {})
    assert side.walk_command == SCRIPT_WALK
    side.close()
    monkeypatch.setenv(walker.CHOICE_VARIABLE, "fast")
    with pytest.raises(SetupProblem, match="DIFFTEST_WALKER=fast: use 'module'"):
        NativeSide(native_server, {})
    monkeypatch.setenv(walker.CHOICE_VARIABLE, "module")
    monkeypatch.setenv(walker.TRACK_FROM_VARIABLE, "many")
    with pytest.raises(SetupProblem, match="DIFFTEST_TRACK_FROM=many: give a number of keys"):
        NativeSide(native_server, {})


def test_a_server_without_the_walker_is_walked_by_the_script(group: ServerGroup) -> None:
    server = group.add("lua")
    Wire(server.address).call(b"MODULE", b"UNLOAD", b"difftestwalk")  # an attached pair from an older file
    side = NativeSide(server, {})
    assert side.walk_command == SCRIPT_WALK
    side.close()


def test_a_missing_walker_build_is_one_line_saying_how_to_build_it(
    group: ServerGroup, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(walker, "WALKER_MODULE", tmp_path / "libdifftest_walker.so")
    with pytest.raises(SetupProblem, match=r"is not built: run 'make setup'"):
        EmbeddedServer("lua", group.root / "x", group.clock)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(writes=st.lists(WRITES, min_size=1, max_size=25))
def test_the_walk_reader_reads_what_parse_canonical_reads(walked: Wire, writes: list[tuple[bytes, ...]]) -> None:
    """The replay's reader of walks (an Entry kept for each key its walk left unchanged) gives the very
    snapshot parse_canonical gives, after every write, from both walkers (the script's packs a stream's
    empty value as a map)."""
    walked.call(b"FLUSHALL")
    readers = {walk: WalkReader() for walk in ((b"EVAL", CANONICAL_WALK_SCRIPT, b"0"), MODULE_WALK)}
    before: dict[Any, Any] = {walk: {} for walk in readers}
    for write in writes:
        walked.call(*write)
        for walk, reader in readers.items():
            raw = walked.call(*walk)
            snapshot, epochs = reader.read(raw)
            assert (snapshot, epochs) == parse_canonical(raw)
            for key, entry in snapshot.items():  # unchanged keys: the same Entry as the walk before
                if before[walk].get(key) == entry:
                    assert before[walk][key] is entry
            before[walk] = snapshot


# a tracked walk's own writes: the WRITES above in two databases, RENAME, MOVE, FLUSHDB and the
# frozen clock moved (keys with a TTL vanish with no command touching them)
TRACKED_WRITES = st.one_of(
    WRITES,
    st.tuples(st.just(b"RENAME"), KEY_NAMES, KEY_NAMES),
    st.tuples(st.just(b"MOVE"), KEY_NAMES, st.just(b"2")),
    st.tuples(st.just(b"SELECT"), st.sampled_from([b"0", b"2"])),
    st.tuples(st.just(b"advance"), st.integers(1, 10**12)),
    st.just((b"FLUSHDB",)),
)


@pytest.fixture(scope="module")
def tracked_server() -> Any:
    with ServerGroup() as group:
        server = group.add("native", module=DEFAULT_MODULE)
        yield group, server


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(writes=st.lists(st.lists(TRACKED_WRITES, max_size=4), min_size=1, max_size=12), padding=st.sampled_from([0, 40]))
def test_tracked_walks_applied_step_by_step_give_the_whole_walk(
    tracked_server: tuple[ServerGroup, EmbeddedServer], writes: list[list[tuple[Any, ...]]], padding: int
) -> None:
    """The tracked walk (DIFFTEST.WALK SINCE: the keys written since the last one) applied to the
    keyspace the walks before it made is, after every batch of writes, the whole walk's keyspace, key
    for key and epoch for epoch (to every database, expiry on the frozen clock, renames and moves
    included); the server then verifies that every key is as its walks reported; and a tracked walk
    of a step that wrote nothing answers only the keys with a TTL."""
    group, server = tracked_server
    walker_wire, writer = Wire(server.address), Wire(server.address)
    walker_wire.call(b"FLUSHALL")
    for i in range(padding):  # (past half of the keyspace written, a walk is whole)
        writer.call(b"SET", b"pad%d" % i, b"x")
    snapshot, epochs = parse_canonical(walker_wire.call(b"DIFFTEST.WALK", b"SINCE", b"0"))
    tracked = 0
    for batch in writes:
        for write in batch:
            if write[0] == b"advance":
                group.advance(write[1])
            else:
                writer.call(*write)
        raw = walker_wire.call(b"DIFFTEST.WALK", b"SINCE", b"0")
        if is_tracked(raw):
            tracked += 1
            snapshot, epochs = apply_tracked(snapshot, epochs, raw)
        else:
            snapshot, epochs = parse_canonical(raw)
        assert (snapshot, epochs) == parse_canonical(walker_wire.call(b"DIFFTEST.WALK"))
        assert walker_wire.call(b"DIFFTEST.WALK", b"VERIFY") == [0]
    again = walker_wire.call(b"DIFFTEST.WALK", b"SINCE", b"0")
    if is_tracked(again):  # nothing written since: only the keys with a TTL, read again
        assert again[3] == b"\x90" and all(entry.pttl >= 0 for entry in parse_canonical(again[:3])[0].values())
    if padding and not any(write[0] == b"FLUSHDB" for batch in writes for write in batch):
        assert tracked > 0  # (the padding keeps most walks tracked)
    walker_wire.close()
    writer.close()


def test_a_write_no_event_announced_is_named_by_verify(group: ServerGroup) -> None:
    """A module's low-level write fires no keyspace event (DIFFTEST.PLANT, the walker's test-only
    command): the tracked walk does not see it, and VERIFY names the key (the replay then answers
    with whole walks); FORGET makes the next tracked walk whole, and that one is verified."""
    server = group.add("native", module=DEFAULT_MODULE)
    wire = Wire(server.address)
    unplanted = wire.call(b"DIFFTEST.PLANT", b"h", b"f", b"v")  # (not loaded with `plant`: no such command)
    assert isinstance(unplanted, ErrorReply) and "unknown command" in unplanted.message
    wire.call(b"MODULE", b"UNLOAD", b"difftestwalk")
    wire.call(b"MODULE", b"LOAD", str(walker.walker_module()).encode(), b"plant")
    for i in range(10):
        wire.call(b"HSET", b"k%d" % i, b"f", b"v")
    wire.call(b"DIFFTEST.WALK", b"SINCE", b"0")
    assert wire.call(b"DIFFTEST.WALK", b"VERIFY") == [0]
    assert wire.call(b"DIFFTEST.PLANT", b"k3", b"f", b"planted") == 1
    assert wire.call(b"HGET", b"k3", b"f") == b"planted"
    raw = wire.call(b"DIFFTEST.WALK", b"SINCE", b"0")
    assert is_tracked(raw) and parse_canonical(raw[:2])[0] == {}  # unseen by the events
    assert wire.call(b"DIFFTEST.WALK", b"VERIFY") == [1, 0, b"k3"]
    wire.call(b"DIFFTEST.WALK", b"FORGET")
    assert not is_tracked(wire.call(b"DIFFTEST.WALK", b"SINCE", b"0"))  # whole again
    assert wire.call(b"DIFFTEST.WALK", b"VERIFY") == [0]
    assert isinstance(wire.call(b"DIFFTEST.WALK", b"SINCE", b"x"), ErrorReply)
    assert isinstance(wire.call(b"DIFFTEST.WALK", b"NOW"), ErrorReply)
    wire.close()
