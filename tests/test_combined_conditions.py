"""Two server conditions at once, on real servers: the ten cases where the unmodified pair differed
(docs/contract-decisions.md, "Two refusals at once"), each now answered alike, and as the spec's model
predicts where the history format can say it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import valkey

from difftest.coverage.labels import labels
from difftest.history import format as hist
from difftest.history.resolve import resolve
from difftest.replay.replayer import Replayer
from difftest.replay.replicas import Replicas, primary_options
from difftest.replay.sides import LuaSide, NativeSide, Side
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer
from difftest.spec.calls import Call
from difftest.spec.domains import acl_user, permission_users
from difftest.spec.errors import error_code
from executors.native.adapter import DEFAULT_MODULE

pytestmark = pytest.mark.servers

Q = "q"
META = "emq:{q}:meta"
USERS = permission_users((Q.encode(),))
JOB_READER = acl_user("job:*", "read")  # may only read job rows: ENQUEUE's HSET is denied to it
ENQUEUE = Call.of("ENQUEUE", Q, "j9", "p", 0)
PAUSE = Call.of("PAUSE", Q)
HOST_AND_MODULE = {"PAUSE": (("HSET", META, "paused", "1"), ("EMQ.PAUSE", 1, META)),
                   "RESUME": (("HDEL", META, "paused"), ("EMQ.RESUME", 1, META))}  # fmt: skip


def _code(reply: Any) -> Any:
    """An error by its code (the first word), anything else as it is; lists element by element."""
    if isinstance(reply, list):
        return [_code(r) for r in reply]
    message = getattr(reply, "message", None)
    if message is not None:
        return error_code(message)
    if isinstance(reply, Exception):
        text = str(reply)
        return "EXECABORT" if text.startswith(("Transaction discarded", "EXECABORT")) else text.split()[0]
    return reply


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[list[EmbeddedServer], Replicas]]:
    with ServerGroup() as group:
        primaries = [
            group.add("lua", **primary_options()),
            group.add("native", module=DEFAULT_MODULE, **primary_options()),
        ]
        replicas = Replicas(group, [("lua", primaries[0]), ("native", primaries[1])])
        try:
            yield primaries, replicas
        finally:
            for server in primaries:
                _conditions(server, memory=False, denied=False)
            replicas.close()


def _conditions(server: EmbeddedServer, memory: bool, denied: bool) -> None:
    client = server.client
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1 if memory else 0)
    client.config_set("min-replicas-max-lag", 10)
    client.config_set("min-replicas-to-write", 100 if denied else 0)


def _sides(primaries: list[EmbeddedServer]) -> list[Side]:
    sides: list[Side] = [LuaSide(primaries[0], USERS), NativeSide(primaries[1], USERS)]
    for side in sides:
        _conditions(side.server, memory=False, denied=False)
        side.server.client.flushall()
        side.call(Call.of("ENQUEUE", Q, "j1", "p", 0))
    return sides


def _transaction(client: valkey.Valkey, command: tuple[Any, ...], between: Any = None) -> list[Any]:
    """MULTI, the command, EXEC on one connection, each reply kept; `between` runs before EXEC."""
    connection = client.connection_pool.get_connection("MULTI")
    replies: list[Any] = []
    try:
        for step in (("MULTI",), command, ("EXEC",)):
            if step[0] == "EXEC" and between is not None:
                between()
            connection.send_command(*step)
            try:
                replies.append(connection.read_response())
            except valkey.exceptions.ResponseError as error:
                replies.append(error)
    finally:
        client.connection_pool.release(connection)
    return replies


@pytest.mark.parametrize(("memory", "denied", "user", "call", "expected"), [
    (True, False, JOB_READER, ENQUEUE, "OOM"),  # 1: the limit before the row's ACL
    (True, True, None, ENQUEUE, "OOM"),  # 2: the limit before writes denied
    (True, True, None, PAUSE, "OOM"),  # 4: the host's HSET, checked by the server
    (False, True, JOB_READER, ENQUEUE, "NOPERM"),  # the row's ACL before writes denied
    (True, True, None, Call.of("CLAIM", Q, 10), "NOREPLICAS"),  # ZPOPMIN is not deny-oom
])  # fmt: skip
def test_two_refusals_at_the_first_write_are_answered_alike(
    servers: tuple[list[EmbeddedServer], Replicas], memory: bool, denied: bool, user: str | None, call: Call,
    expected: str,
) -> None:  # fmt: skip
    primaries, _ = servers
    sides = _sides(primaries)
    before = [side.server.client.dbsize() for side in sides]
    for side in sides:
        _conditions(side.server, memory, denied)
    replies = [side.call(call, user=user) for side in sides]
    for side in sides:
        _conditions(side.server, memory=False, denied=False)
    assert [_code(r) for r in replies] == [expected, expected]
    assert [side.server.client.dbsize() for side in sides] == before  # nothing written
    for side in sides:
        side.close()


@pytest.mark.parametrize(("verb", "memory", "denied", "expected"), [
    ("PAUSE", False, True, ["OK", "NOREPLICAS", "EXECABORT"]),  # 6
    ("RESUME", False, True, ["OK", "NOREPLICAS", "EXECABORT"]),
    ("PAUSE", True, False, ["OK", "OOM", "EXECABORT"]),
    ("RESUME", True, False, ["OK", "QUEUED", [0]]),  # HDEL is not deny-oom: queued and run
])  # fmt: skip
def test_a_transaction_holding_a_refused_pause_is_discarded_on_both(
    servers: tuple[list[EmbeddedServer], Replicas], verb: str, memory: bool, denied: bool, expected: list[Any]
) -> None:
    primaries, _ = servers
    _sides(primaries)
    for server in primaries:
        _conditions(server, memory, denied)
    replies = [
        _transaction(server.client, command) for server, command in zip(primaries, HOST_AND_MODULE[verb], strict=True)
    ]
    for server in primaries:
        _conditions(server, memory=False, denied=False)
    wanted = [b"OK" if e == "OK" else b"QUEUED" if e == "QUEUED" else e for e in expected]
    assert [_code(r) for r in replies] == [wanted, wanted]


@pytest.mark.parametrize("condition", ["memory", "denied"])
def test_a_condition_set_between_multi_and_exec_discards_the_transaction_on_both(
    servers: tuple[list[EmbeddedServer], Replicas], condition: str
) -> None:
    """Cases 7 and 8: EXEC checks the queued commands' flags again; PAUSE is deny-oom and write on both."""
    primaries, _ = servers
    _sides(primaries)
    replies = []
    for server, command in zip(primaries, HOST_AND_MODULE["PAUSE"], strict=True):
        replies.append(_transaction(server.client, command, lambda s=server: _conditions(
            s, memory=condition == "memory", denied=condition == "denied")))  # fmt: skip
        _conditions(server, memory=False, denied=False)
    assert [_code(r) for r in replies] == [[b"OK", b"QUEUED", "EXECABORT"]] * 2
    assert [server.client.hget(META, "paused") for server in primaries] == [None, None]


