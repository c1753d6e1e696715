"""The memory limit, writes the server denies (too few replicas, a failed save) and a read-only replica as
a call target, on real servers: each verb's outcome on both executors (docs/contract-decisions.md, "The
memory limit", "Writes the server denies", "A read-only replica as a call target")."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import valkey
import valkey.exceptions

from difftest.campaign.driver import last_pass
from difftest.cli.main import EXIT_DIVERGENCE, main
from difftest.history import format as hist
from difftest.history.format import REPLICA as TO_REPLICA
from difftest.history.format import CallStep
from difftest.replay.artifacts import save_divergence
from difftest.replay.build import record
from difftest.replay.replayer import Replayer, ReplayResult
from difftest.replay.replicas import KIND, Replicas, primary_options
from difftest.replay.sides import LuaSide, NativeSide, Side
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer
from difftest.spec.calls import Call
from difftest.spec.replies import ErrorReply, NotSent, Simple
from difftest.spec.snapshot import CANONICAL_WALK_SCRIPT, parse_canonical
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import planted_scripts

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"servers": ("servers",)}

Q = "q"
OOM, READONLY = "OOM", "READONLY"

# What every side holds before the call: j1 pending, j2 active (token 1) and expired, j3 delayed and
# due, j4 dead. Then the call and its expected reply, over the limit and on the replica (an error
# code, or the reply); `None` in the prologue's place: the queue is paused first.
SETUP = [
    Call.of("ENQUEUE", Q, "j2", "p2", 0),
    Call.of("CLAIM", Q, 100),
    Call.of("ENQUEUE", Q, "j4", "p4", 0),
    Call.of("CLAIM", Q, 100),
    Call.of("FAIL", Q, "j4", 1, "e", 1, 0),
    Call.of("ENQUEUE", Q, "j1", "p1", 0),
    Call.of("ENQUEUE", Q, "j3", "p3", 50),
]
CASES: list[tuple[str, Call, Any, Any]] = [
    ("enqueue-new", Call.of("ENQUEUE", Q, "j9", "p9", 0), OOM, READONLY),
    ("enqueue-duplicate", Call.of("ENQUEUE", Q, "j1", "p", 0), 0, 0),
    ("claim", Call.of("CLAIM", Q, 100), [b"j1", b"p1", 1], READONLY),
    ("extend", Call.of("EXTEND", Q, "j2", 1, 100), OOM, READONLY),
    ("extend-fenced-off", Call.of("EXTEND", Q, "j2", 7, 100), 0, 0),
    ("complete", Call.of("COMPLETE", Q, "j2", 1), 1, READONLY),
    ("complete-fenced-off", Call.of("COMPLETE", Q, "j1", 1), 0, 0),
    ("fail-retry", Call.of("FAIL", Q, "j2", 1, "e", 3, 10), b"retry", READONLY),
    ("fail-dead", Call.of("FAIL", Q, "j2", 1, "e", 1, 0), b"dead", READONLY),
    ("fail-fenced-off", Call.of("FAIL", Q, "j9", 1, "e", 1, 0), 0, 0),
    ("promote", Call.of("PROMOTE", Q, 3), 1, READONLY),
    ("sweep", Call.of("SWEEP", Q, 1, 3), [0, 1, 0, 0], READONLY),
    ("promote-none-due", Call.of("PROMOTE", "r", 3), 0, 0),
    ("sweep-none-expired", Call.of("SWEEP", "r", 1, 3), [0, 0, 0, 0], [0, 0, 0, 0]),
    ("revive", Call.of("REVIVE", Q, "j4"), 1, READONLY),
    ("revive-not-dead", Call.of("REVIVE", Q, "j1"), 0, 0),
    ("pause", Call.of("PAUSE", Q), OOM, READONLY),
    ("resume", Call.of("RESUME", Q), 0, READONLY),
]
# the queue paused first: CLAIM answers empty with no write, RESUME writes
PAUSED_CASES: list[tuple[str, Call, Any, Any]] = [
    ("claim-paused", Call.of("CLAIM", Q, 100), [], []),
    ("resume-paused", Call.of("RESUME", Q), 1, READONLY),
]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ServerGroup, list[EmbeddedServer], Replicas]]:
    with ServerGroup() as group:
        lua = group.add("lua", **primary_options())
        native = group.add("native", module=DEFAULT_MODULE, **primary_options())
        replicas = Replicas(group, [("lua", lua), ("native", native)])
        try:
            yield group, [lua, native], replicas
        finally:
            replicas.close()


def _walk(server: EmbeddedServer) -> Any:
    return parse_canonical(server.client.execute_command(b"EVAL", CANONICAL_WALK_SCRIPT, b"0"))[0]


def _outcome(reply: Any) -> Any:
    if isinstance(reply, NotSent):
        return None
    return reply.message.split()[0] if isinstance(reply, ErrorReply) else reply


def _prepare(group: ServerGroup, primaries: list[EmbeddedServer], paused: bool) -> list[Side]:
    sides: list[Side] = [LuaSide(primaries[0], {}), NativeSide(primaries[1], {})]
    group.clock.set(1_000_000)
    for side in sides:
        side.server.client.flushall()
        for call in SETUP:
            side.call(call)
        if paused:
            side.call(Call.of("PAUSE", Q))
    group.advance(200)  # j2's lease and j3's delay are past
    return sides


@pytest.mark.parametrize(("name", "call", "over_limit", "_"), CASES + PAUSED_CASES)
def test_over_the_memory_limit_both_executors_do_what_the_scripts_do(
    servers: tuple[ServerGroup, list[EmbeddedServer], Replicas], name: str, call: Call, over_limit: Any, _: Any
) -> None:
    group, primaries, _replicas = servers
    sides = _prepare(group, primaries, name.endswith("-paused"))
    for server in primaries:
        server.client.config_set("maxmemory-policy", "noeviction")
        server.client.config_set("maxmemory", 1)
    try:
        replies = [side.call(call) for side in sides]
    finally:
        for server in primaries:
            server.client.config_set("maxmemory", 0)
    assert [_outcome(r) for r in replies] == [over_limit, over_limit], name
    lua_after, native_after = (_walk(s) for s in primaries)
    assert lua_after == native_after, name  # the same writes (or none), lease_epoch aside (N1)
    for side in sides:
        side.close()


def _writes_denied_outcome(on_replica: Any, code: str) -> Any:
    """Where the servers deny writes, a call is refused exactly where a replica refuses it (wherever
    the script writes), with the server's own code; elsewhere it answers as there."""
    return code if on_replica == READONLY else on_replica


