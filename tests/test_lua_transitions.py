"""Every transition of the Lua executor against a real server: exact replies, exact keyspaces."""

from __future__ import annotations

import pytest

from difftest.history.format import BeginClaim, EndClaim
from difftest.replay.sides import LuaSide
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer
from difftest.spec import errors
from difftest.spec.calls import Call
from difftest.spec.commands import MAX_DURATION_MS
from difftest.spec.replies import ErrorReply, Refused
from tests.helpers import T0, H, Q, S, Z, assert_keyspace

PENDING, ACTIVE, DELAYED, DEAD, DONE = (Q + s for s in ("pending", "active", "delayed", "dead", "done"))
META, FAILED, COMPLETED = Q + "meta", Q + "metrics:failed", Q + "metrics:completed"


def row(job: str) -> str:
    return Q + "job:" + job


def run(host: LuaSide, verb: str, *args: bytes | str | int) -> object:
    return host.call(Call.of(verb, "q", *args))


def enqueue_and_claim(host: LuaSide, group: ServerGroup, job: str = "j1", lease: int = 100) -> None:
    assert run(host, "ENQUEUE", job, "p", 0) == 1
    assert run(host, "CLAIM", lease) == [job.encode(), b"p", 1]


def assert_error(reply: object, code: str) -> None:
    assert isinstance(reply, ErrorReply), reply
    assert reply.code == code, reply


# -- ENQUEUE -------------------------------------------------------------------------------------


