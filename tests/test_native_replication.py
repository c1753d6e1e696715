"""The native module's writes are propagated as their effects: replicas and the AOF see them.

A replica follows a primary running the module; after every transition of a scripted history the
primary waits for the replica's acknowledgement (WAIT 1), then both keyspaces are compared whole,
`lease_epoch` fields included. A crash reloads the same keyspace from the AOF, and the AOF holds
the effects (HSET, ZADD, ...), never an `EMQ.*` command.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from difftest.history.format import RawWrite
from difftest.replay.sides import NativeSide
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer
from difftest.spec import errors
from difftest.spec.calls import Call, as_bytes
from difftest.spec.replies import ErrorReply, Reply, Simple
from difftest.spec.snapshot import take_snapshot
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import T0, Q

# the frozen clock would hold a diskless sync's start delay (in wall seconds) forever
PRIMARY_CONFIG = ["--repl-diskless-sync-delay", "0"]
LINK_TIMEOUT_S = 20.0


def run(host: NativeSide, verb: str, *args: bytes | str | int) -> Reply:
    return host.call(Call.of(verb, "q", *args))


Step = tuple[str, Callable[[NativeSide, ServerGroup], Reply], Reply]


def step(verb: str, *args: bytes | str | int, reply: Reply) -> Step:
    return (f"{verb} {args}", lambda host, _group: run(host, verb, *args), reply)


def advance(ms: int) -> Step:
    def move(_host: NativeSide, group: ServerGroup) -> Reply:
        group.advance(ms)
        return None

    return (f"advance {ms}", move, None)


def corrupt(*command: bytes | str | int, reply: Reply) -> Step:
    """A plain command as a history's corruption: sent as the admin, on the side's connection."""
    raw = RawWrite(tuple(as_bytes(part) for part in command))
    return (f"{command}", lambda host, _group: host.run([raw])[0], reply)


WRONGTYPE = ErrorReply("WRONGTYPE Operation against a key holding the wrong kind of value")

# a history that takes every transition through its writing paths, refusals included
HISTORY: list[Step] = [
    step("ENQUEUE", "j1", "p1", 0, reply=1),
    step("ENQUEUE", "j2", b"\x00\xff\r\n", 0, reply=1),
    step("ENQUEUE", "j3", "p3", 50, reply=1),
    step("ENQUEUE", b"k\x00", "p4", 0, reply=1),
    step("ENQUEUE", "j1", "again", 0, reply=0),
    step("CLAIM", 100, reply=[b"j1", b"p1", 1]),
    step("CLAIM", 30, reply=[b"j2", b"\x00\xff\r\n", 1]),
    advance(10),
    step("EXTEND", "j1", 1, 200, reply=1),
    step("EXTEND", "j1", 2, 200, reply=0),
    step("COMPLETE", "j1", 1, reply=1),
    step("FAIL", "j2", 1, b"boom\x00", 3, 40, reply=b"retry"),
    advance(50),
    step("PROMOTE", 10, reply=2),
    step("CLAIM", 20, reply=[b"k\x00", b"p4", 1]),
    step("CLAIM", 20, reply=[b"j2", b"\x00\xff\r\n", 2]),
    step("FAIL", "j2", 2, "fatal", 2, 0, reply=b"dead"),
    step("REVIVE", "j2", reply=1),
    step("CLAIM", 20, reply=[b"j3", b"p3", 1]),
    step("CLAIM", 20, reply=[b"j2", b"\x00\xff\r\n", 3]),
    advance(20),
    step("SWEEP", 2, 1, reply=[1, 0, 0, 0]),  # j2 first, by member order
    step("SWEEP", 1, 10, reply=[0, 2, 0, 0]),  # j3 and k\x00
    corrupt("ZADD", Q + "active", T0, "ghost", reply=1),
    corrupt("ZADD", Q + "active", T0, "foreign", reply=1),
    corrupt("HSET", Q + "job:foreign", "state", "active", "lease_epoch", "R0", reply=2),
    step("SWEEP", 5, 10, reply=[0, 0, 1, 1]),
    step("PAUSE", reply=1),
    step("CLAIM", 20, reply=[]),
    step("RESUME", reply=1),
    step("RESUME", reply=0),
    step("CLAIM", 20, reply=[b"foreign", None, 1]),
    corrupt("ZADD", Q + "pending", 0, "ghost2", reply=1),
    step("CLAIM", 20, reply=[]),  # a ghost: ZPOPMIN alone
    corrupt("SET", Q + "done", "junk", reply=Simple(b"OK")),  # a status reply, typed as such
    step("CLAIM", 20, reply=[b"j2", b"\x00\xff\r\n", 4]),
    step("COMPLETE", "j2", 4, reply=WRONGTYPE),  # D3: nothing written, nothing propagated
    corrupt("HSET", Q + "metrics:failed", "count", "x", reply=0),
    step("FAIL", "j2", 4, "e", 1, 0, reply=ErrorReply(errors.NOTINT)),
    step("FAIL", "j2", 4, "e", 5, 0, reply=b"retry"),
    step("ENQUEUE", "j5", "p", "-1", reply=ErrorReply(errors.ARG)),
]


def wait_for_link(replica: EmbeddedServer) -> None:
    deadline = time.monotonic() + LINK_TIMEOUT_S
    while replica.client.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica never linked to its primary"
        time.sleep(0.02)


def caught_up(host: NativeSide) -> None:
    """WAIT returns once the replica acknowledged every write so far of the connection that sends
    it: the side's admin connection, which sent all the history's writes. Deterministic."""
    assert host.wires[None].call(b"WAIT", 1, 10000) == 1


@pytest.fixture
def pair(group: ServerGroup) -> tuple[EmbeddedServer, EmbeddedServer]:
    primary = group.add("primary", module=DEFAULT_MODULE, tcp_port=0, extra_config=PRIMARY_CONFIG)
    replica = group.add("replica", module=DEFAULT_MODULE, tcp_port=0)
    replica.client.execute_command("REPLICAOF", "127.0.0.1", str(primary.tcp_port))
    wait_for_link(replica)
    return primary, replica


def aof_bytes(server: EmbeddedServer) -> bytes:
    files = sorted((server.workdir / "appendonlydir").iterdir())
    assert files, "no AOF files"
    return b"".join(Path(f).read_bytes() for f in files)


def test_the_replica_follows_every_transition(pair: tuple[EmbeddedServer, EmbeddedServer], group: ServerGroup) -> None:
    primary, replica = pair
    host = NativeSide(primary, {})
    for label, action, reply in HISTORY:
        assert action(host, group) == reply, label
        caught_up(host)
        assert take_snapshot(replica.client) == take_snapshot(primary.client), label
    # the epochs on the replica are the primary's, as the primary stamped them
    epochs = {
        key: entry.value.get(b"lease_epoch")
        for key, entry in take_snapshot(replica.client).items()
        if key.startswith(b"emq:{q}:job:") and isinstance(entry.value, dict)
    }
    assert set(epochs) == {b"emq:{q}:job:" + j for j in (b"j1", b"j2", b"j3", b"k\x00", b"foreign")}
    assert set(epochs.values()) == {primary.run_id.encode()}  # "foreign" was re-stamped by CLAIM
    assert replica.run_id != primary.run_id
    # the module's commands reached neither AOF: only their effects did
    for server in (primary, replica):
        data = aof_bytes(server)
        assert b"emq." not in data.lower()
        for effect in (b"ZPOPMIN", b"HINCRBY", b"lease_epoch", b"ZREM"):
            assert effect in data


def test_the_replica_follows_a_restarted_primary(
    pair: tuple[EmbeddedServer, EmbeddedServer], group: ServerGroup
) -> None:
    """D7 across replication: the lease outlives the primary's restart, the sweep exempts it."""
    primary, replica = pair
    host = NativeSide(primary, {})
    assert run(host, "ENQUEUE", "j1", "p", 0) == 1
    assert run(host, "CLAIM", 100) == [b"j1", b"p", 1]
    first = primary.run_id
    primary.restart()
    wait_for_link(replica)
    group.advance(200)  # the side connects again at its next call
    assert run(host, "SWEEP", 1, 10) == [0, 0, 0, 1]
    assert run(host, "CLAIM", 100) == [b"j1", b"p", 2]
    caught_up(host)
    assert take_snapshot(replica.client) == take_snapshot(primary.client)
    assert replica.client.hget(Q + "job:j1", "lease_epoch") == primary.run_id.encode() != first


@pytest.mark.parametrize("how", ["crash", "restart"])
def test_the_aof_reloads_the_same_keyspace(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup, how: str
) -> None:
    for label, action, reply in HISTORY:
        assert action(native, group) == reply, label
    before = take_snapshot(native_server.client)
    assert len(before) >= 10
    pid = native_server.pid
    getattr(native_server, how)()
    assert native_server.pid != pid
    assert take_snapshot(native_server.client) == before
    data = aof_bytes(native_server)
    assert b"emq." not in data.lower()
    assert b"MULTI" in data and b"ZPOPMIN" in data


def test_a_refused_call_appends_nothing_to_the_aof(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    native_server.client.set(Q + "active", "junk")
    size = len(aof_bytes(native_server))
    assert run(native, "CLAIM", 100) == WRONGTYPE  # D5
    assert run(native, "CLAIM", "x") == ErrorReply(errors.NOTINT)
    assert run(native, "RESUME") == 0
    assert len(aof_bytes(native_server)) == size
    assert run(native, "PAUSE") == 1
    assert len(aof_bytes(native_server)) > size
