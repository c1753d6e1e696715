"""Every transition of the native executor against a real server: exact replies, exact keyspaces.

The native column of the contract (docs/contract.md): N1's `lease_epoch`, D7's exemption,
and every refusal (D2-D6, D8, D9) answered with its exact error and nothing written. "Nothing
written" is checked twice: the whole keyspace is equal before and after, and the server's dirty
counter (`rdb_changes_since_last_save`) did not move, so even a write of an equal value shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import pytest
from valkey.exceptions import ResponseError

from difftest.replay.sides import NativeSide
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer
from difftest.spec import errors
from difftest.spec.calls import Call
from difftest.spec.commands import I64_MAX, MAX_DURATION_MS, TRANSITIONS, ArgKind
from difftest.spec.replies import ErrorReply, Reply
from difftest.spec.snapshot import take_snapshot
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import T0, H, Q, S, Z, assert_keyspace

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"shared_group": ("servers",)}

PENDING, ACTIVE, DELAYED, DEAD, DONE = (Q + s for s in ("pending", "active", "delayed", "dead", "done"))
META, FAILED, COMPLETED = Q + "meta", Q + "metrics:failed", Q + "metrics:completed"
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
I64 = str(I64_MAX)


def row(job: str) -> str:
    return Q + "job:" + job


def run(host: NativeSide, verb: str, *args: bytes | str | int, user: str | None = None) -> Reply:
    return host.call(Call.of(verb, "q", *args), user)


def dirty(server: EmbeddedServer) -> int:
    return int(server.client.info("persistence")["rdb_changes_since_last_save"])


def refused(server: EmbeddedServer, host: NativeSide, call: Call, message: str, user: str | None = None) -> None:
    """The call answers exactly `message` and writes nothing at all."""
    before, changes = take_snapshot(server.client), dirty(server)
    assert host.call(call, user) == ErrorReply(message)
    assert take_snapshot(server.client) == before
    assert dirty(server) == changes


def refuses(
    server: EmbeddedServer, host: NativeSide, verb: str, *args: bytes | str | int, message: str, user: str | None = None
) -> None:
    refused(server, host, Call.of(verb, "q", *args), message, user)


def enqueue_and_claim(host: NativeSide, job: str = "j1", lease: int = 100) -> None:
    assert run(host, "ENQUEUE", job, "p", 0) == 1
    assert run(host, "CLAIM", lease) == [job.encode(), b"p", 1]


def claimed(epoch: str, enqueued_at: int = T0, attempts: int = 1, **more: object) -> object:
    """The row of a job claimed on this server (payload "p")."""
    fields = {"payload": "p", "state": "active", "enqueued_at": enqueued_at, "attempts": attempts}
    return H({**fields, "lease_epoch": epoch, **more})


def waiting(enqueued_at: int = T0, **more: object) -> object:
    return H(payload="p", state="pending", enqueued_at=enqueued_at, **more)


# -- ENQUEUE -------------------------------------------------------------------------------------


def test_enqueue_now_goes_to_pending(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    assert_keyspace(native_server.client, {PENDING: Z(j1=T0), row("j1"): waiting()})


def test_enqueue_with_delay_goes_to_delayed(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 500) == 1
    assert_keyspace(
        native_server.client,
        {DELAYED: Z(j1=T0 + 500), row("j1"): H(payload="p", state="delayed", enqueued_at=T0)},
    )


def test_enqueue_delay_at_the_maximum(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", MAX_DURATION_MS) == 1
    assert native_server.client.zscore(DELAYED, "j1") == T0 + MAX_DURATION_MS


def test_enqueue_duplicate_writes_nothing(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    group.advance(7)
    changes = dirty(native_server)
    assert run(native, "ENQUEUE", "j1", "other", 50) == 0
    assert run(native, "ENQUEUE", "j1", "p", 0) == 0
    assert dirty(native_server) == changes
    assert_keyspace(native_server.client, {PENDING: Z(j1=T0), row("j1"): waiting()})


@pytest.mark.parametrize(
    "setup",
    [
        lambda c: c.set(row("j1"), "junk"),
        lambda c: c.zadd(row("j1"), {"m": 1}),
        lambda c: c.rpush(row("j1"), "x"),
        lambda c: c.hset(row("j1"), "other", "x"),
    ],
    ids=["string", "zset", "list", "hash"],
)
def test_enqueue_over_a_row_of_any_type_is_a_duplicate(
    native: NativeSide, native_server: EmbeddedServer, setup: Callable[[object], object]
) -> None:
    setup(native_server.client)
    before, changes = take_snapshot(native_server.client), dirty(native_server)
    assert run(native, "ENQUEUE", "j1", "p", 0) == 0
    assert run(native, "ENQUEUE", "j1", "p", 9) == 0
    assert take_snapshot(native_server.client) == before
    assert dirty(native_server) == changes


def test_enqueue_takes_arbitrary_bytes(native: NativeSide, native_server: EmbeddedServer) -> None:
    job, payload = b"\x00\xff id\r\n", b"\xc3\x28\x00"
    assert native.call(Call.of("ENQUEUE", "q", job, payload, 0)) == 1
    assert native.call(Call.of("ENQUEUE", "q", b"", b"", 0)) == 1
    assert native.call(Call.of("CLAIM", "q", 10)) == [b"", b"", 1]  # same ms: member order
    assert native.call(Call.of("CLAIM", "q", 10)) == [job, payload, 1]
    epoch = native_server.run_id
    assert_keyspace(
        native_server.client,
        {
            ACTIVE: Z({job: T0 + 10, b"": T0 + 10}),
            row("").encode() + job: H(payload=payload, state="active", enqueued_at=T0, attempts=1, lease_epoch=epoch),
            row(""): H(payload=b"", state="active", enqueued_at=T0, attempts=1, lease_epoch=epoch),
        },
    )


@pytest.mark.parametrize("queue", [b"a:b", b"\x00\xff", b"q q", b"\r\n", b"emq:"])
def test_enqueue_on_an_odd_queue_name(native: NativeSide, native_server: EmbeddedServer, queue: bytes) -> None:
    base = b"emq:{" + queue + b"}:"
    assert native.call(Call.of("ENQUEUE", queue, "j1", "p", 0)) == 1
    assert native.call(Call.of("CLAIM", queue, 10)) == [b"j1", b"p", 1]
    assert_keyspace(
        native_server.client,
        {base + b"active": Z(j1=T0 + 10), base + b"job:j1": claimed(native_server.run_id)},
    )


@pytest.mark.parametrize(("delay", "wrong"), [(0, PENDING), (5, DELAYED)])
def test_enqueue_d3_set_wrong_type_writes_nothing(
    native: NativeSide, native_server: EmbeddedServer, delay: int, wrong: str
) -> None:
    native_server.client.set(wrong, "junk")
    refuses(native_server, native, "ENQUEUE", "j1", "p", delay, message=WRONGTYPE)
    assert_keyspace(native_server.client, {wrong: S("junk")})


def test_enqueue_now_never_touches_delayed(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.set(DELAYED, "junk")
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    assert_keyspace(native_server.client, {DELAYED: S("junk"), PENDING: Z(j1=T0), row("j1"): waiting()})


def test_enqueue_later_never_touches_pending(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.set(PENDING, "junk")
    assert run(native, "ENQUEUE", "j1", "p", 3) == 1
    assert_keyspace(
        native_server.client,
        {
            PENDING: S("junk"),
            DELAYED: Z(j1=T0 + 3),
            row("j1"): H(payload="p", state="delayed", enqueued_at=T0),
        },
    )


# -- CLAIM ---------------------------------------------------------------------------------------


def test_claim_empty_queue(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "CLAIM", 100) == []
    assert_keyspace(native_server.client, {})
    assert dirty(native_server) == 0


def test_claim_n1_plain_claim_stamps_the_run_id(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    group.set_time(1000)
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    assert run(native, "CLAIM", 100) == [b"j1", b"p", 1]
    epoch = native_server.run_id
    assert len(epoch) == 40
    assert_keyspace(native_server.client, {ACTIVE: Z(j1=1100), row("j1"): claimed(epoch, 1000)})


def test_claim_n1_after_a_restart_stamps_the_new_run_id(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    assert run(native, "ENQUEUE", "j2", "p", 0) == 1
    first = native_server.run_id
    assert run(native, "CLAIM", 100) == [b"j1", b"p", 1]
    native_server.restart()
    second = native_server.run_id
    assert second != first
    assert run(native, "CLAIM", 100) == [b"j2", b"p", 1]  # the side connects again first
    assert_keyspace(
        native_server.client,
        {
            ACTIVE: Z(j1=T0 + 100, j2=T0 + 100),
            row("j1"): claimed(first),
            row("j2"): claimed(second),
        },
    )


def test_claim_takes_the_oldest_first(native: NativeSide, group: ServerGroup) -> None:
    assert run(native, "ENQUEUE", "b", "p", 0) == 1
    assert run(native, "ENQUEUE", "a", "p", 0) == 1  # same ms: ties go by member order
    group.advance(1)
    assert run(native, "ENQUEUE", "0-later", "p", 0) == 1
    assert run(native, "CLAIM", 10) == [b"a", b"p", 1]
    assert run(native, "CLAIM", 10) == [b"b", b"p", 1]
    assert run(native, "CLAIM", 10) == [b"0-later", b"p", 1]
    assert run(native, "CLAIM", 10) == []


def test_claim_lease_at_the_maximum_is_accepted(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    assert run(native, "CLAIM", MAX_DURATION_MS) == [b"j1", b"p", 1]
    assert native_server.client.zscore(ACTIVE, "j1") == T0 + MAX_DURATION_MS


def test_claim_ghost_is_consumed_and_nothing_minted(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.zadd(PENDING, {"ghost": 5, "j1": 6})
    native_server.client.hset(row("j1"), mapping={"payload": "p", "state": "pending"})
    assert run(native, "CLAIM", 100) == []
    assert_keyspace(native_server.client, {PENDING: Z(j1=6), row("j1"): H(payload="p", state="pending")})


def test_claim_ghost_never_touches_active(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.zadd(PENDING, {"ghost": 5})
    native_server.client.set(ACTIVE, "junk")
    assert run(native, "CLAIM", 100) == []
    assert_keyspace(native_server.client, {ACTIVE: S("junk")})


def test_claim_empty_pending_never_touches_active(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.set(ACTIVE, "junk")
    assert run(native, "CLAIM", 100) == []
    assert_keyspace(native_server.client, {ACTIVE: S("junk")})


@pytest.mark.parametrize("flag", [b"1", b"0", b"", b"\x00"])
def test_claim_any_paused_value_answers_empty(native: NativeSide, native_server: EmbeddedServer, flag: bytes) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    native_server.client.hset(META, "paused", flag)
    changes = dirty(native_server)
    assert run(native, "CLAIM", 100) == []
    assert dirty(native_server) == changes
    assert_keyspace(native_server.client, {META: H(paused=flag), PENDING: Z(j1=T0), row("j1"): waiting()})


def test_claim_other_meta_fields_do_not_pause(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    native_server.client.hset(META, "other", "1")
    assert run(native, "CLAIM", 100) == [b"j1", b"p", 1]


@pytest.mark.parametrize(
    "setup",
    [lambda c: c.set(META, "junk"), lambda c: c.rpush(META, "x"), lambda c: c.zadd(META, {"a": 1})],
    ids=["string", "list", "zset"],
)
def test_claim_d2_wrongtype_meta_is_that_error(
    native: NativeSide, native_server: EmbeddedServer, setup: Callable[[object], object]
) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    setup(native_server.client)
    refuses(native_server, native, "CLAIM", 100, message=WRONGTYPE)


def test_claim_d2_noperm_meta_is_that_error(native_server: EmbeddedServer) -> None:
    native = NativeSide(
        native_server, {"worker": ("~emq:{q}:pending", "~emq:{q}:active", "~emq:{q}:", "~emq:{q}:job:*")}
    )
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    refuses(native_server, native, "CLAIM", 100, message=errors.NOPERM, user="worker")
    assert_keyspace(native_server.client, {PENDING: Z(j1=T0), row("j1"): waiting()})


def test_claim_pending_wrong_type(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.set(PENDING, "junk")
    refuses(native_server, native, "CLAIM", 100, message=WRONGTYPE)


@pytest.mark.parametrize(
    "setup",
    [
        lambda c: c.set(row("j9"), "junk"),
        lambda c: c.rpush(row("j9"), "x"),
        lambda c: c.zadd(row("j9"), {"attempts": 1}),
        lambda c: c.sadd(row("j9"), "x"),
    ],
    ids=["string", "list", "zset", "set"],
)
def test_claim_d3_head_row_not_a_hash_keeps_the_id(
    native: NativeSide, native_server: EmbeddedServer, setup: Callable[[object], object]
) -> None:
    native_server.client.zadd(PENDING, {"j9": 5, "j10": 6})
    setup(native_server.client)
    refuses(native_server, native, "CLAIM", 100, message=WRONGTYPE)
    assert native_server.client.zrange(PENDING, 0, -1) == [b"j9", b"j10"]


@pytest.mark.parametrize(
    ("attempts", "message"),
    [
        ("abc", errors.NOTINT),
        ("", errors.NOTINT),
        ("01", errors.NOTINT),
        ("1.5", errors.NOTINT),
        (" 1", errors.NOTINT),
        ("99999999999999999999", errors.NOTINT),  # HINCRBY: out of i64 is "not an integer"
        (I64, errors.OVERFLOW),
    ],
)
def test_claim_d4_bad_attempts_writes_nothing(
    native: NativeSide, native_server: EmbeddedServer, attempts: str, message: str
) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    native_server.client.hset(row("j1"), "attempts", attempts)
    refuses(native_server, native, "CLAIM", 100, message=message)
    assert_keyspace(native_server.client, {PENDING: Z(j1=T0), row("j1"): waiting(attempts=attempts)})


@pytest.mark.parametrize(("attempts", "next_attempt"), [("-5", -4), ("0", 1), ("41", 42)])
def test_claim_increments_any_integer_attempts(
    native: NativeSide, native_server: EmbeddedServer, attempts: str, next_attempt: int
) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    native_server.client.hset(row("j1"), "attempts", attempts)
    assert run(native, "CLAIM", 100) == [b"j1", b"p", next_attempt]
    assert native_server.client.hget(row("j1"), "attempts") == str(next_attempt).encode()


def test_claim_attempts_just_below_i64_max(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    native_server.client.hset(row("j1"), "attempts", str(I64_MAX - 1))
    assert run(native, "CLAIM", 100) == [b"j1", b"p", I64_MAX]  # exact: no double rounding


@pytest.mark.parametrize(
    "setup",
    [lambda c: c.set(ACTIVE, "junk"), lambda c: c.hset(ACTIVE, "a", "b")],
    ids=["string", "hash"],
)
def test_claim_d5_active_not_a_zset_writes_nothing(
    native: NativeSide, native_server: EmbeddedServer, setup: Callable[[object], object]
) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    setup(native_server.client)
    refuses(native_server, native, "CLAIM", 100, message=WRONGTYPE)
    assert native_server.client.zrange(PENDING, 0, -1) == [b"j1"]
    assert native_server.client.hgetall(row("j1")) == {
        b"payload": b"p",
        b"state": b"pending",
        b"enqueued_at": str(T0).encode(),
    }


def test_claim_row_without_payload_answers_nil(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.zadd(PENDING, {"j1": 5})
    native_server.client.hset(row("j1"), "state", "pending")
    assert run(native, "CLAIM", 100) == [b"j1", None, 1]
    assert_keyspace(
        native_server.client,
        {
            ACTIVE: Z(j1=T0 + 100),
            row("j1"): H(state="active", attempts=1, lease_epoch=native_server.run_id),
        },
    )


def test_claim_overwrites_a_foreign_lease_epoch(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    native_server.client.hset(row("j1"), "lease_epoch", "R0")
    assert run(native, "CLAIM", 100) == [b"j1", b"p", 1]
    assert native_server.client.hget(row("j1"), "lease_epoch") == native_server.run_id.encode()


# -- EXTEND --------------------------------------------------------------------------------------


def test_extend_moves_the_deadline(native: NativeSide, native_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(native)
    group.advance(60)
    assert run(native, "EXTEND", "j1", 1, 500) == 1
    assert_keyspace(
        native_server.client,
        {ACTIVE: Z(j1=T0 + 560), row("j1"): claimed(native_server.run_id)},
    )


def test_extend_can_shorten_and_reaches_the_maximum(native: NativeSide, native_server: EmbeddedServer) -> None:
    enqueue_and_claim(native, lease=1000)
    assert run(native, "EXTEND", "j1", 1, 1) == 1
    assert native_server.client.zscore(ACTIVE, "j1") == T0 + 1
    assert run(native, "EXTEND", "j1", 1, MAX_DURATION_MS) == 1
    assert native_server.client.zscore(ACTIVE, "j1") == T0 + MAX_DURATION_MS


def test_extend_n1_after_a_restart_restamps_the_new_run_id(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    enqueue_and_claim(native)
    first = native_server.run_id
    native_server.restart()
    second = native_server.run_id
    assert second != first
    group.advance(50)
    assert run(native, "EXTEND", "j1", 1, 100) == 1
    assert_keyspace(native_server.client, {ACTIVE: Z(j1=T0 + 150), row("j1"): claimed(second)})
    # the re-stamped lease is this process's: its expiry is a stall, counted
    group.advance(100)
    assert run(native, "SWEEP", 1, 10) == [0, 1, 0, 0]


def test_extend_stamps_a_lease_taken_without_an_epoch(native: NativeSide, native_server: EmbeddedServer) -> None:
    """A lease the Lua scripts granted before the upgrade gets the epoch on its first extend."""
    native_server.client.zadd(ACTIVE, {"j1": T0 + 5})
    native_server.client.hset(row("j1"), mapping={"payload": "p", "state": "active", "attempts": 3})
    assert run(native, "EXTEND", "j1", 3, 20) == 1
    assert_keyspace(
        native_server.client,
        {
            ACTIVE: Z(j1=T0 + 20),
            row("j1"): H(payload="p", state="active", attempts=3, lease_epoch=native_server.run_id),
        },
    )


@pytest.mark.parametrize(("job", "token"), [("j1", 2), ("j1", 0), ("j1", I64), ("nope", 1)])
def test_extend_fence_refuses(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup, job: str, token: int
) -> None:
    enqueue_and_claim(native)
    group.advance(60)
    before, changes = take_snapshot(native_server.client), dirty(native_server)
    assert run(native, "EXTEND", job, token, 500) == 0
    assert take_snapshot(native_server.client) == before
    assert dirty(native_server) == changes


@pytest.mark.parametrize("attempts", ["01", "abc", "", " 1", "1.0"])
def test_extend_corrupt_attempts_fails_the_fence(
    native: NativeSide, native_server: EmbeddedServer, attempts: str
) -> None:
    enqueue_and_claim(native)
    native_server.client.hset(row("j1"), "attempts", attempts)
    before = take_snapshot(native_server.client)
    assert run(native, "EXTEND", "j1", 1, 500) == 0
    assert run(native, "COMPLETE", "j1", 1) == 0
    assert run(native, "FAIL", "j1", 1, "e", 1, 0) == 0
    assert take_snapshot(native_server.client) == before


def test_extend_not_active_is_refused(native: NativeSide, native_server: EmbeddedServer) -> None:
    """The row says attempts 1, but the id is not in active: the fence holds nothing."""
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    native_server.client.hset(row("j1"), "attempts", "1")
    before = take_snapshot(native_server.client)
    assert run(native, "EXTEND", "j1", 1, 500) == 0
    assert run(native, "COMPLETE", "j1", 1) == 0
    assert run(native, "FAIL", "j1", 1, "e", 1, 0) == 0
    assert take_snapshot(native_server.client) == before


def test_extend_active_ghost_fails_the_fence(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.zadd(ACTIVE, {"j1": T0 + 100})
    assert run(native, "EXTEND", "j1", 1, 500) == 0
    assert run(native, "COMPLETE", "j1", 1) == 0
    assert run(native, "FAIL", "j1", 1, "e", 1, 0) == 0
    assert_keyspace(native_server.client, {ACTIVE: Z(j1=T0 + 100)})


@pytest.mark.parametrize(
    ("verb", "args"),
    [
        ("EXTEND", ("j1", 1, 500)),
        ("COMPLETE", ("j1", 1)),
        ("FAIL", ("j1", 1, "e", 3, 0)),
    ],
)
def test_fence_reads_wrong_type_active_or_row(
    native: NativeSide, native_server: EmbeddedServer, verb: str, args: tuple[object, ...]
) -> None:
    native_server.client.set(ACTIVE, "junk")
    refuses(native_server, native, verb, *args, message=WRONGTYPE)  # type: ignore[arg-type]
    native_server.client.delete(ACTIVE)
    native_server.client.zadd(ACTIVE, {"j1": T0 + 100})
    native_server.client.set(row("j1"), "junk")
    refuses(native_server, native, verb, *args, message=WRONGTYPE)  # type: ignore[arg-type]


# -- COMPLETE ------------------------------------------------------------------------------------


def test_complete_moves_to_done_and_counts(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    enqueue_and_claim(native)
    group.advance(30)
    assert run(native, "COMPLETE", "j1", 1) == 1
    assert run(native, "COMPLETE", "j1", 1) == 0  # not in active any more
    assert run(native, "EXTEND", "j1", 1, 10) == 0
    assert_keyspace(
        native_server.client,
        {
            DONE: Z(j1=T0 + 30),
            row("j1"): H(
                payload="p", state="done", enqueued_at=T0, attempts=1, finished_at=T0 + 30,
                lease_epoch=native_server.run_id,
            ),
            COMPLETED: H(count=1),
        },
    )  # fmt: skip


def test_complete_counts_on(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.hset(COMPLETED, mapping={"count": 41, "other": "x"})
    enqueue_and_claim(native)
    assert run(native, "COMPLETE", "j1", 1) == 1
    assert native_server.client.hgetall(COMPLETED) == {b"count": b"42", b"other": b"x"}


def test_complete_stale_token_is_refused(native: NativeSide, native_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(native, lease=10)
    group.advance(10)
    assert run(native, "SWEEP", 5, 10) == [1, 0, 0, 0]
    assert run(native, "CLAIM", 10) == [b"j1", b"p", 2]
    changes = dirty(native_server)
    assert run(native, "COMPLETE", "j1", 1) == 0  # the first worker's token is stale
    assert run(native, "EXTEND", "j1", 1, 99) == 0
    assert run(native, "FAIL", "j1", 1, "e", 1, 0) == 0
    assert dirty(native_server) == changes
    assert run(native, "COMPLETE", "j1", 2) == 1


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda c: c.set(DONE, "junk"), WRONGTYPE),
        (lambda c: c.hset(DONE, "a", "b"), WRONGTYPE),
        (lambda c: c.set(COMPLETED, "junk"), WRONGTYPE),
        (lambda c: c.zadd(COMPLETED, {"count": 1}), WRONGTYPE),
        (lambda c: c.hset(COMPLETED, "count", "x"), errors.NOTINT),
        (lambda c: c.hset(COMPLETED, "count", ""), errors.NOTINT),
        (lambda c: c.hset(COMPLETED, "count", "1.0"), errors.NOTINT),
        (lambda c: c.hset(COMPLETED, "count", I64), errors.OVERFLOW),
    ],
    ids=["done-string", "done-hash", "metrics-string", "metrics-zset", "count-x",
         "count-empty", "count-float", "count-i64max"],
)  # fmt: skip
def test_complete_d3_d4_writes_nothing(
    native: NativeSide,
    native_server: EmbeddedServer,
    setup: Callable[[object], object],
    message: str,
) -> None:
    enqueue_and_claim(native)
    setup(native_server.client)
    refuses(native_server, native, "COMPLETE", "j1", 1, message=message)
    assert native_server.client.zscore(ACTIVE, "j1") == T0 + 100


# -- FAIL ----------------------------------------------------------------------------------------


def test_fail_retries_after_backoff(native: NativeSide, native_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(native)
    group.advance(20)
    assert run(native, "FAIL", "j1", 1, b"boom\x00\xff", 3, 250) == b"retry"
    assert run(native, "FAIL", "j1", 1, b"boom", 3, 250) == 0  # no longer active
    assert_keyspace(
        native_server.client,
        {
            DELAYED: Z(j1=T0 + 270),
            row("j1"): H(
                payload="p", state="delayed", enqueued_at=T0, attempts=1,
                last_error=b"boom\x00\xff", lease_epoch=native_server.run_id,
            ),
        },
    )  # fmt: skip
    group.advance(250)
    assert run(native, "PROMOTE", 10) == 1
    assert run(native, "CLAIM", 10) == [b"j1", b"p", 2]


def test_fail_backoff_zero_and_maximum(native: NativeSide, native_server: EmbeddedServer) -> None:
    enqueue_and_claim(native, "a")
    enqueue_and_claim(native, "b")
    assert run(native, "FAIL", "a", 1, "e", 5, 0) == b"retry"
    assert run(native, "FAIL", "b", 1, "e", 5, MAX_DURATION_MS) == b"retry"
    assert native_server.client.zrange(DELAYED, 0, -1, withscores=True) == [
        (b"a", T0), (b"b", T0 + MAX_DURATION_MS)
    ]  # fmt: skip


def test_fail_at_max_attempts_dead_letters(native: NativeSide, native_server: EmbeddedServer) -> None:
    enqueue_and_claim(native)
    assert run(native, "FAIL", "j1", 1, "", 1, 250) == b"dead"
    assert run(native, "FAIL", "j1", 1, "boom", 1, 250) == 0
    assert_keyspace(
        native_server.client,
        {
            DEAD: Z(j1=0),
            FAILED: H(count=1),
            row("j1"): H(
                payload="p", state="dead", enqueued_at=T0, attempts=1, last_error="",
                lease_epoch=native_server.run_id,
            ),
        },
    )  # fmt: skip


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "verdict"),
    [
        ("1", 1, b"dead"),
        ("1", 2, b"retry"),
        ("9", 10, b"retry"),
        ("10", 9, b"dead"),
        ("10", 10, b"dead"),
        ("10", 11, b"retry"),
        ("100", 99, b"dead"),
        ("99", 100, b"retry"),
        ("0", 1, b"retry"),
        (I64, I64_MAX, b"dead"),
        (str(I64_MAX - 1), I64_MAX, b"retry"),
        (I64, I64_MAX - 1, b"dead"),
        ("9007199254740993", 9007199254740992, b"dead"),  # above 2^53: doubles would tie
        ("9007199254740992", 9007199254740993, b"retry"),
    ],
)
def test_fail_compares_attempts_exactly(
    native: NativeSide,
    native_server: EmbeddedServer,
    attempts: str,
    max_attempts: int,
    verdict: bytes,
) -> None:
    native_server.client.zadd(ACTIVE, {"j1": T0 + 100})
    native_server.client.hset(row("j1"), mapping={"attempts": attempts, "state": "active"})
    assert run(native, "FAIL", "j1", attempts, "e", max_attempts, 0) == verdict
    if verdict == b"dead":
        expected = {DEAD: Z(j1=0), FAILED: H(count=1)}
        state = "dead"
    else:
        expected = {DELAYED: Z(j1=T0)}
        state = "delayed"
    assert_keyspace(
        native_server.client,
        {**expected, row("j1"): H(attempts=attempts, state=state, last_error="e")},
    )


@pytest.mark.parametrize("token", [7, 0, 2])
def test_fail_stale_token(native: NativeSide, native_server: EmbeddedServer, token: int) -> None:
    enqueue_and_claim(native)
    before = take_snapshot(native_server.client)
    assert run(native, "FAIL", "j1", token, "boom", 1, 0) == 0
    assert take_snapshot(native_server.client) == before


@pytest.mark.parametrize(
    ("max_attempts", "setup", "message"),
    [
        (1, lambda c: c.set(DEAD, "junk"), WRONGTYPE),
        (1, lambda c: c.set(FAILED, "junk"), WRONGTYPE),
        (1, lambda c: c.hset(FAILED, "count", "x"), errors.NOTINT),
        (1, lambda c: c.hset(FAILED, "count", I64), errors.OVERFLOW),
        (5, lambda c: c.set(DELAYED, "junk"), WRONGTYPE),
        (5, lambda c: c.sadd(DELAYED, "junk"), WRONGTYPE),
    ],
    ids=["dead-string", "metrics-string", "count-x", "count-i64max", "delayed-string",
         "delayed-set"],
)  # fmt: skip
def test_fail_d3_d4_writes_nothing(
    native: NativeSide,
    native_server: EmbeddedServer,
    max_attempts: int,
    setup: Callable[[object], object],
    message: str,
) -> None:
    enqueue_and_claim(native)
    setup(native_server.client)
    refuses(native_server, native, "FAIL", "j1", 1, "e", max_attempts, 10, message=message)


@pytest.mark.parametrize(
    "setup",
    [
        lambda c: c.set(DEAD, "junk"),
        lambda c: c.set(FAILED, "junk"),
        lambda c: c.hset(FAILED, "count", "x"),
    ],
    ids=["dead-string", "metrics-string", "count-x"],
)
def test_fail_retry_path_never_touches_dead_or_metrics(
    native: NativeSide, native_server: EmbeddedServer, setup: Callable[[object], object]
) -> None:
    enqueue_and_claim(native)
    setup(native_server.client)
    assert run(native, "FAIL", "j1", 1, "e", 2, 10) == b"retry"
    assert native_server.client.zrange(DELAYED, 0, -1, withscores=True) == [(b"j1", T0 + 10)]
    assert native_server.client.hget(row("j1"), "state") == b"delayed"


def test_fail_dead_path_never_touches_delayed(native: NativeSide, native_server: EmbeddedServer) -> None:
    enqueue_and_claim(native)
    native_server.client.set(DELAYED, "junk")
    assert run(native, "FAIL", "j1", 1, "e", 1, 10) == b"dead"
    assert native_server.client.get(DELAYED) == b"junk"
    assert native_server.client.zrange(DEAD, 0, -1) == [b"j1"]


# -- PROMOTE -------------------------------------------------------------------------------------


def test_promote_at_just_before_and_just_after_the_boundary(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 100) == 1
    assert run(native, "ENQUEUE", "j2", "p", 101) == 1
    group.advance(99)
    assert run(native, "PROMOTE", 10) == 0  # one ms before due
    group.advance(1)
    assert run(native, "PROMOTE", 10) == 1  # exactly due: score <= now
    assert_keyspace(
        native_server.client,
        {
            PENDING: Z(j1=T0 + 100),
            DELAYED: Z(j2=T0 + 101),
            row("j1"): waiting(),
            row("j2"): H(payload="p", state="delayed", enqueued_at=T0),
        },
    )
    group.advance(5)  # past due: promoted at its due score, not at now
    assert run(native, "PROMOTE", 10) == 1
    assert_keyspace(
        native_server.client,
        {PENDING: Z(j1=T0 + 100, j2=T0 + 101), row("j1"): waiting(), row("j2"): waiting()},
    )
    assert run(native, "PROMOTE", 10) == 0


def test_promote_respects_limit_and_order(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    for job, delay in (("c", 30), ("a", 10), ("b", 20), ("d", 31)):
        assert run(native, "ENQUEUE", job, "p", delay) == 1
    group.advance(30)
    assert run(native, "PROMOTE", 2) == 2
    assert native_server.client.zrange(PENDING, 0, -1) == [b"a", b"b"]
    assert native_server.client.zrange(DELAYED, 0, -1) == [b"c", b"d"]
    assert run(native, "PROMOTE", 1) == 1
    assert native_server.client.zrange(DELAYED, 0, -1) == [b"d"]
    assert run(native, "PROMOTE", I64_MAX) == 0


def test_promote_ghosts_use_the_budget(native: NativeSide, native_server: EmbeddedServer, group: ServerGroup) -> None:
    native_server.client.zadd(DELAYED, {"g1": T0 - 5})
    assert run(native, "ENQUEUE", "a", "p", 1) == 1
    assert run(native, "ENQUEUE", "b", "p", 2) == 1
    group.advance(2)
    assert run(native, "PROMOTE", 2) == 1
    assert_keyspace(
        native_server.client,
        {
            PENDING: Z(a=T0 + 1),
            DELAYED: Z(b=T0 + 2),
            row("a"): waiting(),
            row("b"): H(payload="p", state="delayed", enqueued_at=T0),
        },
    )


def test_promote_keeps_the_stored_score(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.zadd(DELAYED, {"a": 12.5, "b": "-inf"})
    native_server.client.hset(row("a"), "state", "delayed")
    native_server.client.hset(row("b"), "state", "delayed")
    assert run(native, "PROMOTE", 10) == 2
    assert_keyspace(
        native_server.client,
        {
            PENDING: Z(a="12.5", b="-inf"),
            row("a"): H(state="pending"),
            row("b"): H(state="pending"),
        },
    )


def test_promote_only_ghosts_never_touches_pending(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.zadd(DELAYED, {"ghost": T0, "g2": T0 - 1, "later": T0 + 1})
    native_server.client.set(PENDING, "junk")
    assert run(native, "PROMOTE", 10) == 0
    assert_keyspace(native_server.client, {PENDING: S("junk"), DELAYED: Z(later=T0 + 1)})


def test_promote_delayed_wrong_type(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.set(DELAYED, "junk")
    refuses(native_server, native, "PROMOTE", 10, message=WRONGTYPE)


def test_promote_d3_pending_wrong_type_writes_nothing(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.zadd(DELAYED, {"ghost": T0 - 1, "a": T0})
    native_server.client.hset(row("a"), "state", "delayed")
    native_server.client.set(PENDING, "junk")
    refuses(native_server, native, "PROMOTE", 10, message=WRONGTYPE)


@pytest.mark.parametrize(
    "setup",
    [
        lambda c: c.set(row("bad"), "junk"),
        lambda c: c.rpush(row("bad"), "x"),
        lambda c: c.zadd(row("bad"), {"state": 1}),
    ],
    ids=["string", "list", "zset"],
)
def test_promote_d9_row_not_a_hash_writes_nothing(
    native: NativeSide,
    native_server: EmbeddedServer,
    group: ServerGroup,
    setup: Callable[[object], object],
) -> None:
    assert run(native, "ENQUEUE", "a", "p", 5) == 1
    native_server.client.zadd(DELAYED, {"ghost": T0 + 4, "bad": T0 + 6, "c": T0 + 7})
    native_server.client.hset(row("c"), "state", "delayed")
    setup(native_server.client)
    group.advance(10)
    refuses(native_server, native, "PROMOTE", 10, message=WRONGTYPE)
    # beyond the budget the bad row is not selected, and the earlier members go through
    assert run(native, "PROMOTE", 2) == 1
    assert native_server.client.zrange(DELAYED, 0, -1) == [b"bad", b"c"]


# -- SWEEP ---------------------------------------------------------------------------------------


def test_sweep_recovers_at_the_deadline(native: NativeSide, native_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(native, "j1", 100)
    enqueue_and_claim(native, "j2", 102)
    epoch = native_server.run_id
    group.advance(99)
    assert run(native, "SWEEP", 3, 10) == [0, 0, 0, 0]  # one ms before
    group.advance(1)
    assert run(native, "SWEEP", 3, 10) == [1, 0, 0, 0]  # exactly at the deadline
    group.advance(1)
    assert run(native, "SWEEP", 3, 10) == [0, 0, 0, 0]
    group.advance(1)
    assert run(native, "SWEEP", 3, 10) == [1, 0, 0, 0]
    assert_keyspace(
        native_server.client,
        {
            PENDING: Z(j1=0, j2=0),
            row("j1"): H(
                payload="p", state="pending", enqueued_at=T0, attempts=1, stalled=1,
                lease_epoch=epoch,
            ),
            row("j2"): H(
                payload="p", state="pending", enqueued_at=T0, attempts=1, stalled=1,
                lease_epoch=epoch,
            ),
        },
    )  # fmt: skip


def test_sweep_past_the_deadline_and_again(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    enqueue_and_claim(native)
    group.advance(500)
    assert run(native, "SWEEP", 3, 10) == [1, 0, 0, 0]
    assert run(native, "CLAIM", 100) == [b"j1", b"p", 2]
    group.advance(100)
    assert run(native, "SWEEP", 3, 10) == [1, 0, 0, 0]
    assert native_server.client.hget(row("j1"), "stalled") == b"2"
    assert run(native, "CLAIM", 100) == [b"j1", b"p", 3]
    group.advance(100)
    assert run(native, "SWEEP", 3, 10) == [0, 1, 0, 0]
    assert native_server.client.hgetall(row("j1"))[b"stalled"] == b"3"
    assert native_server.client.hgetall(FAILED) == {b"count": b"1"}


def test_sweep_dead_letters_at_max_stalled(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    enqueue_and_claim(native)
    group.advance(100)
    assert run(native, "SWEEP", 1, 10) == [0, 1, 0, 0]
    assert_keyspace(
        native_server.client,
        {
            DEAD: Z(j1=0),
            FAILED: H(count=1),
            row("j1"): H(
                payload="p", state="dead", enqueued_at=T0, attempts=1, stalled=1,
                last_error="stalled", lease_epoch=native_server.run_id,
            ),
        },
    )  # fmt: skip


def test_sweep_counts_ghosts_and_keeps_its_budget(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.zadd(ACTIVE, {"g1": T0 - 3, "g2": T0 - 2, "g3": T0 - 1, "g4": T0 + 1})
    assert run(native, "SWEEP", 1, 2) == [0, 0, 2, 0]
    assert_keyspace(native_server.client, {ACTIVE: Z(g3=T0 - 1, g4=T0 + 1)})
    assert run(native, "SWEEP", 1, I64_MAX) == [0, 0, 1, 0]
    assert_keyspace(native_server.client, {ACTIVE: Z(g4=T0 + 1)})


def test_sweep_order_and_every_verdict_in_one_sweep(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    c = native_server.client
    enqueue_and_claim(native, "die", 10)
    c.hset(row("die"), "stalled", 1)
    enqueue_and_claim(native, "rec", 11)
    c.zadd(ACTIVE, {"ghost": T0 + 12, "foreign": T0 + 13, "late": T0 + 14, "later": T0 + 50})
    c.hset(row("foreign"), mapping={"state": "active", "lease_epoch": "R0", "stalled": 7})
    c.hset(row("late"), mapping={"state": "active", "lease_epoch": native_server.run_id})
    group.advance(20)
    assert run(native, "SWEEP", 2, 4) == [1, 1, 1, 1]  # die, rec, ghost, foreign; late waits
    epoch = native_server.run_id
    assert_keyspace(
        c,
        {
            ACTIVE: Z(late=T0 + 14, later=T0 + 50),
            PENDING: Z(rec=0, foreign=0),
            DEAD: Z(die=0),
            FAILED: H(count=1),
            row("die"): claimed(epoch, stalled=2, state="dead", last_error="stalled"),
            row("rec"): claimed(epoch, stalled=1, state="pending"),
            row("foreign"): H(state="pending", lease_epoch="R0", stalled=7),
            row("late"): H(state="active", lease_epoch=epoch),
        },
    )


def test_sweep_d7_restart_is_not_a_stall(native: NativeSide, native_server: EmbeddedServer, group: ServerGroup) -> None:
    """The spec's worked example, native side."""
    group.set_time(1000)
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    assert run(native, "CLAIM", 100) == [b"j1", b"p", 1]
    first = native_server.run_id
    native_server.restart()
    assert native_server.run_id != first
    group.set_time(1200)
    assert run(native, "SWEEP", 1, 10) == [0, 0, 0, 1]
    assert_keyspace(
        native_server.client,
        {
            PENDING: Z(j1=0),
            row("j1"): H(payload="p", state="pending", enqueued_at=1000, attempts=1, lease_epoch=first),
        },
    )
    # the next lease is this process's
    assert run(native, "CLAIM", 100) == [b"j1", b"p", 2]
    assert native_server.client.hget(row("j1"), "lease_epoch") == native_server.run_id.encode()


