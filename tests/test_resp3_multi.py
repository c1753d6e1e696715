"""RESP3 workers and MULTI/EXEC transactions: the RESP3 reader, the history steps, both on real servers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from difftest.history import format as hist
from difftest.history.format import CallStep, Exec, History, HistoryError, Multi
from difftest.judge.contract import replies_equal
from difftest.replay.replayer import Replayer
from difftest.replay.sides import LuaSide, NativeSide
from difftest.servers.local import EmbeddedServer
from difftest.servers.wire import Wire, _Incomplete, as_reply, parse_reply
from difftest.spec.commands import TRANSITIONS
from difftest.spec.replies import (
    Attributed,
    BigNumber,
    BlobError,
    Boolean,
    Double,
    ErrorReply,
    Map,
    Push,
    RespSet,
    Simple,
    Verbatim,
)
from executors.native.adapter import DEFAULT_MODULE
from strategies.corpus import PRELUDE, plain

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"replayer": ("servers",)}

RESP3_CASES = [
    (b"_\r\n", None),
    (b"#t\r\n", Boolean(True)),
    (b"#f\r\n", Boolean(False)),
    (b",1.5\r\n", Double(b"1.5")),
    (b",-inf\r\n", Double(b"-inf")),
    (b"(3492890328409238509324850943850943825024385\r\n", BigNumber(b"3492890328409238509324850943850943825024385")),
    (b"!21\r\nSYNTAX invalid syntax\r\n", BlobError("SYNTAX invalid syntax")),
    (b"=15\r\ntxt:Some string\r\n", Verbatim(b"txt", b"Some string")),
    (b"%2\r\n+first\r\n:1\r\n$6\r\nsecond\r\n,2\r\n", Map(((Simple(b"first"), 1), (b"second", Double(b"2"))))),
    (b"~3\r\n:1\r\n$1\r\na\r\n_\r\n", RespSet((1, b"a", None))),
    (b">2\r\n$7\r\nmessage\r\n:1\r\n", Push((b"message", 1))),
    (b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n", Attributed(((Simple(b"ttl"), 3),), b"v")),
    (b"*2\r\n%1\r\n$1\r\nk\r\n-ERR x\r\n#t\r\n", [Map(((b"k", ErrorReply("ERR x")),)), Boolean(True)]),
]


@pytest.mark.parametrize(("wire", "reply"), RESP3_CASES)
def test_each_resp3_type_is_read_as_itself(wire: bytes, reply: object) -> None:
    value, end = parse_reply(wire + b"+next\r\n", 0)
    assert as_reply(value) == reply and end == len(wire)
    for cut in range(len(wire)):
        with pytest.raises(_Incomplete):
            parse_reply(wire[:cut], 0)


def test_resp3_types_never_equal_their_resp2_look_alikes() -> None:
    # what a RESP3 client's library hands a worker differs: a comparison must too
    assert Boolean(True) != 1 and not replies_equal(1, Boolean(True))
    assert Double(b"1") != b"1" and Double(b"1") != 1
    assert Map(((b"a", 1),)) != [b"a", 1] and RespSet((1,)) != [1]
    assert BlobError("ERR x") != ErrorReply("ERR x")
    assert isinstance(BlobError("ERR x"), ErrorReply) and BlobError("ERR x").code == "ERR"
    assert Verbatim(b"txt", b"x") != b"x" and BigNumber(b"7") != 7


@pytest.fixture(scope="module")
def replayer() -> Iterator[Replayer]:
    with Replayer(DEFAULT_MODULE) as replaying:
        yield replaying


def test_a_resp3_wire_reads_what_a_real_server_sends(replayer: Replayer) -> None:
    wire = Wire(replayer.lua_server.address, protocol=3)
    try:
        script = (b"redis.setresp(3); return {map={a=1}}", b"redis.setresp(3); return {double=1.5}",
                  b"redis.setresp(3); return {big_number='12345678901234567890'}",
                  b"redis.setresp(3); return {set={b=true}}", b"redis.setresp(3); return true",
                  b"redis.setresp(3); return false", b"return false", b"return true",
                  b"return redis.status_reply('OK')", b"return {1, 'x', false}")  # fmt: skip
        got = [wire.call(b"EVAL", source, b"0") for source in script]
        assert got == [Map(((b"a", 1),)), Double(b"1.5"), BigNumber(b"12345678901234567890"), RespSet((b"b",)),
                       Boolean(True), Boolean(False), None, 1, Simple(b"OK"), [1, b"x", None]]  # fmt: skip
        assert wire.call(b"HGETALL", b"nothing") == Map(())  # a map, empty, where RESP2 has an array
        assert wire.call(b"HSET", b"h", b"f", b"v") == 1 and wire.call(b"HGETALL", b"h") == Map(((b"f", b"v"),))
        assert wire.call(b"HGET", b"h", b"missing") is None  # `_`
        assert isinstance(wire.call(b"INFO", b"server"), Verbatim)
        assert wire.call(b"ZSCORE", b"z", b"m") is None and wire.call(b"ZADD", b"z", b"1.5", b"m") == 1
        assert wire.call(b"ZSCORE", b"z", b"m") == Double(b"1.5")
        assert wire.call(b"FLUSHALL") == Simple(b"OK")
    finally:
        wire.close()


def _with(step: CallStep, **change: object) -> History:
    return History((*PRELUDE, replace(step, **change)))


@pytest.mark.parametrize("verb", list(TRANSITIONS))
def test_each_transition_on_a_resp3_worker_agrees_with_its_resp2_self(replayer: Replayer, verb: str) -> None:
    """The unmodified pair answers the same RESP3 types (docs/contract-decisions.md), and what RESP3 reads is
    what RESP2 reads but for the null: CLAIM's, SWEEP's arrays, integers, FAIL's bulk strings."""
    step = CallStep(plain(verb))
    on_resp2 = replayer.replay(_with(step))
    on_resp3 = replayer.replay(_with(step, protocol=3))
    assert on_resp2.ok and on_resp3.ok, on_resp3.divergence
    last2, last3 = on_resp2.records[-1], on_resp3.records[-1]
    assert last3.resolved.protocol == 3 and last3.lua_reply == last3.native_reply == last2.native_reply
    assert on_resp3.observations[-1].native_after == on_resp2.observations[-1].native_after