def test_enqueue_now_goes_to_pending(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    assert_keyspace(
        lua_server.client,
        {PENDING: Z(j1=T0), row("j1"): H(payload="p", state="pending", enqueued_at=T0)},
    )


def test_enqueue_with_delay_goes_to_delayed(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 500) == 1
    assert_keyspace(
        lua_server.client,
        {DELAYED: Z(j1=T0 + 500), row("j1"): H(payload="p", state="delayed", enqueued_at=T0)},
    )


def test_enqueue_duplicate_writes_nothing(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    group.advance(7)
    assert run(lua, "ENQUEUE", "j1", "other", 50) == 0
    assert_keyspace(
        lua_server.client,
        {PENDING: Z(j1=T0), row("j1"): H(payload="p", state="pending", enqueued_at=T0)},
    )


def test_enqueue_over_a_row_of_any_type_is_a_duplicate(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    lua_server.client.set(row("j1"), "junk")
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 0
    assert_keyspace(lua_server.client, {row("j1"): S("junk")})


def test_enqueue_takes_arbitrary_bytes(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    job, payload = b"\x00\xff id", b"\xc3\x28\x00"
    assert lua.call(Call.of("ENQUEUE", "q", job, payload, 0)) == 1
    assert lua.call(Call.of("ENQUEUE", "q", b"", b"", 0)) == 1
    assert_keyspace(
        lua_server.client,
        {
            PENDING: Z({job: T0, b"": T0}),
            row("").encode() + job: H(payload=payload, state="pending", enqueued_at=T0),
            row(""): H(payload=b"", state="pending", enqueued_at=T0),
        },
    )


def test_enqueue_d3_pending_wrong_type_leaves_the_row(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    lua_server.client.set(PENDING, "junk")
    assert_error(run(lua, "ENQUEUE", "j1", "p", 0), "WRONGTYPE")
    # the retired script's partial write: the row stays, the id is in no set
    assert_keyspace(
        lua_server.client,
        {PENDING: S("junk"), row("j1"): H(payload="p", state="pending", enqueued_at=T0)},
    )


def test_enqueue_now_never_touches_delayed(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    lua_server.client.set(DELAYED, "junk")
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    assert_keyspace(
        lua_server.client,
        {DELAYED: S("junk"), PENDING: Z(j1=T0), row("j1"): H(payload="p", state="pending", enqueued_at=T0)},
    )


# -- CLAIM ---------------------------------------------------------------------------------------


def test_claim_empty_queue(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    assert run(lua, "CLAIM", 100) == []
    assert_keyspace(lua_server.client, {})


def test_claim_n1_plain_claim_has_no_lease_epoch(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    group.set_time(1000)
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    assert run(lua, "CLAIM", 100) == [b"j1", b"p", 1]
    assert_keyspace(
        lua_server.client,
        {ACTIVE: Z(j1=1100), row("j1"): H(payload="p", state="active", enqueued_at=1000, attempts=1)},
    )


def test_claim_takes_the_oldest_first(lua: LuaSide, group: ServerGroup) -> None:
    assert run(lua, "ENQUEUE", "late", "p", 0) == 1  # same ms: ties go by member order
    group.advance(1)
    assert run(lua, "ENQUEUE", "a-later", "p", 0) == 1
    assert run(lua, "CLAIM", 10) == [b"late", b"p", 1]
    assert run(lua, "CLAIM", 10) == [b"a-later", b"p", 1]


def test_claim_ghost_is_consumed_and_nothing_minted(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    lua_server.client.zadd(PENDING, {"ghost": 5})
    assert run(lua, "CLAIM", 100) == []
    assert_keyspace(lua_server.client, {})


@pytest.mark.parametrize("flag", [b"1", b"0", b""])
def test_claim_any_paused_value_answers_empty(lua: LuaSide, lua_server: EmbeddedServer, flag: bytes) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    lua_server.client.hset(META, "paused", flag)
    assert run(lua, "CLAIM", 100) == []
    assert_keyspace(
        lua_server.client,
        {
            META: H(paused=flag),
            PENDING: Z(j1=T0),
            row("j1"): H(payload="p", state="pending", enqueued_at=T0),
        },
    )


def test_claim_d2_wrongtype_meta_reads_as_paused(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    lua_server.client.set(META, "junk")
    assert run(lua, "CLAIM", 100) == []
    assert_keyspace(
        lua_server.client,
        {META: S("junk"), PENDING: Z(j1=T0), row("j1"): H(payload="p", state="pending", enqueued_at=T0)},
    )


def test_claim_d2_noperm_meta_reads_as_paused(lua_server: EmbeddedServer) -> None:
    lua = LuaSide(lua_server, {"worker": ("~emq:{q}:pending", "~emq:{q}:active", "~emq:{q}:job:*")})
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    claim = Call.of("CLAIM", "q", 100)
    # a split CLAIM's begin is the host's `paused?` read alone: its raw answer
    paused, claimed = lua.run([BeginClaim("w", claim, "worker"), EndClaim("w")])
    assert isinstance(paused, ErrorReply) and paused.code == "NOPERM", paused  # non-nil, so paused
    assert claimed == []
    assert lua.call(claim, user="worker") == []
    assert_keyspace(lua_server.client, {PENDING: Z(j1=T0), row("j1"): H(payload="p", state="pending", enqueued_at=T0)})


def test_claim_d3_row_not_a_hash_loses_the_popped_id(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    lua_server.client.zadd(PENDING, {"j9": 5})
    lua_server.client.set(row("j9"), "junk")
    assert_error(run(lua, "CLAIM", 100), "WRONGTYPE")
    assert_keyspace(lua_server.client, {row("j9"): S("junk")})


@pytest.mark.parametrize(
    ("attempts", "message"),
    [("abc", "ERR hash value is not an integer"), (str(2**63 - 1), "ERR increment or decrement would overflow")],
)
def test_claim_d4_bad_attempts_loses_the_popped_id(
    lua: LuaSide, lua_server: EmbeddedServer, attempts: str, message: str
) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    lua_server.client.hset(row("j1"), "attempts", attempts)
    reply = run(lua, "CLAIM", 100)
    assert isinstance(reply, ErrorReply) and reply.message.startswith(message), reply
    assert_keyspace(lua_server.client, {row("j1"): H(payload="p", state="pending", enqueued_at=T0, attempts=attempts)})


def test_claim_d5_active_not_a_zset_leaves_partial_writes(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    lua_server.client.set(ACTIVE, "junk")
    assert_error(run(lua, "CLAIM", 100), "WRONGTYPE")
    assert_keyspace(
        lua_server.client,
        {ACTIVE: S("junk"), row("j1"): H(payload="p", state="active", enqueued_at=T0, attempts=1)},
    )


def test_claim_row_without_payload_answers_nil(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    lua_server.client.zadd(PENDING, {"j1": 5})
    lua_server.client.hset(row("j1"), "state", "pending")
    assert run(lua, "CLAIM", 100) == [b"j1", None, 1]


@pytest.mark.parametrize(
    ("lease", "message"),
    [
        (0, errors.ARG),
        (-5, errors.ARG),
        (MAX_DURATION_MS + 1, errors.ARG),
        ("abc", errors.NOTINT),
        ("", errors.NOTINT),
        ("007", errors.NOTINT),
        ("+1", errors.NOTINT),
        ("-0", errors.NOTINT),
        ("1 ", errors.NOTINT),
        (2**63, errors.OVERFLOW),
        ("9" * 40, errors.OVERFLOW),
    ],
)
def test_claim_d6_bad_lease_is_refused_before_sending(
    lua: LuaSide, lua_server: EmbeddedServer, lease: object, message: str
) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    lua_server.client.execute_command("CONFIG", "RESETSTAT")
    assert run(lua, "CLAIM", lease) == Refused(message)  # type: ignore[arg-type]
    stats = lua_server.client.info("commandstats")
    assert set(stats) == {"cmdstat_config|resetstat"}, stats  # nothing else reached the server
    assert_keyspace(lua_server.client, {PENDING: Z(j1=T0), row("j1"): H(payload="p", state="pending", enqueued_at=T0)})


def test_claim_lease_at_the_maximum_is_accepted(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    assert run(lua, "CLAIM", MAX_DURATION_MS) == [b"j1", b"p", 1]
    assert lua_server.client.zscore(ACTIVE, "j1") == T0 + MAX_DURATION_MS


@pytest.mark.parametrize(
    "call",
    [
        Call("CLAIM", b"2", (b"emq:{q}:pending", b"emq:{q}:active", b"emq:{q}:", b"100")),
        Call("CLAIM", b"3", (b"emq:{q}:pending", b"emq:{q}:active", b"emq:{q}:")),
        Call("CLAIM", b"x", (b"emq:{q}:pending", b"emq:{q}:active", b"emq:{q}:", b"100")),
    ],
)
def test_claim_d6_shape(lua: LuaSide, call: Call) -> None:
    assert lua.call(call) == Refused(errors.SHAPE)


@pytest.mark.parametrize(
    "keys",
    [
        (b"emq:{q}:pending", b"emq:{q}:active", b"emq:{}:"),
        (b"emq:{q}:pending", b"emq:{r}:active", b"emq:{q}:"),
        (b"emq:{q}:active", b"emq:{q}:pending", b"emq:{q}:"),
        (b"emq:{a}b}:pending", b"emq:{a}b}:active", b"emq:{a}b}:"),
        (b"x", b"y", b"z"),
    ],
)
def test_claim_d6_layout(lua: LuaSide, keys: tuple[bytes, ...]) -> None:
    assert lua.call(Call("CLAIM", b"3", (*keys, b"100"))) == Refused(errors.LAYOUT)


# -- EXTEND --------------------------------------------------------------------------------------


def test_extend_moves_the_deadline(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    group.advance(60)
    assert run(lua, "EXTEND", "j1", 1, 500) == 1
    assert_keyspace(
        lua_server.client,
        {ACTIVE: Z(j1=T0 + 560), row("j1"): H(payload="p", state="active", enqueued_at=T0, attempts=1)},
    )


@pytest.mark.parametrize(("job", "token"), [("j1", 2), ("j1", 0), ("nope", 1)])
def test_extend_fence_refuses(
    lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup, job: str, token: int
) -> None:
    enqueue_and_claim(lua, group)
    group.advance(60)
    assert run(lua, "EXTEND", job, token, 500) == 0
    assert_keyspace(
        lua_server.client,
        {ACTIVE: Z(j1=T0 + 100), row("j1"): H(payload="p", state="active", enqueued_at=T0, attempts=1)},
    )


def test_extend_corrupt_attempts_fails_the_fence(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    lua_server.client.hset(row("j1"), "attempts", "01")
    assert run(lua, "EXTEND", "j1", 1, 500) == 0


def test_extend_wrong_type_active_is_an_error_before_writes(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    lua_server.client.set(ACTIVE, "junk")
    assert_error(run(lua, "EXTEND", "j1", 1, 500), "WRONGTYPE")
    assert_keyspace(lua_server.client, {ACTIVE: S("junk")})


# -- COMPLETE ------------------------------------------------------------------------------------


def test_complete_moves_to_done_and_counts(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    group.advance(30)
    assert run(lua, "COMPLETE", "j1", 1) == 1
    assert run(lua, "COMPLETE", "j1", 1) == 0  # not in active any more
    assert_keyspace(
        lua_server.client,
        {
            DONE: Z(j1=T0 + 30),
            row("j1"): H(payload="p", state="done", enqueued_at=T0, attempts=1, finished_at=T0 + 30),
            COMPLETED: H(count=1),
        },
    )


def test_complete_stale_token_is_refused(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group, lease=10)
    group.advance(10)
    assert run(lua, "SWEEP", 5, 10) == [1, 0, 0, 0]
    assert run(lua, "CLAIM", 10) == [b"j1", b"p", 2]
    assert run(lua, "COMPLETE", "j1", 1) == 0  # the first worker's token is stale
    assert run(lua, "COMPLETE", "j1", 2) == 1


def test_complete_d3_done_wrong_type_partial(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    lua_server.client.set(DONE, "junk")
    assert_error(run(lua, "COMPLETE", "j1", 1), "WRONGTYPE")
    assert_keyspace(
        lua_server.client,
        {DONE: S("junk"), row("j1"): H(payload="p", state="done", enqueued_at=T0, attempts=1, finished_at=T0)},
    )


def test_complete_d4_counter_not_integer_partial(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    lua_server.client.hset(COMPLETED, "count", "x")
    reply = run(lua, "COMPLETE", "j1", 1)
    assert isinstance(reply, ErrorReply) and reply.message.startswith("ERR hash value is not an integer")
    assert_keyspace(
        lua_server.client,
        {
            DONE: Z(j1=T0),
            COMPLETED: H(count="x"),
            row("j1"): H(payload="p", state="done", enqueued_at=T0, attempts=1, finished_at=T0),
        },
    )


# -- FAIL ----------------------------------------------------------------------------------------


def test_fail_retries_after_backoff(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    group.advance(20)
    assert run(lua, "FAIL", "j1", 1, b"boom\x00\xff", 3, 250) == b"retry"
    assert_keyspace(
        lua_server.client,
        {
            DELAYED: Z(j1=T0 + 270),
            row("j1"): H(payload="p", state="delayed", enqueued_at=T0, attempts=1, last_error=b"boom\x00\xff"),
        },
    )


def test_fail_at_max_attempts_dead_letters(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    assert run(lua, "FAIL", "j1", 1, "boom", 1, 250) == b"dead"
    assert run(lua, "FAIL", "j1", 1, "boom", 1, 250) == 0
    assert_keyspace(
        lua_server.client,
        {
            DEAD: Z(j1=0),
            FAILED: H(count=1),
            row("j1"): H(payload="p", state="dead", enqueued_at=T0, attempts=1, last_error="boom"),
        },
    )


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "verdict"),
    [("9", 10, b"retry"), ("10", 9, b"dead"), ("10", 10, b"dead"), ("10", 11, b"retry"), ("100", 99, b"dead")],
)
def test_fail_compares_attempts_exactly(
    lua: LuaSide, lua_server: EmbeddedServer, attempts: str, max_attempts: int, verdict: bytes
) -> None:
    lua_server.client.zadd(ACTIVE, {"j1": T0 + 100})
    lua_server.client.hset(row("j1"), mapping={"attempts": attempts, "state": "active"})
    assert run(lua, "FAIL", "j1", attempts, "e", max_attempts, 0) == verdict


def test_fail_stale_token(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    assert run(lua, "FAIL", "j1", 7, "boom", 1, 0) == 0
    assert lua_server.client.zscore(ACTIVE, "j1") == T0 + 100


# -- PROMOTE -------------------------------------------------------------------------------------


def test_promote_at_the_boundary(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 100) == 1
    group.advance(99)
    assert run(lua, "PROMOTE", 10) == 0  # one ms before due
    group.advance(1)
    assert run(lua, "PROMOTE", 10) == 1  # exactly due: score <= now
    assert_keyspace(
        lua_server.client,
        {PENDING: Z(j1=T0 + 100), row("j1"): H(payload="p", state="pending", enqueued_at=T0)},
    )


def test_promote_respects_limit_and_order(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    for job, delay in (("c", 30), ("a", 10), ("b", 20)):
        assert run(lua, "ENQUEUE", job, "p", delay) == 1
    group.advance(30)
    assert run(lua, "PROMOTE", 2) == 2
    assert lua_server.client.zrange(PENDING, 0, -1) == [b"a", b"b"]
    assert lua_server.client.zrange(DELAYED, 0, -1) == [b"c"]


def test_promote_drops_ghosts(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    lua_server.client.zadd(DELAYED, {"ghost": T0})
    lua_server.client.set(PENDING, "junk")  # never reached: a ghost is not promoted
    assert run(lua, "PROMOTE", 10) == 0
    assert_keyspace(lua_server.client, {PENDING: S("junk")})


def test_promote_d9_row_not_a_hash_partial(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    assert run(lua, "ENQUEUE", "a", "p", 5) == 1
    lua_server.client.zadd(DELAYED, {"bad": T0 + 6, "c": T0 + 7})
    lua_server.client.set(row("bad"), "junk")
    group.advance(10)
    assert_error(run(lua, "PROMOTE", 10), "WRONGTYPE")
    assert_keyspace(
        lua_server.client,
        {
            PENDING: Z(a=T0 + 5, bad=T0 + 6),
            DELAYED: Z(c=T0 + 7),
            row("a"): H(payload="p", state="pending", enqueued_at=T0),
            row("bad"): S("junk"),
        },
    )


# -- SWEEP ---------------------------------------------------------------------------------------


def test_sweep_recovers_at_the_deadline(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    group.advance(99)
    assert run(lua, "SWEEP", 3, 10) == [0, 0, 0, 0]
    group.advance(1)
    assert run(lua, "SWEEP", 3, 10) == [1, 0, 0, 0]
    assert_keyspace(
        lua_server.client,
        {PENDING: Z(j1=0), row("j1"): H(payload="p", state="pending", enqueued_at=T0, attempts=1, stalled=1)},
    )


def test_sweep_dead_letters_at_max_stalled(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    group.advance(100)
    assert run(lua, "SWEEP", 1, 10) == [0, 1, 0, 0]
    assert_keyspace(
        lua_server.client,
        {
            DEAD: Z(j1=0),
            FAILED: H(count=1),
            row("j1"): H(payload="p", state="dead", enqueued_at=T0, attempts=1, stalled=1, last_error="stalled"),
        },
    )


def test_sweep_counts_ghosts_and_keeps_its_budget(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    lua_server.client.zadd(ACTIVE, {"g1": T0 - 3, "g2": T0 - 2, "g3": T0 - 1})
    assert run(lua, "SWEEP", 1, 2) == [0, 0, 2, 0]
    assert_keyspace(lua_server.client, {ACTIVE: Z(g3=T0 - 1)})


def test_sweep_restart_is_counted_by_the_scripts(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    """D7's Lua side: the scripts know no epoch, so a lease that outlived a restart is a stall."""
    group.set_time(1000)
    enqueue_and_claim(lua, group)
    lua_server.restart()
    group.set_time(1200)
    assert run(lua, "SWEEP", 1, 10) == [0, 1, 0, 0]
    assert_keyspace(
        lua_server.client,
        {
            DEAD: Z(j1=0),
            FAILED: H(count=1),
            row("j1"): H(payload="p", state="dead", enqueued_at=1000, attempts=1, stalled=1, last_error="stalled"),
        },
    )


def test_sweep_d8_bad_member_stops_with_partial_writes(
    lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup
) -> None:
    enqueue_and_claim(lua, group, "a", 10)
    lua_server.client.zadd(ACTIVE, {"bad": T0 + 11, "c": T0 + 12})
    lua_server.client.hset(row("bad"), "stalled", "x")
    group.advance(20)
    reply = run(lua, "SWEEP", 5, 10)
    assert isinstance(reply, ErrorReply) and reply.message.startswith("ERR hash value is not an integer")
    assert_keyspace(
        lua_server.client,
        {
            ACTIVE: Z(c=T0 + 12),
            PENDING: Z(a=0),
            row("a"): H(payload="p", state="pending", enqueued_at=T0, attempts=1, stalled=1),
            row("bad"): H(stalled="x"),
        },
    )


def test_sweep_d8_group_field_is_ignored_by_the_scripts(
    lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup
) -> None:
    enqueue_and_claim(lua, group)
    lua_server.client.hset(row("j1"), "group", "g")
    group.advance(100)
    assert run(lua, "SWEEP", 5, 10) == [1, 0, 0, 0]


# -- REVIVE --------------------------------------------------------------------------------------


def test_revive_a_dead_job(lua: LuaSide, lua_server: EmbeddedServer, group: ServerGroup) -> None:
    enqueue_and_claim(lua, group)
    group.advance(100)
    assert run(lua, "SWEEP", 1, 10) == [0, 1, 0, 0]
    group.advance(5)
    assert run(lua, "REVIVE", "j1") == 1
    assert run(lua, "REVIVE", "j1") == 0
    assert_keyspace(
        lua_server.client,
        {
            PENDING: Z(j1=T0 + 105),
            FAILED: H(count=1),
            row("j1"): H(payload="p", state="pending", enqueued_at=T0, attempts=1, stalled=0, last_error="stalled"),
        },
    )
    assert run(lua, "CLAIM", 10) == [b"j1", b"p", 2]  # attempts keep growing


def test_revive_only_dead_jobs(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    assert run(lua, "REVIVE", "j1") == 0
    assert run(lua, "REVIVE", "nope") == 0


def test_revive_ghost_is_consumed(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    lua_server.client.zadd(DEAD, {"ghost": 0})
    assert run(lua, "REVIVE", "ghost") == 0
    assert_keyspace(lua_server.client, {})


# -- PAUSE / RESUME ------------------------------------------------------------------------------


def test_pause_and_resume(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    assert run(lua, "PAUSE") == 1
    assert run(lua, "PAUSE") == 0
    assert_keyspace(
        lua_server.client,
        {META: H(paused=1), PENDING: Z(j1=T0), row("j1"): H(payload="p", state="pending", enqueued_at=T0)},
    )
    assert run(lua, "CLAIM", 10) == []
    assert run(lua, "RESUME") == 1
    assert run(lua, "RESUME") == 0
    assert run(lua, "CLAIM", 10) == [b"j1", b"p", 1]


def test_pause_on_wrong_type_meta(lua: LuaSide, lua_server: EmbeddedServer) -> None:
    lua_server.client.set(META, "junk")
    assert_error(run(lua, "PAUSE"), "WRONGTYPE")
    assert_error(run(lua, "RESUME"), "WRONGTYPE")


def test_pause_layout(lua: LuaSide) -> None:
    assert lua.call(Call("PAUSE", b"1", (b"emq:{q}:active",))) == Refused(errors.LAYOUT)
    assert lua.call(Call("PAUSE", b"1", (b"emq:{}:meta",))) == Refused(errors.LAYOUT)
    assert lua.call(Call("PAUSE", b"1", ())) == Refused(errors.SHAPE)


# -- scripts across restarts ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["restart", "crash"])
def test_noscript_after_restart_reloads(lua: LuaSide, lua_server: EmbeddedServer, how: str) -> None:
    assert run(lua, "ENQUEUE", "j1", "p", 0) == 1
    getattr(lua_server, how)()
    assert lua_server.client.execute_command("SCRIPT", "EXISTS", lua.shas["CLAIM"]) == [0]
    assert run(lua, "CLAIM", 10) == [b"j1", b"p", 1]
