"""No input crashes the server: hostile argv, odd queue names and wrong-typed keys everywhere.

Each test drives one module-scoped server through a fixed, derandomised set of hypothesis
examples (FLUSHALL between examples) and checks, call by call, that the module answers a reply of
its verb's shape or one of its documented errors, never `EMQ HOSTREPLY`, and that an error reply
wrote nothing (the server's dirty counter did not move). At the end the same process still answers
PING and its log shows no panic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from valkey.exceptions import ResponseError

from difftest.replay.sides import NativeSide
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer
from difftest.servers.wire import as_reply
from difftest.spec import errors
from difftest.spec.calls import Call
from difftest.spec.commands import I64_MAX, TRANSITIONS, VERBS, base_key
from difftest.spec.replies import ErrorReply, Reply
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import T0

pytestmark = pytest.mark.servers

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

HUGE = b"7" * (1 << 20)
ATOMS: list[bytes] = [
    b"", b"\x00", b"a\x00b", b"\xff\xfe", b"\xc3\x28", b"\r\n", b"1\r\n2", b"*1\r\n$4\r\nPING\r\n",
    b"0", b"1", b"2", b"3", b"4", b"5", b"-1", b"-5", b"100", b"007", b"+1", b"-0",
    b"9" * 30, b"-" + b"9" * 30, str(I64_MAX).encode(), str(2**63).encode(), str(-(2**63)).encode(),
    str(2**52).encode(), b"1.5", b"inf", b"-inf", b"nan",
    b"j1", b"j2", b"emq:{q}:", b"emq:{q}:pending", b"emq:{q}:active", b"emq:{q}:delayed",
    b"emq:{q}:dead", b"emq:{q}:done", b"emq:{q}:meta", b"emq:{}:", b"emq:{a}b}:", b"{", b"}",
    HUGE, b"x" * 70000,
]  # fmt: skip
QUEUES: list[bytes] = [
    b"q", b"", b"\x00", b"\xff\xfe", b"\r\n", b"a:b", b"{", b"}", b"a{b}", b"q q",
    b"emq:{q}:", b"9" * 30, b"-1", b"x" * 5000,
]  # fmt: skip
ALLOWED_ERRORS = {
    errors.SHAPE, errors.LAYOUT, errors.ARG, errors.NOTINT, errors.OVERFLOW, errors.LANE,
    "WRONGTYPE Operation against a key holding the wrong kind of value",
}  # fmt: skip

# what the checked calls answered, by (verb, "ok" or error code): each test asserts it covered
# the outcomes it is about, so that a generator that never reaches the module cannot pass
SEEN: Counter[tuple[str, str]] = Counter()

atoms = st.sampled_from(ATOMS)
small_atoms = st.sampled_from([a for a in ATOMS if len(a) < 100])


@pytest.fixture(scope="module")
def robust_server() -> Iterator[EmbeddedServer]:
    with ServerGroup() as group:
        yield group.add("native", module=DEFAULT_MODULE)


def dirty(server: EmbeddedServer) -> int:
    return int(server.client.info("persistence")["rdb_changes_since_last_save"])


def send(server: EmbeddedServer, parts: Sequence[bytes | str]) -> Reply:
    try:
        return as_reply(server.client.execute_command(*parts))
    except ResponseError as exc:
        return ErrorReply(str(exc))


def well_formed(verb: str, reply: Reply) -> bool:
    """A success reply of the verb's documented shape."""
    if verb in ("ENQUEUE", "EXTEND", "COMPLETE", "REVIVE", "PAUSE", "RESUME"):
        return reply in (0, 1)
    if verb == "CLAIM":
        return reply == [] or (
            isinstance(reply, list)
            and len(reply) == 3
            and isinstance(reply[0], bytes)
            and (reply[1] is None or isinstance(reply[1], bytes))
            and isinstance(reply[2], int)
        )
    if verb == "FAIL":
        return reply in (0, b"dead", b"retry")
    if verb == "PROMOTE":
        return isinstance(reply, int) and reply >= 0
    if verb == "SWEEP":
        return isinstance(reply, list) and len(reply) == 4 and all(isinstance(n, int) and n >= 0 for n in reply)
    return False


def checked(server: EmbeddedServer, verb: str, parts: Sequence[bytes | str]) -> Reply:
    """Sends one command; the reply is of its verb's shape, or a documented error that wrote
    nothing."""
    changes = dirty(server)
    reply = send(server, parts)
    SEEN[verb, reply.code if isinstance(reply, ErrorReply) else "ok"] += 1
    if isinstance(reply, ErrorReply):
        assert reply.message in ALLOWED_ERRORS, (parts[:3], reply)
        assert dirty(server) == changes, (parts[:3], reply)
    else:
        assert well_formed(verb, reply), (parts[:3], reply)
    return reply