@pytest.mark.parametrize("verb", ["PAUSE", "RESUME"])
def test_on_a_replica_under_its_own_memory_limit_both_refuse_alike(
    servers: tuple[list[EmbeddedServer], Replicas], verb: str
) -> None:
    """Cases 3, 5, 9 and 10: a replica that obeys its own limit (`replica-ignore-maxmemory no`): OOM
    where the first write is deny-oom (ENQUEUE, PAUSE), READONLY otherwise, a transaction discarded."""
    primaries, replicas = servers
    _sides(primaries)
    assert replicas.check() is None
    targets: list[Side] = [LuaSide(pair.replica, {}) if pair.side == "lua" else NativeSide(pair.replica, {})
                           for pair in replicas.pairs]  # fmt: skip
    clients = [pair.replica.client for pair in replicas.pairs]
    for client in clients:
        client.config_set("replica-ignore-maxmemory", "no")
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", 1)
    try:
        call = Call.of(verb, Q)
        expected = "OOM" if verb == "PAUSE" else "READONLY"
        assert [_code(t.call(call)) for t in targets] == [expected, expected]
        assert [_code(t.call(ENQUEUE)) for t in targets] == ["OOM", "OOM"]
        multi = [_code(_transaction(c, cmd)) for c, cmd in zip(clients, HOST_AND_MODULE[verb], strict=True)]
        assert multi == [[b"OK", expected, "EXECABORT"]] * 2
    finally:
        for client in clients:
            client.config_set("maxmemory", 0)
            client.config_set("replica-ignore-maxmemory", "yes")
        for target in targets:
            target.close()
    assert replicas.check() is None  # nothing written on either replica