def test_sweep_d7_without_a_restart_counts(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    group.set_time(1000)
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    assert run(native, "CLAIM", 100) == [b"j1", b"p", 1]
    group.set_time(1200)
    assert run(native, "SWEEP", 1, 10) == [0, 1, 0, 0]
    assert_keyspace(
        native_server.client,
        {
            DEAD: Z(j1=0),
            FAILED: H(count=1),
            row("j1"): H(
                payload="p", state="dead", enqueued_at=1000, attempts=1, stalled=1,
                last_error="stalled", lease_epoch=native_server.run_id,
            ),
        },
    )  # fmt: skip


@pytest.mark.parametrize(
    "epoch",
    [None, "R0", "", "x" * 40],
    ids=["missing", "foreign", "empty", "other-40"],
)
@pytest.mark.parametrize("stalled", [None, "3", "x", I64])
def test_sweep_d7_exempt_leaves_stalled_unread(
    native: NativeSide, native_server: EmbeddedServer, epoch: str | None, stalled: str | None
) -> None:
    fields = {"state": "active", "attempts": "1"}
    if epoch is not None:
        fields["lease_epoch"] = epoch
    if stalled is not None:
        fields["stalled"] = stalled
    native_server.client.zadd(ACTIVE, {"j1": T0})
    native_server.client.hset(row("j1"), mapping=fields)
    native_server.client.set(DEAD, "junk")  # an exempt member never reaches dead
    assert run(native, "SWEEP", 1, 10) == [0, 0, 0, 1]
    assert_keyspace(
        native_server.client,
        {PENDING: Z(j1=0), DEAD: S("junk"), row("j1"): H({**fields, "state": "pending"})},
    )


def test_sweep_epoch_with_a_trailing_byte_is_foreign(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    enqueue_and_claim(native)
    native_server.client.hset(row("j1"), "lease_epoch", native_server.run_id + " ")
    group.advance(100)
    assert run(native, "SWEEP", 1, 10) == [0, 0, 0, 1]


def test_sweep_several_deaths_count_on(native: NativeSide, native_server: EmbeddedServer, group: ServerGroup) -> None:
    native_server.client.hset(FAILED, "count", 5)
    for job in ("a", "b", "c"):
        enqueue_and_claim(native, job, 10)
    group.advance(10)
    assert run(native, "SWEEP", 1, 10) == [0, 3, 0, 0]
    assert native_server.client.hgetall(FAILED) == {b"count": b"8"}
    assert native_server.client.zrange(DEAD, 0, -1) == [b"a", b"b", b"c"]


@pytest.mark.parametrize(
    ("count", "message"),
    [("x", errors.NOTINT), (I64, errors.OVERFLOW), (str(I64_MAX - 1), errors.OVERFLOW)],
)
def test_sweep_d4_metrics_count_writes_nothing(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup, count: str,
    message: str,
) -> None:  # fmt: skip
    """With i64 max - 1 the first death fits and the second overflows: still nothing written."""
    enqueue_and_claim(native, "a", 10)
    enqueue_and_claim(native, "b", 10)
    native_server.client.hset(FAILED, "count", count)
    group.advance(10)
    refuses(native_server, native, "SWEEP", 1, 10, message=message)


def test_sweep_i64_max_minus_one_fits_one_death(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    enqueue_and_claim(native, "a", 10)
    native_server.client.hset(FAILED, "count", str(I64_MAX - 1))
    group.advance(10)
    assert run(native, "SWEEP", 1, 10) == [0, 1, 0, 0]
    assert native_server.client.hget(FAILED, "count") == I64.encode()


def test_sweep_active_wrong_type(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.set(ACTIVE, "junk")
    refuses(native_server, native, "SWEEP", 1, 10, message=WRONGTYPE)


@pytest.mark.parametrize(
    ("max_stalled", "setup"),
    [
        (5, lambda c: c.set(PENDING, "junk")),  # recover needs pending
        (1, lambda c: c.set(DEAD, "junk")),  # die needs dead
        (1, lambda c: c.set(FAILED, "junk")),  # and the metrics
        (1, lambda c: c.zadd(FAILED, {"count": 1})),
    ],
    ids=["pending-string", "dead-string", "metrics-string", "metrics-zset"],
)
def test_sweep_d3_writes_nothing(
    native: NativeSide,
    native_server: EmbeddedServer,
    group: ServerGroup,
    max_stalled: int,
    setup: Callable[[object], object],
) -> None:
    native_server.client.zadd(ACTIVE, {"ghost": T0})
    enqueue_and_claim(native, "a", 10)
    setup(native_server.client)
    group.advance(10)
    refuses(native_server, native, "SWEEP", max_stalled, 10, message=WRONGTYPE)


@pytest.mark.parametrize(
    ("max_stalled", "setup"),
    [
        (5, lambda c: (c.set(DEAD, "junk"), c.set(FAILED, "junk"))),
        (1, lambda c: c.set(PENDING, "junk")),
    ],
    ids=["recover-only", "die-only"],
)
def test_sweep_touches_only_the_keys_its_verdicts_need(
    native: NativeSide,
    native_server: EmbeddedServer,
    group: ServerGroup,
    max_stalled: int,
    setup: Callable[[object], object],
) -> None:
    enqueue_and_claim(native, "a", 10)
    setup(native_server.client)
    group.advance(10)
    want = [1, 0, 0, 0] if max_stalled == 5 else [0, 1, 0, 0]
    assert run(native, "SWEEP", max_stalled, 10) == want


def test_sweep_only_ghosts_touches_nothing_else(native: NativeSide, native_server: EmbeddedServer) -> None:
    c = native_server.client
    c.zadd(ACTIVE, {"g": T0})
    for key in (PENDING, DEAD, FAILED):
        c.set(key, "junk")
    assert run(native, "SWEEP", 1, 10) == [0, 0, 1, 0]
    assert_keyspace(c, {PENDING: S("junk"), DEAD: S("junk"), FAILED: S("junk")})


D8_BAD_MEMBERS = [
    pytest.param(lambda c, r: c.set(row("bad"), "junk"), WRONGTYPE, id="row-string"),
    pytest.param(lambda c, r: c.rpush(row("bad"), "x"), WRONGTYPE, id="row-list"),
    pytest.param(
        lambda c, r: c.hset(row("bad"), mapping={"lease_epoch": r, "group": "g"}),
        errors.LANE,
        id="group-counted",
    ),
    pytest.param(
        lambda c, r: c.hset(row("bad"), mapping={"lease_epoch": "R0", "group": ""}),
        errors.LANE,
        id="group-exempt",
    ),
    pytest.param(
        lambda c, r: c.hset(row("bad"), mapping={"lease_epoch": r, "stalled": "x"}),
        errors.NOTINT,
        id="stalled-x",
    ),
    pytest.param(
        lambda c, r: c.hset(row("bad"), mapping={"lease_epoch": r, "stalled": "1.0"}),
        errors.NOTINT,
        id="stalled-float",
    ),
    pytest.param(
        lambda c, r: c.hset(row("bad"), mapping={"lease_epoch": r, "stalled": I64}),
        errors.OVERFLOW,
        id="stalled-i64max",
    ),
]


@pytest.mark.parametrize(("setup", "message"), D8_BAD_MEMBERS)
def test_sweep_d8_bad_member_refuses_the_whole_sweep(
    native: NativeSide,
    native_server: EmbeddedServer,
    group: ServerGroup,
    setup: Callable[[object, str], object],
    message: str,
) -> None:
    c = native_server.client
    enqueue_and_claim(native, "rec", 10)  # a fine member first: recovered
    enqueue_and_claim(native, "die", 10)
    c.hset(row("die"), "stalled", 4)  # a fine member that would die
    c.zadd(ACTIVE, {"ghost": T0 + 10, "foreign": T0 + 10, "bad": T0 + 11, "after": T0 + 12})
    c.hset(row("foreign"), mapping={"state": "active", "lease_epoch": "R0"})
    setup(c, native_server.run_id)
    group.advance(20)
    refuses(native_server, native, "SWEEP", 5, 10, message=message)
    # a budget that stops before the bad member sweeps the rest
    assert run(native, "SWEEP", 5, 4) == [1, 1, 1, 1]
    assert c.zrange(ACTIVE, 0, -1) == [b"bad", b"after"]


# -- REVIVE --------------------------------------------------------------------------------------


def test_revive_a_dead_job(native: NativeSide, native_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(native)
    group.advance(100)
    assert run(native, "SWEEP", 1, 10) == [0, 1, 0, 0]
    group.advance(5)
    assert run(native, "REVIVE", "j1") == 1
    assert run(native, "REVIVE", "j1") == 0
    epoch = native_server.run_id
    assert_keyspace(
        native_server.client,
        {
            PENDING: Z(j1=T0 + 105),
            FAILED: H(count=1),
            row("j1"): H(
                payload="p", state="pending", enqueued_at=T0, attempts=1, stalled=0,
                last_error="stalled", lease_epoch=epoch,
            ),
        },
    )  # fmt: skip
    assert run(native, "CLAIM", 10) == [b"j1", b"p", 2]  # attempts keep growing


def test_revive_only_dead_jobs(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    before = take_snapshot(native_server.client)
    assert run(native, "REVIVE", "j1") == 0
    assert run(native, "REVIVE", "nope") == 0
    assert take_snapshot(native_server.client) == before


def test_revive_ghost_is_consumed_and_nothing_minted(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.zadd(DEAD, {"ghost": 0, "other": 0})
    native_server.client.set(PENDING, "junk")  # a ghost never reaches pending
    assert run(native, "REVIVE", "ghost") == 0
    assert_keyspace(native_server.client, {DEAD: Z(other=0), PENDING: S("junk")})


def test_revive_dead_wrong_type(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.set(DEAD, "junk")
    refuses(native_server, native, "REVIVE", "j1", message=WRONGTYPE)


@pytest.mark.parametrize(
    "setup",
    [lambda c: c.set(PENDING, "junk"), lambda c: (c.delete(row("j1")), c.set(row("j1"), "x"))],
    ids=["pending-string", "row-string"],
)
def test_revive_d3_writes_nothing(
    native: NativeSide, native_server: EmbeddedServer, setup: Callable[[object], object]
) -> None:
    enqueue_and_claim(native)
    assert run(native, "FAIL", "j1", 1, "e", 1, 0) == b"dead"
    setup(native_server.client)
    refuses(native_server, native, "REVIVE", "j1", message=WRONGTYPE)


# -- PAUSE / RESUME ------------------------------------------------------------------------------


def test_pause_and_resume(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "ENQUEUE", "j1", "p", 0) == 1
    assert run(native, "PAUSE") == 1
    assert run(native, "PAUSE") == 0
    assert_keyspace(native_server.client, {META: H(paused=1), PENDING: Z(j1=T0), row("j1"): waiting()})
    assert run(native, "CLAIM", 10) == []
    assert_keyspace(native_server.client, {META: H(paused=1), PENDING: Z(j1=T0), row("j1"): waiting()})
    assert run(native, "RESUME") == 1
    assert run(native, "RESUME") == 0
    assert_keyspace(native_server.client, {PENDING: Z(j1=T0), row("j1"): waiting()})
    assert run(native, "CLAIM", 10) == [b"j1", b"p", 1]


def test_pause_rewrites_any_flag_and_keeps_other_fields(native: NativeSide, native_server: EmbeddedServer) -> None:
    native_server.client.hset(META, mapping={"paused": "0", "other": "x"})
    assert run(native, "PAUSE") == 0
    assert_keyspace(native_server.client, {META: H(paused=1, other="x")})
    assert run(native, "RESUME") == 1
    assert_keyspace(native_server.client, {META: H(other="x")})


def test_resume_unpaused_writes_nothing(native: NativeSide, native_server: EmbeddedServer) -> None:
    assert run(native, "RESUME") == 0
    assert dirty(native_server) == 0
    assert_keyspace(native_server.client, {})


@pytest.mark.parametrize("verb", ["PAUSE", "RESUME"])
def test_pause_on_wrong_type_meta(native: NativeSide, native_server: EmbeddedServer, verb: str) -> None:
    native_server.client.set(META, "junk")
    refuses(native_server, native, verb, message=WRONGTYPE)


# -- D6: shape, layout, integers -----------------------------------------------------------------


def busy_queue(host: NativeSide, server: EmbeddedServer, group: ServerGroup) -> None:
    """Every set populated, so that any transition given good arguments would write something."""
    enqueue_and_claim(host, "j1", 100)
    assert run(host, "ENQUEUE", "j2", "p", 0) == 1
    assert run(host, "ENQUEUE", "j3", "p", 50) == 1
    server.client.zadd(DEAD, {"j4": 0})
    server.client.hset(row("j4"), mapping={"payload": "p", "state": "dead"})
    group.advance(100)


class Busy(NamedTuple):
    """The shared server of the D6 and ACL tests, reset to `busy_queue` before each test."""

    native: NativeSide
    server: EmbeddedServer


@pytest.fixture(scope="module")
def shared_group() -> Iterator[ServerGroup]:
    with ServerGroup() as servers:
        servers.add("native", module=DEFAULT_MODULE)
        yield servers


@pytest.fixture
def busy(shared_group: ServerGroup) -> Iterator[Busy]:
    server = shared_group.servers[0]
    server.client.flushall()
    shared_group.set_time(T0)
    native = NativeSide(server, {})
    busy_queue(native, server, shared_group)
    yield Busy(native, server)
    native.close()


GOOD_ARGS: dict[str, tuple[bytes | str | int, ...]] = {
    "ENQUEUE": ("new", "p", 0),
    "CLAIM": (100,),
    "EXTEND": ("j1", 1, 100),
    "COMPLETE": ("j1", 1),
    "FAIL": ("j1", 1, "e", 3, 0),
    "PROMOTE": (10,),
    "SWEEP": (3, 10),
    "REVIVE": ("j4",),
    "PAUSE": (),
    "RESUME": (),
}
GOOD_REPLIES: dict[str, Reply] = {
    "ENQUEUE": 1,
    "CLAIM": [b"j2", b"p", 1],
    "EXTEND": 1,
    "COMPLETE": 1,
    "FAIL": b"retry",
    "PROMOTE": 1,
    "SWEEP": [1, 0, 0, 0],
    "REVIVE": 1,
    "PAUSE": 1,
    "RESUME": 0,
}


def test_good_args_cover_the_table() -> None:
    assert set(GOOD_ARGS) == set(TRANSITIONS) == set(GOOD_REPLIES)
    for verb, args in GOOD_ARGS.items():
        assert len(args) == len(TRANSITIONS[verb].args), verb


@pytest.mark.parametrize("verb", list(TRANSITIONS))
def test_d6_control_good_args_on_the_busy_queue_go_through(busy: Busy, verb: str) -> None:
    """The control for every refusal below: the same call with good arguments answers."""
    native, native_server = busy
    changes = dirty(native_server)
    assert run(native, verb, *GOOD_ARGS[verb]) == GOOD_REPLIES[verb]
    assert (dirty(native_server) > changes) == (verb != "RESUME")


def _bad_integers(minimum: int, maximum: int) -> list[tuple[bytes, str]]:
    cases = [
        (b"abc", errors.NOTINT),
        (b"", errors.NOTINT),
        (b"007", errors.NOTINT),
        (b"00", errors.NOTINT),
        (b"+1", errors.NOTINT),
        (b"-0", errors.NOTINT),
        (b"-", errors.NOTINT),
        (b"1 ", errors.NOTINT),
        (b" 1", errors.NOTINT),
        (b"1.0", errors.NOTINT),
        (b"1e3", errors.NOTINT),
        (b"0x10", errors.NOTINT),
        (b"1\x00", errors.NOTINT),
        (b"\xff", errors.NOTINT),
        (b"1\r\n", errors.NOTINT),
        (b"--1", errors.NOTINT),
        (str(2**63).encode(), errors.OVERFLOW),
        (str(-(2**63) - 1).encode(), errors.OVERFLOW),
        (b"9" * 20, errors.OVERFLOW),
        (b"-" + b"9" * 19, errors.OVERFLOW),
        (str(minimum - 1).encode(), errors.ARG),
        (b"-1", errors.ARG),
        (str(-(2**63)).encode(), errors.ARG),
    ]
    if maximum < I64_MAX:
        cases += [(str(maximum + 1).encode(), errors.ARG), (I64.encode(), errors.ARG)]
    return cases


def _label(raw: bytes) -> str:
    return repr(raw)[2:-1] if len(raw) <= 12 else f"{repr(raw[:4])[2:-1]}..({len(raw)})"


INT_CASES = [
    pytest.param(verb, index, raw, message, id=f"{verb}-{arg.name}-{_label(raw)}")
    for verb, transition in TRANSITIONS.items()
    for index, arg in enumerate(transition.args)
    if arg.kind is ArgKind.INT
    for raw, message in _bad_integers(arg.minimum, arg.maximum)
]


@pytest.mark.parametrize(("verb", "index", "raw", "message"), INT_CASES)
def test_d6_integer_arguments(
    busy: Busy,
    verb: str,
    index: int,
    raw: bytes,
    message: str,
) -> None:
    native, native_server = busy
    args = list(GOOD_ARGS[verb])
    args[index] = raw
    refuses(native_server, native, verb, *args, message=message)


@pytest.mark.parametrize("raw", [b"9" * 21, b"-" + b"1" * 20, b"9" * 40, b"1" + b"0" * 4000])
def test_d6_integers_longer_than_20_bytes_are_overflow(busy: Busy, raw: bytes) -> None:
    """docs/contract-decisions.md: of the integer form but outside i64, "however long": EMQ OVERFLOW.

    (difftest/spec/guards.py, the Lua host's refusal, says the same; every integer argument of every
    verb is checked here, and the mismatches are listed together.)
    """
    native, server = busy
    before, changes = take_snapshot(server.client), dirty(server)
    wrong = {}
    for verb, transition in TRANSITIONS.items():
        for index, arg in enumerate(transition.args):
            if arg.kind is ArgKind.INT:
                args = list(GOOD_ARGS[verb])
                args[index] = raw
                reply = run(native, verb, *args)
                if reply != ErrorReply(errors.OVERFLOW):
                    wrong[f"{verb} {arg.name}"] = reply
    assert take_snapshot(server.client) == before
    assert dirty(server) == changes
    assert wrong == {}


INT_BOUNDS = [
    pytest.param(verb, index, value, id=f"{verb}-{arg.name}-{value}")
    for verb, transition in TRANSITIONS.items()
    for index, arg in enumerate(transition.args)
    if arg.kind is ArgKind.INT
    for value in (arg.minimum, arg.maximum)
]


@pytest.mark.parametrize(("verb", "index", "value"), INT_BOUNDS)
def test_d6_integer_bounds_are_accepted(busy: Busy, verb: str, index: int, value: int) -> None:
    native = busy.native
    args = list(GOOD_ARGS[verb])
    args[index] = value
    reply = run(native, verb, *args)
    assert not isinstance(reply, ErrorReply), reply


def test_d6_first_bad_integer_wins(native: NativeSide, native_server: EmbeddedServer) -> None:
    refuses(native_server, native, "FAIL", "j", "x", "e", 0, -1, message=errors.NOTINT)
    refuses(native_server, native, "FAIL", "j", -1, "e", "x", -1, message=errors.ARG)
    refuses(native_server, native, "FAIL", "j", 1, "e", 1, "9" * 20, message=errors.OVERFLOW)
    refuses(native_server, native, "SWEEP", 0, "x", message=errors.ARG)
    refuses(native_server, native, "EXTEND", "j", "", 0, message=errors.NOTINT)


def _shape_cases(verb: str) -> list[Call]:
    good = Call.of(verb, "q", *GOOD_ARGS[verb])
    n = TRANSITIONS[verb].numkeys
    cases = [
        Call(verb, b"", ()),
        Call(verb, str(n).encode(), ()),
        Call(verb, str(n).encode(), good.rest[:-1]),
        Call(verb, str(n).encode(), (*good.rest, b"extra")),
        Call(verb, str(n - 1).encode(), good.rest),
        Call(verb, str(n + 1).encode(), good.rest),
        Call(verb, b"0" + str(n).encode(), good.rest),
        Call(verb, b"+" + str(n).encode(), good.rest),
        Call(verb, str(n).encode() + b" ", good.rest),
        Call(verb, b"x", good.rest),
        Call(verb, b"-1", good.rest),
        Call(verb, b"", good.rest),
        Call(verb, str(2**64 + n).encode(), good.rest),
        Call(verb, b"9" * 40, good.rest),
    ]
    if good.rest[n:]:
        cases.append(Call(verb, str(n).encode(), good.rest[:n]))  # the keys alone
    return cases


SHAPE_CASES = [
    pytest.param(call, id=f"{verb}-{i}") for verb in TRANSITIONS for i, call in enumerate(_shape_cases(verb))
]


@pytest.mark.parametrize("call", SHAPE_CASES)
def test_d6_shape(busy: Busy, call: Call) -> None:
    native, native_server = busy
    refused(native_server, native, call, errors.SHAPE)


def test_d6_shape_of_the_bare_command(native_server: EmbeddedServer) -> None:
    for transition in TRANSITIONS.values():
        with pytest.raises(ResponseError, match=rf"^{errors.SHAPE}$"):
            native_server.client.execute_command(transition.native_name)


def _layout_cases(verb: str) -> list[tuple[bytes, ...]]:
    transition = TRANSITIONS[verb]
    good = Call.of(verb, "q", *GOOD_ARGS[verb]).rest[: transition.numkeys]

    def keys_of(queue: bytes, base: bytes | None = None) -> tuple[bytes, ...]:
        root = base if base is not None else b"emq:{" + queue + b"}:"
        return tuple(root + s.encode() for s in transition.keys)

    cases = [
        keys_of(b""),
        keys_of(b"a}b"),
        keys_of(b"a{b"),
        keys_of(b"{q}"),
        keys_of(b"", b"EMQ:{q}:"),
        keys_of(b"", b"emq:q:"),
        keys_of(b"", b"emq:{q}"),
        keys_of(b"", b"emq:{q}:x"),
        keys_of(b"", b"emq:{q}::"),
        keys_of(b"", b"x"),
        tuple(b"x" for _ in good),
        (good[0] + b"x", *good[1:]),
        (*good[:-1], good[-1] + b"\x00"),
        (b" " + good[0], *good[1:]),
    ]
    if len(good) > 1:  # keys of two queues (with one key, queue r's is a good layout)
        cases.append((b"emq:{r}:" + good[0][len(b"emq:{q}:") :], *good[1:]))
        cases.append((*good[:-1], b"emq:{r}:" + good[-1][len(b"emq:{q}:") :]))
        cases.append((good[1], good[0], *good[2:]))  # two keys swapped
        cases.append(tuple(good[0] for _ in good))  # one key repeated
    return cases


LAYOUT_CASES = [
    pytest.param(verb, keys, id=f"{verb}-{i}") for verb in TRANSITIONS for i, keys in enumerate(_layout_cases(verb))
]


@pytest.mark.parametrize(("verb", "keys"), LAYOUT_CASES)
def test_d6_layout(
    busy: Busy,
    verb: str,
    keys: tuple[bytes, ...],
) -> None:
    native, native_server = busy
    args = Call.of(verb, "q", *GOOD_ARGS[verb]).rest[len(keys) :]
    call = Call(verb, str(len(keys)).encode(), (*keys, *args))
    refused(native_server, native, call, errors.LAYOUT)


@pytest.mark.parametrize("verb", [v for v, t in TRANSITIONS.items() if t.args])
def test_d6_checks_run_in_order(native: NativeSide, native_server: EmbeddedServer, verb: str) -> None:
    """Shape before layout before integers: every argument below is bad in each way at once."""
    transition = TRANSITIONS[verb]
    bad_keys = tuple(b"x" for _ in transition.keys)
    bad_args = tuple(b"-0" for _ in transition.args)
    n = str(transition.numkeys).encode()
    refused(native_server, native, Call(verb, n, (*bad_keys, *bad_args, b"+")), errors.SHAPE)
    refused(native_server, native, Call(verb, n, (*bad_keys, *bad_args)), errors.LAYOUT)
    good_keys = Call.of(verb, "q").rest
    if any(a.kind is ArgKind.INT for a in transition.args):
        refused(native_server, native, Call(verb, n, (*good_keys, *bad_args)), errors.NOTINT)


# -- ACL: every derived key kind -----------------------------------------------------------------

ALL_DECLARED = ["~emq:{q}:pending", "~emq:{q}:active", "~emq:{q}:delayed", "~emq:{q}:dead",
                "~emq:{q}:done", "~emq:{q}:"]  # fmt: skip
META_RW = ["~emq:{q}:meta"]
ROWS_RW = ["~emq:{q}:job:*"]
ROWS_RO = ["%R~emq:{q}:job:*"]
METRICS_RW = ["~emq:{q}:metrics:*"]


def acl_user(server: EmbeddedServer, name: str, patterns: list[str]) -> NativeSide:
    """A side whose user `name` has every command and only these key patterns."""
    return NativeSide(server, {name: tuple(patterns)})


ACL_CASES = [
    # (patterns, verb, args, max_attempts-free setup): the call reaches a key the user may not
    pytest.param(ALL_DECLARED + ROWS_RW + METRICS_RW, "CLAIM", (100,), id="meta-claim"),
    pytest.param(ALL_DECLARED + META_RW + METRICS_RW, "CLAIM", (100,), id="row-none-claim"),
    pytest.param(ALL_DECLARED + META_RW + ROWS_RO, "CLAIM", (100,), id="row-ro-claim"),
    pytest.param(ALL_DECLARED + META_RW, "ENQUEUE", ("new", "p", 0), id="row-none-enqueue"),
    pytest.param(ALL_DECLARED + ROWS_RO, "ENQUEUE", ("new", "p", 0), id="row-ro-enqueue"),
    pytest.param(ALL_DECLARED, "ENQUEUE", ("j2", "p", 0), id="row-none-duplicate"),
    pytest.param(ALL_DECLARED, "EXTEND", ("j1", 1, 100), id="row-none-extend"),
    pytest.param(ALL_DECLARED + ROWS_RO, "EXTEND", ("j1", 1, 100), id="row-ro-extend"),
    pytest.param(ALL_DECLARED + METRICS_RW, "COMPLETE", ("j1", 1), id="row-none-complete"),
    pytest.param(ALL_DECLARED + ROWS_RO + METRICS_RW, "COMPLETE", ("j1", 1), id="row-ro-complete"),
    pytest.param(ALL_DECLARED + ROWS_RW, "COMPLETE", ("j1", 1), id="metrics-complete"),
    pytest.param(
        ALL_DECLARED + ROWS_RW + ["%R~emq:{q}:metrics:*"], "COMPLETE", ("j1", 1),
        id="metrics-ro-complete",
    ),
    pytest.param(ALL_DECLARED + ROWS_RW, "FAIL", ("j1", 1, "e", 1, 0), id="metrics-fail-dead"),
    pytest.param(ALL_DECLARED + ROWS_RO, "FAIL", ("j1", 1, "e", 5, 0), id="row-ro-fail-retry"),
    pytest.param(ALL_DECLARED, "PROMOTE", (10,), id="row-none-promote"),
    pytest.param(ALL_DECLARED + ROWS_RO, "PROMOTE", (10,), id="row-ro-promote"),
    pytest.param(ALL_DECLARED + METRICS_RW, "SWEEP", (5, 10), id="row-none-sweep"),
    pytest.param(ALL_DECLARED + ROWS_RO + METRICS_RW, "SWEEP", (5, 10), id="row-ro-sweep"),
    pytest.param(ALL_DECLARED + ROWS_RW, "SWEEP", (1, 10), id="metrics-sweep-die"),
    pytest.param(ALL_DECLARED, "REVIVE", ("j4",), id="row-none-revive"),
    pytest.param(ALL_DECLARED + ROWS_RO, "REVIVE", ("j4",), id="row-ro-revive"),
]  # fmt: skip


@pytest.mark.parametrize(("patterns", "verb", "args"), ACL_CASES)
def test_acl_derived_keys_are_checked_before_any_write(
    busy: Busy,
    patterns: list[str],
    verb: str,
    args: tuple[bytes | str | int, ...],
) -> None:
    native, native_server = busy
    worker = acl_user(native_server, "worker", patterns)
    before, changes = take_snapshot(native_server.client), dirty(native_server)
    reply = run(worker, verb, *args, user="worker")
    assert reply == ErrorReply(errors.NOPERM)
    assert take_snapshot(native_server.client) == before
    assert dirty(native_server) == changes
    # the admin, with every permission, goes through
    assert not isinstance(run(native, verb, *args), ErrorReply)


@pytest.mark.parametrize(
    ("patterns", "verb", "args", "reply"),
    [
        pytest.param(ALL_DECLARED + ROWS_RO, "ENQUEUE", ("j2", "p", 0), 0, id="ro-duplicate"),
        pytest.param(ALL_DECLARED + META_RW + ROWS_RW, "CLAIM", (100,), [b"j2", b"p", 1],
                     id="claim-needs-no-metrics"),
        pytest.param(ALL_DECLARED + ROWS_RW, "FAIL", ("j1", 1, "e", 5, 0), b"retry",
                     id="retry-needs-no-metrics"),
        pytest.param(ALL_DECLARED + ROWS_RW, "SWEEP", (5, 10), [1, 0, 0, 0],
                     id="recover-needs-no-metrics"),
        pytest.param(ALL_DECLARED + ROWS_RO, "EXTEND", ("nope", 1, 10), 0, id="fence-miss"),
        pytest.param(ALL_DECLARED, "REVIVE", ("nope",), 0, id="revive-miss"),
        pytest.param(META_RW, "PAUSE", (), 1, id="pause-meta-only"),
    ],
)  # fmt: skip
def test_acl_keys_a_call_never_reaches_need_no_permission(
    busy: Busy,
    patterns: list[str],
    verb: str,
    args: tuple[bytes | str | int, ...],
    reply: Reply,
) -> None:
    _native, native_server = busy
    worker = acl_user(native_server, "worker", patterns)
    assert run(worker, verb, *args, user="worker") == reply


@pytest.mark.parametrize("verb", list(TRANSITIONS))
def test_acl_declared_keys_are_checked_by_the_server(busy: Busy, verb: str) -> None:
    _native, native_server = busy
    worker = acl_user(native_server, "worker", ["~other:*"])
    before = take_snapshot(native_server.client)
    reply = run(worker, verb, *GOOD_ARGS[verb], user="worker")
    assert isinstance(reply, ErrorReply) and reply.code == "NOPERM", reply
    assert take_snapshot(native_server.client) == before


def test_acl_metrics_denied_writes_nothing_even_after_good_members(
    native: NativeSide, native_server: EmbeddedServer, group: ServerGroup
) -> None:
    """SWEEP: a recovered member comes first, the dying one needs metrics the user lacks."""
    enqueue_and_claim(native, "rec", 10)
    enqueue_and_claim(native, "die", 11)
    native_server.client.hset(row("die"), "stalled", 9)
    group.advance(20)
    worker = acl_user(native_server, "worker", ALL_DECLARED + ROWS_RW)
    refuses(native_server, worker, "SWEEP", 5, 10, message=errors.NOPERM, user="worker")