def codes_seen() -> set[str]:
    return {code for _, code in SEEN}


def verbs_answered() -> set[str]:
    return {verb for verb, code in SEEN if code == "ok"}


def still_alive(server: EmbeddedServer, pid: int | None) -> None:
    assert server.running
    assert server.pid == pid
    assert server.client.ping() is True
    log = server.logfile.read_bytes()
    for sign in (b"panicked", b"crashed by signal", b"BUG REPORT", b"ASSERTION FAILED"):
        assert sign not in log


def reset(server: EmbeddedServer) -> None:
    server.client.flushall()


# -- 1: raw argv ---------------------------------------------------------------------------------


def test_raw_argv_never_crashes(robust_server: EmbeddedServer) -> None:
    pid = robust_server.pid

    @SETTINGS
    @given(
        verb=st.sampled_from(VERBS),
        mode=st.sampled_from(["raw", "keys", "exact"]),
        argv=st.lists(atoms, min_size=0, max_size=8),
    )
    def one(verb: str, mode: str, argv: list[bytes]) -> None:
        reset(robust_server)
        if mode != "raw":  # numkeys and keys right, the rest hostile (of the right count: exact)
            keys = Call.of(verb, b"q").rest
            room = len(TRANSITIONS[verb].args) if mode == "exact" else 8 - len(keys) - 1
            argv = [str(len(keys)).encode(), *keys, *(argv + [b"1"] * 8)[:room]]
        checked(robust_server, verb, [f"EMQ.{verb}".encode(), *argv])

    SEEN.clear()
    one()
    assert {"ok", "EMQ SHAPE", "EMQ NOTINT", "EMQ ARG"} <= codes_seen(), SEEN
    still_alive(robust_server, pid)


# -- 2: well-laid-out calls on odd queue names, odd arguments --------------------------------------


@st.composite
def laid_out_calls(draw: st.DrawFn, queue: bytes | None = None) -> Call:
    verb = draw(st.sampled_from(VERBS))
    q = queue if queue is not None else draw(st.sampled_from(QUEUES))
    args = [draw(atoms) for _ in TRANSITIONS[verb].args]
    return Call.of(verb, q, *args)


def test_laid_out_calls_with_odd_names_and_arguments(robust_server: EmbeddedServer) -> None:
    pid = robust_server.pid

    @SETTINGS
    @given(calls=st.lists(laid_out_calls(), min_size=1, max_size=6))
    def one(calls: list[Call]) -> None:
        reset(robust_server)
        for call in calls:
            checked(robust_server, call.verb, call.command())

    SEEN.clear()
    one()
    assert {"ok", "EMQ LAYOUT", "EMQ NOTINT", "EMQ ARG", "EMQ OVERFLOW"} <= codes_seen(), SEEN
    assert len(verbs_answered()) >= 8, SEEN
    still_alive(robust_server, pid)


# -- 3: wrong-typed and corrupt keys everywhere ----------------------------------------------------

SUFFIXES = [
    b"pending", b"active", b"delayed", b"dead", b"done", b"meta", b"metrics:failed",
    b"metrics:completed", b"job:j1", b"job:j2", b"job:", b"job:\x00\xff",
]  # fmt: skip
FIELDS = [b"attempts", b"stalled", b"lease_epoch", b"group", b"paused", b"count", b"payload",
          b"state"]  # fmt: skip
IDS = [b"j1", b"j2", b"", b"\x00\xff", b"ghost"]
SCORES = [b"0", str(T0).encode(), str(T0 + 100).encode(), b"-inf", b"+inf", b"1.5",
          str(2**53).encode()]  # fmt: skip


@st.composite
def corruption(draw: st.DrawFn, base: bytes, epoch: bytes) -> list[bytes]:
    """One command that puts a key of the queue into some state, wrong-typed or not."""
    small_atoms = st.sampled_from([a for a in ATOMS if len(a) < 100] + [epoch] * 8)
    key = base + draw(st.sampled_from(SUFFIXES) | st.sampled_from([b"job:j1", b"job:j2"]))
    kind = draw(st.sampled_from(["string", "list", "set", "hash", "zset"]) | st.just("hash"))
    if kind == "string":
        return [b"SET", key, draw(small_atoms)]
    if kind == "list":
        return [b"RPUSH", key, draw(small_atoms)]
    if kind == "set":
        return [b"SADD", key, draw(small_atoms)]
    if kind == "hash":
        counters = st.sampled_from([b"attempts", b"stalled", b"count", b"group"])
        fields = st.tuples(st.sampled_from(FIELDS) | counters, small_atoms)
        pairs = draw(st.lists(fields, min_size=1, max_size=4))
        return [b"HSET", key, *[p for pair in pairs for p in pair]]
    members = draw(st.lists(st.tuples(st.sampled_from(SCORES), st.sampled_from(IDS)), min_size=1, max_size=4))
    return [b"ZADD", key, *[p for pair in members for p in pair]]