@pytest.mark.parametrize(("name", "call", "_", "on_replica"), CASES + PAUSED_CASES)
def test_with_too_few_replicas_both_executors_refuse_wherever_the_scripts_write(
    servers: tuple[ServerGroup, list[EmbeddedServer], Replicas], name: str, call: Call, _: Any, on_replica: Any
) -> None:
    """min-replicas-to-write above the good replicas connected: NOREPLICAS at the first write, as the
    script is refused (the unmodified module wrote: docs/contract-decisions.md, "Writes the server denies")."""
    group, primaries, _replicas = servers
    sides = _prepare(group, primaries, name.endswith("-paused"))
    before = [_walk(s) for s in primaries]
    for server in primaries:
        server.client.config_set("min-replicas-to-write", 100)
        server.client.config_set("min-replicas-max-lag", 10)
    try:
        replies = [side.call(call) for side in sides]
    finally:
        for server in primaries:
            server.client.config_set("min-replicas-to-write", 0)
    expected = _writes_denied_outcome(on_replica, "NOREPLICAS")
    assert [_outcome(r) for r in replies] == [expected, expected], name
    lua_after, native_after = (_walk(s) for s in primaries)
    assert lua_after == native_after, name
    if expected == "NOREPLICAS":
        assert [lua_after, native_after] == before, name  # refused at the first write: nothing written
    for side in sides:
        side.close()