def _history(text: str) -> hist.History:
    users = '{"acl-job-any-read": ' + str(list(USERS[JOB_READER])).replace("'", '"') + "}"
    return hist.loads('{"format": "difftest-history", "version": 1, "start_ms": 1000, "users": ' + users + "}\n"
                      + text, "h.jsonl")  # fmt: skip


COMBINED = _history("""
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}
{"op": "memory", "limit": true}
{"op": "replicas", "required": true}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0], "user": "acl-job-any-read"}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}
{"op": "call", "verb": "PAUSE", "queue": "q", "args": []}
{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100], "resp": 3}
{"op": "memory", "limit": false}
{"op": "multi"}
{"op": "call", "verb": "REVIVE", "queue": "q", "args": ["j1"]}
{"op": "call", "verb": "PAUSE", "queue": "q", "args": []}
{"op": "exec"}
{"op": "replicas", "required": false}
{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}
""")


def test_a_history_of_combined_conditions_is_judged_by_the_model_and_agrees() -> None:
    """The refusals above as one history: the pair agrees, the model predicts every step (the
    transaction's elements as EXECABORT), and the last CLAIM takes j1, which nothing refused wrote over."""
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(COMBINED)
    assert result.divergence is None, result.divergence
    assert [r.verdict.kind for r in result.records if r.resolved.in_multi] == ["match", "match"]
    replies = {r.resolved.index: r.lua_reply for r in result.records}
    assert [_code(replies[i]) for i in (3, 4, 5, 6, 9, 10)] == ["OOM", "OOM", "OOM", "NOREPLICAS", "EXECABORT",
                                                                "EXECABORT"]  # fmt: skip
    assert replies[13][0] == b"j1"


META_WRITER = acl_user("meta", "write")  # may write meta but not read it (N4)
N4_UNDER_THE_LIMIT = hist.loads(
    '{"format": "difftest-history", "version": 1, "start_ms": 1000, "users": {"' + META_WRITER + '": '
    + str(list(USERS[META_WRITER])).replace("'", '"') + "}}\n"
    + '{"op": "memory", "limit": true}\n'
    + '{"op": "call", "verb": "PAUSE", "queue": "q", "args": [], "user": "' + META_WRITER + '"}\n',
    "n4.jsonl",
)  # fmt: skip


def test_n4_under_the_limit_is_the_rows_not_a_first_write_refusal() -> None:
    """N4 and the memory limit at once (found by the generated campaign, seed 20261203): the host's
    HSET passes its ACL (write) and meets the limit (OOM), the native command never runs (the server
    refuses its declared key: NOPERM). The row applies, not the first-write refusal's rule."""
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(N4_UNDER_THE_LIMIT)
    assert result.divergence is None, result.divergence
    record = result.records[1]
    assert (_code(record.lua_reply), _code(record.native_reply)) == ("OOM", "NOPERM")
    assert record.verdict.rule == "N4"


GUARDED_IN_A_DISCARDED_TRANSACTION = hist.loads(
    """{"format": "difftest-history", "version": 1, "start_ms": 1000}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}
{"op": "replicas", "required": true}
{"op": "multi"}
{"op": "call", "verb": "PAUSE", "queue": "q", "args": []}
{"op": "call", "verb": "EXTEND", "queue": "q", "args": ["j1", "9223372036854775808", "1"]}
{"op": "exec"}
{"op": "replicas", "required": false}
""",
    "d6.jsonl",
)


def test_a_call_the_host_refuses_inside_a_discarded_transaction_is_d6() -> None:
    """Found by the catalogue's first run on the combined block: the host's guards refuse a token past
    i64 (never sent), the module's command is queued and discarded with the PAUSE the server refused."""
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(GUARDED_IN_A_DISCARDED_TRANSACTION)
    assert result.divergence is None, result.divergence
    pause, extend = result.records[3], result.records[4]
    assert (_code(pause.lua_reply), _code(pause.native_reply)) == ("EXECABORT", "EXECABORT")
    assert (_code(extend.lua_reply), _code(extend.native_reply)) == ("EMQ OVERFLOW", "EXECABORT")
    assert extend.verdict.rule == "D6"