def test_the_paused_read_and_a_missing_payload_parse_on_resp3(replayer: Replayer) -> None:
    row = b"emq:{q}:job:j4"  # the prelude's pending job
    steps = (hist.raw("HDEL", row, "payload"), CallStep(plain("CLAIM"), protocol=3),
             CallStep(plain("PAUSE"), protocol=3), CallStep(plain("CLAIM"), protocol=3))  # fmt: skip
    result = replayer.replay(History((*PRELUDE, *steps)))
    assert result.ok, result.divergence
    claimed, _, paused = (r.native_reply for r in result.records[-3:])
    assert claimed == [b"j4", None, 1]  # the Lua false and the module's null: both `_`
    assert paused == [] and result.records[-1].lua_reply == []  # the host read a bulk "1": paused


def _in_transactions(steps: tuple[CallStep, ...]) -> History:
    return History((*PRELUDE, Multi(), *steps[:2], Exec(), Multi(), *steps[2:], Exec()))


@pytest.mark.parametrize("verb", [v for v, t in TRANSITIONS.items() if not t.reads_meta])
def test_each_transition_in_a_transaction_answers_as_outside_one(replayer: Replayer, verb: str) -> None:
    """Nobody else writes between them: the EXEC elements must be the replies the same calls give one
    by one, each element judged with the walk queued after it."""
    calls = (CallStep(plain(verb)), CallStep(plain("REVIVE")), CallStep(plain("PROMOTE")), CallStep(plain(verb)))
    alone = replayer.replay(History((*PRELUDE, *calls)))
    inside = replayer.replay(_in_transactions(calls))
    assert alone.ok and inside.ok, inside.divergence
    in_multi = [r for r in inside.records if r.resolved.in_multi]
    assert len(in_multi) == 4
    assert (
        [r.native_reply for r in in_multi]
        == [r.lua_reply for r in in_multi]
        == [r.native_reply for r in alone.records[-4:]]
    )
    assert [o.native_after for o in inside.observations if o.resolved.in_multi] == [
        o.native_after for o in alone.observations[-4:]
    ]


def test_a_transaction_loads_its_scripts_before_multi(lua: LuaSide, native: NativeSide) -> None:
    # a fresh server: no script in its cache; an EVALSHA queued unloaded would answer NOSCRIPT in EXEC
    steps = [Multi(), CallStep(plain("ENQUEUE", b"j1", b"p", 0)), CallStep(plain("REVIVE", b"j1")), Exec()]
    for side in (lua, native):
        replies = side.run(steps)
        assert replies[1:3] == [1, 0], (side.name, replies)