def _failing_saves(server: EmbeddedServer) -> tuple[dict[str, str], Path]:
    """The server's next RDB save fails (its file's name, dump.rdb, is taken by a directory: the rename
    of the written file fails), with save points and stop-writes-on-bgsave-error on: from then on it
    denies writes with MISCONF. Returns what to set back and the directory to remove."""
    client = server.client
    kept = {name: str(client.config_get(name)[name]) for name in ("save", "stop-writes-on-bgsave-error")}
    taken = server.workdir / str(client.config_get("dbfilename")["dbfilename"])
    if taken.exists():  # an earlier save's file (a replica's sync): kept aside, put back after
        taken.rename(taken.with_name(taken.name + ".kept"))
    taken.mkdir()
    client.config_set("save", "3600 1")
    client.config_set("stop-writes-on-bgsave-error", "yes")
    client.bgsave()
    deadline = time.monotonic() + 60
    while client.info("persistence")["rdb_bgsave_in_progress"]:
        assert time.monotonic() < deadline, "the failing BGSAVE did not end"
        time.sleep(0.01)
    assert client.info("persistence")["rdb_last_bgsave_status"] == "err"
    return kept, taken


@pytest.mark.parametrize("name", ["enqueue-new", "enqueue-duplicate", "claim", "complete", "sweep", "pause", "resume"])
def test_after_a_failed_save_both_executors_refuse_wherever_the_scripts_write(
    servers: tuple[ServerGroup, list[EmbeddedServer], Replicas], name: str
) -> None:
    """A save that failed (a full disk, say) with stop-writes-on-bgsave-error: MISCONF at the first write,
    read by the module's gate from the same answer as NOREPLICAS (not generated: a failed save is a fork)."""
    group, primaries, _replicas = servers
    (_, call, _, on_replica) = next(case for case in CASES if case[0] == name)
    sides = _prepare(group, primaries, False)
    kept = [_failing_saves(server) for server in primaries]
    try:
        replies = [side.call(call) for side in sides]
    finally:
        for server, (settings, taken) in zip(primaries, kept, strict=True):
            for setting, value in settings.items():
                server.client.config_set(setting, value)  # no save points: writes are taken again
            taken.rmdir()
            if taken.with_name(taken.name + ".kept").exists():
                taken.with_name(taken.name + ".kept").rename(taken)
    expected = _writes_denied_outcome(on_replica, "MISCONF")
    assert [_outcome(r) for r in replies] == [expected, expected], name
    assert _walk(primaries[0]) == _walk(primaries[1]), name
    for side in sides:
        side.close()


@pytest.mark.parametrize(("name", "call", "_", "on_replica"), CASES + PAUSED_CASES)
def test_on_a_read_only_replica_both_executors_refuse_where_the_scripts_write(
    servers: tuple[ServerGroup, list[EmbeddedServer], Replicas], name: str, call: Call, _: Any, on_replica: Any
) -> None:
    group, primaries, replicas = servers
    sides = _prepare(group, primaries, name.endswith("-paused"))
    assert replicas.check() is None  # caught up: the call reads what its primary holds
    targets: list[Side] = [LuaSide(pair.replica, {}) if pair.side == "lua" else NativeSide(pair.replica, {})
                           for pair in replicas.pairs]  # fmt: skip
    before = [_walk(s) for s in primaries]
    replies = [target.call(call) for target in targets]
    assert [_outcome(r) for r in replies] == [on_replica, on_replica], name
    assert [_walk(s) for s in primaries] == before  # nothing written through the primary
    assert replicas.check() is None  # nothing written on the replica: still equal to its primary
    for side in [*sides, *targets]:
        side.close()


def test_client_pause_write_holds_the_commands_back(
    servers: tuple[ServerGroup, list[EmbeddedServer], Replicas],
) -> None:
    """Registered `may-replicate` as EVAL is, not `write deny-oom`: a failover's CLIENT PAUSE WRITE
    still holds them back (COMMAND INFO does not list may_replicate, for EVAL either)."""
    _, primaries, _ = servers
    native = primaries[1]
    native.client.execute_command("CLIENT", "PAUSE", "100000", "WRITE")
    worker = valkey.Valkey(unix_socket_path=str(native.address), socket_timeout=0.3)
    try:
        with pytest.raises(valkey.exceptions.TimeoutError):
            worker.execute_command("EMQ.REVIVE", 3, f"emq:{{{Q}}}:dead", f"emq:{{{Q}}}:pending", f"emq:{{{Q}}}:", "j")
    finally:
        native.client.execute_command("CLIENT", "UNPAUSE")
        worker.close()