def _replica_history(replica: str) -> hist.History:
    return hist.loads(
        '{"format": "difftest-history", "version": 1, "start_ms": 1000}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0], "target": "replica"}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}\n'
        f'{{"op": "memory", "limit": true, "replica": "{replica}"}}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0], "target": "replica"}\n'
        '{"op": "call", "verb": "PAUSE", "queue": "q", "args": [], "target": "replica"}\n'
        '{"op": "call", "verb": "RESUME", "queue": "q", "args": [], "target": "replica"}\n'
        '{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100], "target": "replica"}\n'
        '{"op": "restart"}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0], "target": "replica"}\n'
        '{"op": "memory", "limit": false}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0], "target": "replica"}\n',
        f"replica-{replica}.jsonl",
    )


@pytest.mark.parametrize(("replica", "deny_oom_first_write"), [("ignores", "READONLY"), ("obeys", "OOM")])
def test_a_replica_under_its_own_limit_is_answered_alike_and_as_the_model_predicts(
    replica: str, deny_oom_first_write: str
) -> None:
    """The eleventh case (found after the ten, not in the issue): a replica configured as its primary
    (`maxmemory` set, `replica-ignore-maxmemory yes`, the default) answered ENQUEUE with OOM from the
    module and READONLY from the scripts (their runner never refuses for memory on a replica that
    ignores its limit; the module read the context's OOM flag). The replica's limit also holds on the
    fresh replica a restart of its primary starts, and goes with the primary's."""
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(_replica_history(replica))
    assert result.divergence is None, result.divergence
    codes = [(_code(r.lua_reply), _code(r.native_reply)) for r in result.records]
    assert codes[3] == codes[4] == codes[8] == (deny_oom_first_write, deny_oom_first_write)
    assert codes[5] == ("READONLY", "READONLY")  # RESUME's first write (HDEL) is not deny-oom
    assert codes[10] == ("READONLY", "READONLY")  # the replica's limit lifted with the primary's
    assert not any(r.verdict.unjudged for r in result.records)  # the model predicted every step


SWITCHED_INSIDE = hist.loads(
    """{"format": "difftest-history", "version": 1, "start_ms": 1000}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}
{"op": "multi"}
{"op": "call", "verb": "PAUSE", "queue": "q", "args": []}
{"op": "memory", "limit": true}
{"op": "exec"}
{"op": "multi"}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}
{"op": "call", "verb": "PROMOTE", "queue": "q", "args": [5]}
{"op": "memory", "limit": false}
{"op": "exec"}
{"op": "multi"}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j3", "p", 0]}
{"op": "replicas", "required": true}
{"op": "call", "verb": "PROMOTE", "queue": "q", "args": [5]}
{"op": "exec"}
{"op": "multi"}
{"op": "call", "verb": "RESUME", "queue": "q", "args": []}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j4", "p", 0]}
{"op": "exec"}
{"op": "replicas", "required": false}
{"op": "multi"}
{"op": "call", "verb": "RESUME", "queue": "q", "args": []}
{"op": "replicas", "required": true}
{"op": "replicas", "required": false}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j4", "p", 0]}
{"op": "exec"}
""",
    "switched-inside.jsonl",
)


def test_a_condition_switched_inside_a_transaction_is_replayed_and_predicted() -> None:
    """Cases 7 and 8 as a history: a condition switched between MULTI and EXEC (from a connection of
    its own, once the calls before it are queued). A queued PAUSE under the limit at EXEC: the whole
    transaction discarded on both; scripts under a limit lifted before EXEC: they run; EVALSHAs alone
    under writes denied at EXEC: each refused at its first write, nothing discarded; a queued RESUME
    refused when queued: discarded; writes denied and lifted again before EXEC: it runs."""
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(SWITCHED_INSIDE)
    assert result.divergence is None, result.divergence
    codes = {r.resolved.index: (_code(r.lua_reply), _code(r.native_reply)) for r in result.records}
    assert codes[2] == ("EXECABORT", "EXECABORT")  # PAUSE, the limit set before EXEC
    assert codes[6] == (1, 1) and codes[7] == (0, 0)  # the limit lifted before EXEC: both ran
    assert codes[11] == ("NOREPLICAS", "NOREPLICAS")  # a script refused at its first write
    assert codes[13] == (0, 0)  # a PROMOTE with nothing due writes nothing: it answers
    assert codes[16] == codes[17] == ("EXECABORT", "EXECABORT")  # RESUME refused when queued
    assert codes[21] == (0, 0)  # RESUME ran (nothing paused): writes denied and allowed again before EXEC
    assert codes[24] == (1, 1)  # writes allowed again at EXEC
    assert not any(r.verdict.unjudged for r in result.records)  # the model predicted every step