@st.composite
def bad_counter(draw: st.DrawFn, base: bytes) -> list[bytes]:
    """A counter the transitions increment (or a lane field) set to a corrupt or edge value."""
    key = draw(st.sampled_from([b"job:j1", b"job:j2", b"metrics:failed", b"metrics:completed"]))
    field = draw(st.sampled_from([b"attempts", b"stalled", b"count", b"group"]))
    value = draw(st.sampled_from([b"x", str(I64_MAX).encode(), b"1.5", b"", b"0", b"5"]))
    return [b"HSET", base + key, field, value]


GOOD_ARGS: dict[str, st.SearchStrategy[tuple[bytes, ...]]] = {
    "ENQUEUE": st.tuples(st.sampled_from(IDS), small_atoms, st.sampled_from([b"0", b"5", b"100"])),
    "CLAIM": st.tuples(st.sampled_from([b"1", b"100"])),
    "EXTEND": st.tuples(st.sampled_from(IDS), st.sampled_from([b"0", b"1", b"2"]), st.just(b"50")),
    "COMPLETE": st.tuples(st.sampled_from(IDS), st.sampled_from([b"0", b"1", b"2"])),
    "FAIL": st.tuples(
        st.sampled_from(IDS),
        st.sampled_from([b"1", b"2"]),
        small_atoms,
        st.sampled_from([b"1", b"2", b"3"]),
        st.sampled_from([b"0", b"10"]),
    ),
    "PROMOTE": st.tuples(st.sampled_from([b"1", b"3", str(I64_MAX).encode()])),
    "SWEEP": st.tuples(st.sampled_from([b"1", b"2"]), st.sampled_from([b"1", b"3", b"100"])),
    "REVIVE": st.tuples(st.sampled_from(IDS)),
    "PAUSE": st.just(()),
    "RESUME": st.just(()),
}


@st.composite
def good_calls(draw: st.DrawFn, queue: bytes) -> Call:
    verb = draw(st.sampled_from(VERBS))
    return Call.of(verb, queue, *draw(GOOD_ARGS[verb]))


def test_wrong_typed_and_corrupt_keys_everywhere(robust_server: EmbeddedServer) -> None:
    pid = robust_server.pid
    queue = b"q\x00\xff"
    base = base_key(queue)

    epoch = robust_server.run_id.encode()
    native = NativeSide(robust_server, {})

    @SETTINGS
    @given(
        seed=st.sampled_from(["none", "enqueued", "claimed"]),
        setup=st.lists(corruption(base, epoch), min_size=0, max_size=8),
        counters=st.lists(bad_counter(base), min_size=0, max_size=3),
        calls=st.lists(good_calls(queue), min_size=1, max_size=8),
    )
    def one(seed: str, setup: list[list[bytes]], counters: list[list[bytes]], calls: list[Call]) -> None:
        reset(robust_server)
        for job in (b"j1", b"j2") if seed != "none" else ():
            assert native.call(Call.of("ENQUEUE", queue, job, b"p", 0)) == 1
            if seed == "claimed":  # a lease of this process, expired: SWEEP's counted path
                assert native.call(Call.of("CLAIM", queue, 1)) == [job, b"p", 1]
                robust_server.client.zadd(base + b"active", {job: T0})
        for command in setup + counters:
            send(robust_server, command)  # a wrong type here is just a skipped corruption
        for call in calls:
            checked(robust_server, call.verb, call.command())

    SEEN.clear()
    one()
    assert {"ok", "WRONGTYPE", "EMQ LANE", "EMQ NOTINT"} <= codes_seen(), SEEN
    assert verbs_answered() == set(VERBS), SEEN
    still_alive(robust_server, pid)


def test_the_checks_above_can_fail(robust_server: EmbeddedServer) -> None:
    """The checker is not vacuous: an unknown error text and a mis-shaped reply are caught."""
    reset(robust_server)
    with pytest.raises(AssertionError):
        checked(robust_server, "CLAIM", [b"HGET", b"nope"])  # ERR wrong number of arguments
    robust_server.client.set(b"k", b"v")
    with pytest.raises(AssertionError):
        checked(robust_server, "SWEEP", [b"GET", b"k"])
    assert well_formed("CLAIM", [b"j1", None, 1])
    assert not well_formed("SWEEP", [1, 0, 0])
    native = NativeSide(robust_server, {})
    assert native.call(Call.of("ENQUEUE", "q", "j1", HUGE, 0)) == 1
    assert native.call(Call.of("CLAIM", "q", 10)) == [b"j1", HUGE, 1]