def _history(text: str) -> hist.History:
    return hist.loads('{"format": "difftest-history", "version": 1, "start_ms": 1000}\n' + text, "h.jsonl")


# under the limit: a refusal on both, a lease the native exempts after a restart (D7: the Lua server
# re-synchronised by RESTORE, which the limit must not refuse), a restart that forgets its CONFIG
# (the limit set again), a raw write refused alike; lifted, the same ENQUEUE goes through
MEMORY = _history("""
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}
{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}
{"op": "restart"}
{"op": "memory", "limit": true}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}
{"op": "advance", "ms": 200}
{"op": "call", "verb": "SWEEP", "queue": "q", "args": [1, 5]}
{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}
{"op": "restart"}
{"op": "raw", "command": ["SET", "x", "y"]}
{"op": "call", "verb": "COMPLETE", "queue": "q", "args": ["j1", 2]}
{"op": "memory", "limit": false}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}
""")
# a worker pointed at the replica: refused where the script writes, answered where it does not,
# across a restart of the native server (a fresh replica follows it)
REPLICA = _history("""
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0], "target": "replica"}
{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}
{"op": "call", "verb": "COMPLETE", "queue": "q", "args": ["j1", 5], "target": "replica"}
{"op": "call", "verb": "COMPLETE", "queue": "q", "args": ["j1", 1], "target": "replica"}
{"op": "call", "verb": "PAUSE", "queue": "q", "args": []}
{"op": "restart"}
{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100], "target": "replica"}
{"op": "call", "verb": "RESUME", "queue": "q", "args": [], "target": "replica"}
{"op": "call", "verb": "COMPLETE", "queue": "q", "args": ["j1", 1]}
""")


@pytest.mark.servers
def test_the_replay_sets_the_limit_keeps_it_and_keeps_its_own_writes_clear_of_it() -> None:
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(MEMORY)
        assert result.divergence is None, result.divergence.reason
        outcomes = [(_outcome(r.lua_reply), _outcome(r.native_reply)) for r in result.records]
        assert outcomes[4] == (OOM, OOM)  # a new id's HSET
        assert result.records[6].verdict.rule == "D7"  # re-synchronised under the limit
        assert outcomes[7] == ([b"j1", b"p", 2], [b"j1", b"p", 2])  # the claim after the re-sync
        assert outcomes[9] == (OOM, OOM)  # the restarted native server has the limit again
        assert outcomes[10] == (1, 1)  # COMPLETE drains under the limit
        assert outcomes[12] == (1, 1)  # lifted
        # the next history starts without it
        again = replayer.replay(_history('{"op": "raw", "command": ["SET", "x", "y"]}'))
        ok = Simple(b"OK")
        assert [(_outcome(r.lua_reply), _outcome(r.native_reply)) for r in again.records] == [(ok, ok)]


@pytest.mark.servers
def test_a_history_that_calls_a_replica_gets_replicas_and_the_next_one_keeps_only_the_lua_one() -> None:
    with Replayer(DEFAULT_MODULE) as replayer:
        assert replayer.call_replicas is None
        result = replayer.replay(REPLICA)
        assert result.divergence is None, result.divergence.reason
        outcomes = [(_outcome(r.lua_reply), _outcome(r.native_reply)) for r in result.records]
        assert [o for o, _ in outcomes] == [o for _, o in outcomes]
        assert [o for o, _ in outcomes] == [1, 0, [b"j1", b"p", 1], 0, READONLY, 1, None, [], READONLY, 1]
        assert replayer.call_replicas is not None and not result.replicas  # not --replicas
        lua, native = (pair.replica for pair in replayer.call_replicas.pairs)
        assert lua.running and native.running
        lua_pid = lua.pid
        # a history that calls none: no replica kept up, the native's stopped (it would re-sync on its
        # own after the native's next restart), the Lua server's left linked (it never restarts)
        plain = replayer.replay(_history('{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}'))
        assert plain.divergence is None and replayer.active_replicas is None
        assert lua.running and not native.running
        # the next that calls one: the native's replica starts again, the Lua one is the same process
        again = replayer.replay(REPLICA)
        assert again.divergence is None and native.running and lua.pid == lua_pid
        servers = replayer.call_replicas.servers
    assert not any(server.running for server in servers)