def test_a_refused_call_inside_a_transaction_queues_nothing_on_the_lua_side(replayer: Replayer) -> None:
    bad = CallStep(plain("PROMOTE", 0))  # limit below its minimum: D6
    result = replayer.replay(History((*PRELUDE, Multi(), bad, CallStep(plain("REVIVE")), Exec())))
    assert result.ok and result.rules_hit["D6"] == 1
    refused, revived = (r for r in result.records if r.resolved.in_multi)
    assert refused.lua_reply.__class__.__name__ == "Refused" and isinstance(refused.native_reply, ErrorReply)
    assert revived.lua_reply == revived.native_reply == 1


def test_a_history_cut_inside_a_transaction_runs_it_as_if_closed(replayer: Replayer) -> None:
    result = replayer.replay(History((*PRELUDE, Multi(), CallStep(plain("REVIVE")))))
    assert result.ok and result.records[-1].native_reply == result.records[-1].lua_reply == 1


def test_the_new_steps_round_trip_and_their_misuse_is_one_line() -> None:
    history = History((Multi(), CallStep(plain("ENQUEUE")), Exec(), CallStep(plain("CLAIM"), protocol=3),
                       hist.BeginClaim("A", plain("CLAIM"), protocol=3), hist.EndClaim("A"),
                       Multi(protocol=3), CallStep(plain("ENQUEUE")), Exec(),
                       CallStep(plain("CLAIM"), protocol=3, target="replica"), Multi("replica", 3)))  # fmt: skip
    text = hist.dumps(history)
    assert '"resp": 3' in text and '{"op": "multi"}' in text and '{"op": "exec"}' in text
    assert '{"op": "multi", "resp": 3}' in text and '{"op": "multi", "target": "replica", "resp": 3}' in text
    assert hist.loads(text) == history
    header = '{"format": "difftest-history", "version": 1, "users": {"w": ["~*"]}}\n'
    call = '{"op": "call", "verb": "REVIVE", "queue": "q", "args": ["j1"]'
    bad = {
        call + ', "resp": 4}': "field 'resp': expected 2 or 3",
        call + ', "resp": true}': "field 'resp': expected 2 or 3",
        '{"op": "end", "worker": "A", "resp": 3}': "only a 'call', a 'begin' or a 'multi' names its protocol",
        '{"op": "multi"}\n{"op": "call", "verb": "CLAIM", "queue": "q", "args": [10]}': "CLAIM (the Lua host reads",
        '{"op": "multi"}\n' + call + ', "user": "w"}': "a call with a 'user', 'worker' or 'resp'",
        '{"op": "multi"}\n' + call + ', "resp": 3}': "a call with a 'user', 'worker' or 'resp'",
        '{"op": "multi"}\n' + call + ', "target": "replica"}': "a call to a replica",
        '{"op": "multi"}\n{"op": "advance", "ms": 1}': "the step 'advance' inside the transaction",
        '{"op": "multi"}\n{"op": "multi"}': "the step 'multi' inside the transaction",
        '{"op": "exec"}': "'exec' with no open 'multi'",
        '{"op": "raw", "command": ["MULTI"]}': "use 'multi' and 'exec' steps",
        '{"op": "raw", "command": ["EXEC"]}': "use 'multi' and 'exec' steps",
    }
    for body, message in bad.items():
        with pytest.raises(HistoryError, match=message.replace("(", r"\(")):
            hist.loads(header + body + "\n")


def test_a_resp3_admin_wire_says_hello_3(replayer: Replayer) -> None:
    server: EmbeddedServer = replayer.native_server
    wire = Wire(server.address, protocol=3)
    try:
        info = wire.call(b"CLIENT", b"INFO")
        text = info.text if isinstance(info, Verbatim) else info
        assert isinstance(text, bytes) and b"resp=3" in text
    finally:
        wire.close()


def test_a_restricted_user_speaks_resp3_as_itself(replayer: Replayer) -> None:
    # HELLO 3 after the handshake's AUTH keeps the user: its permissions still decide (NOPERM alike)
    text = (
        '{"format": "difftest-history", "version": 1, "users": {"w": ["~emq:*"], "r": ["%R~emq:*"]}}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0], "user": "w", "resp": 3}\n'
        '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0], "user": "r", "resp": 3}\n'
    )
    result = replayer.replay(hist.loads(text))
    assert result.ok, result.divergence
    written, refused = result.records
    assert written.native_reply == written.lua_reply == 1
    assert isinstance(refused.native_reply, ErrorReply) and refused.native_reply.code == "NOPERM"