RESENT_AFTER_A_RESYNC = hist.loads(
    """{"format": "difftest-history", "version": 1, "start_ms": 1000}
{"op": "raw", "command": ["ZADD", "emq:{r}:meta", "1", "junk"]}
{"op": "call", "verb": "CLAIM", "queue": "r", "args": [5]}
{"op": "call", "verb": "PAUSE", "queue": "q", "args": []}
{"op": "multi"}
{"op": "call", "verb": "RESUME", "queue": "q", "args": []}
{"op": "replicas", "required": true}
{"op": "exec"}
{"op": "replicas", "required": false}
""",
    "resent.jsonl",
)


def test_steps_sent_again_after_a_resync_meet_the_conditions_of_their_time() -> None:
    """Found by the generator's first null run with switches inside transactions: a row that re-syncs
    (D2 at the CLAIM) makes the Lua side send the segment's later steps again, and the transaction's
    switch, made the first time, had left writes denied for the PAUSE before it (NOREPLICAS on the
    Lua side alone). The Lua server's conditions are set back to those of the re-sync's step first."""
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(RESENT_AFTER_A_RESYNC)
    assert result.divergence is None, result.divergence
    assert result.records[1].verdict.rule == "D2"  # the re-sync this test needs
    assert (result.records[2].lua_reply, result.records[2].native_reply) == (1, 1)
    assert _code(result.records[4].lua_reply) == "EXECABORT" == _code(result.records[4].native_reply)


ROW_IN_A_DISCARDED_TRANSACTION = hist.loads(
    """{"format": "difftest-history", "version": 1, "start_ms": 1000}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}
{"op": "call", "verb": "CLAIM", "queue": "q", "args": [1]}
{"op": "raw", "command": ["HSET", "emq:{q}:job:j1", "stalled", ""]}
{"op": "advance", "ms": 1}
{"op": "memory", "limit": true}
{"op": "multi"}
{"op": "call", "verb": "SWEEP", "queue": "q", "args": [1, 1]}
{"op": "call", "verb": "PAUSE", "queue": "q", "args": []}
{"op": "exec"}
{"op": "memory", "limit": false}
""",
    "row-discarded.jsonl",
)


def test_a_row_whose_precondition_holds_does_not_apply_to_a_discarded_call() -> None:
    """Found by the null run: a SWEEP over a corrupt `stalled` counter (D8's precondition) queued with
    a PAUSE the memory limit refuses when queued: both servers discard the transaction (EXECABORT),
    which D8's expectation (the scripts' overflow error) took for a divergence."""
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(ROW_IN_A_DISCARDED_TRANSACTION)
    assert result.divergence is None, result.divergence
    sweep = result.records[6]
    assert sweep.resolved.aborted and _code(sweep.lua_reply) == "EXECABORT" == _code(sweep.native_reply)


def _on_replica_history(limit: str) -> hist.History:
    return hist.loads(
        '{"format": "difftest-history", "version": 1, "start_ms": 1000}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}\n'
        + limit
        + '{"op": "multi", "target": "replica"}\n'
        '{"op": "call", "verb": "PAUSE", "queue": "q", "args": []}\n'
        '{"op": "call", "verb": "PROMOTE", "queue": "q", "args": [5]}\n'
        '{"op": "exec"}\n'
        '{"op": "multi", "target": "replica"}\n'
        '{"op": "call", "verb": "PROMOTE", "queue": "q", "args": [5]}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}\n'
        '{"op": "call", "verb": "SWEEP", "queue": "q", "args": [1, 1]}\n'
        '{"op": "exec"}\n'
        '{"op": "multi", "target": "replica"}\n'
        '{"op": "call", "verb": "RESUME", "queue": "q", "args": []}\n'
        '{"op": "exec"}\n'
        '{"op": "memory", "limit": false}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}\n',
        "multi-on-replica.jsonl",
    )