# a defect planted in the scripts (a history may not run code: docs/security.md): the ENQUEUE of the id
# `x` keeps its writes off the replication stream, so the Lua server's replica misses the row and the
# member its primary holds, while both primaries agree. A propagation divergence with the pair's
# replies and keyspaces alike; an artifact replays with the scripts it recorded.
UNPROPAGATED = json.dumps({"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["x", "p", 0]})
X_ROW_MISSING = f"{KIND}: the lua server's replica differs from its primary: emq:{{q}}:job:x (missing on the replica)"
X_MISSING = (f"{KIND}: the lua server's replica differs from its primary: emq:{{q}}:job:x (missing on the replica); "
             "emq:{q}:pending (members x missing on the replica)")  # fmt: skip


@pytest.fixture(scope="module")
def unpropagating(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_scripts(tmp_path_factory.mktemp("unpropagating"), "enqueue.lua", "local id = ARGV[1]\n",
                           "local id = ARGV[1]\nif id == 'x' then server.set_repl(server.REPL_NONE) end\n")  # fmt: skip


# the replica called only after the write it misses
CALLED_AFTER = _history(f"""
{{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}}
{UNPROPAGATED}
{{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}}
{{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100], "target": "replica"}}
{{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j3", "p", 0]}}
""")
# the replica called first (as the generator draws it), the write it misses among later ones
CALLED_FIRST = _history(f"""
{{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100], "target": "replica"}}
{{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}}
{UNPROPAGATED}
{{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}}
{{"op": "advance", "ms": 5}}
{{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}}
{{"op": "call", "verb": "PAUSE", "queue": "q", "args": [], "target": "replica"}}
""")


def _verdict(result: ReplayResult) -> tuple[int, str, str, str | None] | None:
    found = result.divergence
    if found is None:
        return None
    rule = result.records[-1].verdict.rule if result.records and result.records[-1].index == found.index else None
    return found.index, found.kind, found.reason, rule


def _replays_alone(artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code = main(["replay", str(artifact), "--reports", str(tmp_path / "replays")])
    out = capsys.readouterr().out
    assert code == EXIT_DIVERGENCE and "reproduced: yes, the same step and reason" in out, out


@pytest.mark.servers
def test_a_replica_behind_before_the_historys_first_call_to_it_is_that_calls_divergence(
    unpropagating: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a history's own replicas are compared from its first call to one on: a verdict at a step then
    # depends on no later step, so the artifact (the history up to its divergence) keeps the call that
    # brought the replicas, and replays alone to the same verdict (compared at the raw write's
    # segment, the divergence was at step 2 and its artifact, with no call to a replica, passed)
    with Replayer(DEFAULT_MODULE, lua_scripts=unpropagating) as replayer:
        result = replayer.replay(CALLED_AFTER)
    assert _verdict(result) == (3, KIND, X_MISSING, None)
    assert result.divergence is not None and isinstance(result.divergence.lua_reply, NotSent)  # never sent
    assert [r.index for r in result.records] == [0, 1, 2]
    artifact = save_divergence(result, tmp_path / "behind", record(DEFAULT_MODULE, unpropagating, False))
    assert hist.load(artifact / "history.jsonl").steps == CALLED_AFTER.steps[:4]
    _replays_alone(artifact, tmp_path, capsys)


@pytest.mark.servers
@pytest.mark.parametrize("history", [CALLED_FIRST, CALLED_AFTER], ids=["called-first", "called-after"])
def test_a_propagation_divergence_found_with_the_lua_replica_carried_over_reproduces_alone(
    history: hist.History, unpropagating: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Replayer(DEFAULT_MODULE, lua_scripts=unpropagating) as replayer:
        assert replayer.replay(REPLICA).divergence is None  # replicas started
        assert replayer.call_replicas is not None
        lua = replayer.call_replicas.pairs[0].replica
        lua_pid = lua.pid
        # calls none: the Lua replica stays linked and takes this history's writes, then the reset's FLUSHALL
        plain = replayer.replay(_history('{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j9", "p", 0]}\n'
                                         + UNPROPAGATED))  # fmt: skip
        assert plain.divergence is None and lua.pid == lua_pid
        carried = replayer.replay(history)
        assert lua.pid == lua_pid  # the same replica process, carried over
        assert _verdict(carried) == (3, KIND, X_MISSING, None)
        # the campaign's own last pass, on the same replayer (its replicas carried over from try to try)
        minimal = last_pass(replayer, carried)
        shrunk = _verdict(minimal)
        # (shrunk to the planted ENQUEUE alone, the replica misses the whole set its member was in)
        assert shrunk is not None and (shrunk[1], shrunk[3]) == (KIND, None) and shrunk[2].startswith(X_ROW_MISSING)
        assert len(minimal.history.steps) < len(history.steps)
        artifact = save_divergence(minimal, tmp_path / "carried", record(DEFAULT_MODULE, unpropagating, False))
    saved = hist.load(artifact / "history.jsonl")
    assert any(isinstance(step, CallStep) and step.target == TO_REPLICA for step in saved.steps), hist.dumps(saved)
    with Replayer(DEFAULT_MODULE, lua_scripts=unpropagating) as fresh:  # alone: fresh servers, fresh replicas
        assert _verdict(fresh.replay(saved)) == shrunk
        assert _verdict(fresh.replay(history)) == _verdict(carried)
    _replays_alone(artifact, tmp_path, capsys)


# a bad key the script would meet only after its first write (D3, D9): refused at that write, neither
# executor reaches it, and no row about what comes later applies (found by the generated campaign)
BAD_KEY_AFTER_THE_REFUSAL = _history("""
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": [{"hex": "fffe"}, "p", "5"]}
{"op": "raw", "command": ["SET", {"hex": "656d713a7b717d3a6a6f623afffe"}, "junk"]}
{"op": "raw", "command": ["SET", "emq:{q}:pending", "junk"]}
{"op": "advance", "ms": 5}
{"op": "call", "verb": "PROMOTE", "queue": "q", "args": ["1"], "target": "replica"}
{"op": "memory", "limit": true}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j9", "p", 0]}
{"op": "memory", "limit": false}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j9", "p", 0]}
""")


@pytest.mark.servers
def test_a_refusal_at_the_first_write_comes_before_the_rows_about_what_follows() -> None:
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(BAD_KEY_AFTER_THE_REFUSAL)
        assert result.divergence is None, result.divergence.reason
        outcomes = [(_outcome(r.lua_reply), _outcome(r.native_reply), r.verdict.rule) for r in result.records]
        assert outcomes[4] == (READONLY, READONLY, None) and outcomes[6] == (OOM, OOM, None)
        assert outcomes[8] == ("WRONGTYPE", "WRONGTYPE", "D3")  # lifted: the script writes its row first


def test_the_refusal_at_the_first_write_is_judged_before_the_rows_pure() -> None:
    """The comparator's decision alone (no server): a CLAIM whose head row is not a hash (D3's
    precondition) refused at its first write on both sides matches; a native that did not refuse
    alike, or a write under the refusal, is a divergence."""
    from tests.helpers import S, Z
    from tests.test_contract import judge, ks, step, view

    before = ks(pending=Z(j9=5), job__j9=S("junk"))
    claim = step("CLAIM", 100)
    for code in ("READONLY", "OOM"):
        refused = ErrorReply(f"{code} refused. script: on @user_script:4.")
        assert judge(view(claim, before, refused, ErrorReply(f"{code} refused."))).kind == "match"
        assert not judge(view(claim, before, refused, ErrorReply("WRONGTYPE x"))).ok  # D3's outcome is not it
        assert not judge(view(claim, before, refused, [])).ok
        wrote = ks(job__j9=S("junk"))
        assert not judge(view(claim, before, refused, ErrorReply(f"{code} refused."), native_after=wrote)).ok