@pytest.mark.parametrize(("limit", "enqueue"), [
    ("", "READONLY"),
    ('{"op": "memory", "limit": true, "replica": "obeys"}\n', "OOM"),
])  # fmt: skip
def test_a_transaction_sent_to_a_replica_is_replayed_and_predicted(limit: str, enqueue: str) -> None:
    """Cases 9 and 10 as a history (`"target": "replica"` on the multi): a PAUSE or RESUME queued on
    the replica is refused when queued (READONLY) and the transaction discarded on both; scripts
    alone are queued and refused at their first write, one that writes nothing answers; under the
    replica's own limit, obeyed, ENQUEUE's deny-oom first write meets OOM first."""
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(_on_replica_history(limit))
    assert result.divergence is None, result.divergence
    codes = [(_code(r.lua_reply), _code(r.native_reply)) for r in result.records if r.resolved.in_multi]
    assert codes == [("EXECABORT", "EXECABORT")] * 2 + [(0, 0), (enqueue, enqueue), ([0, 0, 0, 0], [0, 0, 0, 0])] + [
        ("EXECABORT", "EXECABORT")]  # fmt: skip
    assert result.records[-1].native_reply == 1  # the replica wrote nothing; the primary takes j2
    assert not any(r.verdict.unjudged for r in result.records)  # the model predicted every step


SCRIPTS_ONLY_IN_A_DISCARDED_TRANSACTION = hist.loads(
    """{"format": "difftest-history", "version": 1}
{"op": "multi"}
{"op": "memory", "limit": true}
{"op": "call", "verb": "COMPLETE", "queue": "q", "args": ["j1", "-1"], "executor": "lua"}
{"op": "call", "verb": "PAUSE", "queue": "q", "args": [], "executor": "lua"}
""",
    "scripts-only.jsonl",
)


def test_a_call_the_host_refuses_on_both_servers_in_a_discarded_transaction_is_the_hosts() -> None:
    """Found by the null run: a Lua-era worker's call (`executor: lua`, the host on both servers) that
    the host's guards refuse is sent by neither, in a transaction a PAUSE discarded at EXEC (the limit
    set after MULTI): both answer the host's refusal, which the model predicted as EXECABORT for the
    native."""
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(SCRIPTS_ONLY_IN_A_DISCARDED_TRANSACTION)
    assert result.divergence is None, result.divergence
    complete, pause = result.records[2], result.records[3]
    assert _code(complete.native_reply) == "EMQ ARG" and _code(pause.native_reply) == "EXECABORT"


RESP3_TRANSACTIONS = hist.loads(
    """{"format": "difftest-history", "version": 1}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}
{"op": "memory", "limit": true}
{"op": "multi", "resp": 3}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}
{"op": "call", "verb": "PROMOTE", "queue": "q", "args": [10]}
{"op": "exec"}
{"op": "memory", "limit": false}
{"op": "multi", "target": "replica", "resp": 3}
{"op": "call", "verb": "PROMOTE", "queue": "q", "args": [10]}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j3", "p", 0]}
{"op": "exec"}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j4", "p", 0], "target": "replica", "resp": 3}
""",
    "resp3-transactions.jsonl",
)


def test_transactions_and_replica_calls_on_resp3_are_replayed_and_predicted() -> None:
    """A transaction on a RESP3 connection gives its calls its protocol (resolve), and is sent on the
    admin's RESP3 wire: over the memory limit its ENQUEUE's deny-oom first write meets OOM inside EXEC
    on both, the PROMOTE beside it answers; on a replica the scripts are queued and the write refused
    at its first write (READONLY), a call to the replica on RESP3 likewise; the model predicts each."""
    resolved = [r for r in resolve(RESP3_TRANSACTIONS.steps) if r.call is not None]
    assert [r.protocol for r in resolved] == [2, 3, 3, 3, 3, 3]
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(RESP3_TRANSACTIONS)
    assert result.divergence is None, result.divergence
    codes = [(_code(r.lua_reply), _code(r.native_reply)) for r in result.records if r.resolved.call is not None]
    assert codes == [(1, 1), ("OOM", "OOM"), (0, 0), (0, 0), ("READONLY", "READONLY"), ("READONLY", "READONLY")]
    assert not any(r.verdict.unjudged for r in result.records)  # the model predicted every step
    assert {"pair:oom+resp3:enqueue:first-write", "pair:resp3+multi:enqueue:first-write",
            "pair:replica+resp3:enqueue:first-write"} <= set(labels(result))  # fmt: skip
