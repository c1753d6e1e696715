"""The history format: a lossless round trip, and one clear error per malformed line."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.history import format as hist
from difftest.history.format import Advance, BeginClaim, CallStep, EndClaim, History, HistoryError, Notify, Restart, raw
from difftest.spec.calls import Call

HEADER = '{"format": "difftest-history", "version": 1}'


def test_round_trip_keeps_every_byte() -> None:
    history = History(
        (
            CallStep(Call.of("ENQUEUE", b"q\xff", b"\x00id", b"\xc3(", 0), user="w", worker="A"),
            BeginClaim("A", Call.of("CLAIM", "q", 100), user="w"),
            EndClaim("A"),
            Advance(7),
            Restart(crash=True),
            Restart(),
            raw("HSET", b"emq:{q}:job:\x00", "attempts", 2**63 - 1),
            CallStep(Call("CLAIM", b"x", (b"a", b"b"))),
            Notify("KEA"),
            Notify("Kh$"),
            Notify(""),
        ),
        start_ms=5,
        users={"w": ("~emq:{q}:*",)},
        seed=42,
        note="n",
        db=15,
    )
    assert hist.loads(hist.dumps(history)) == history
    assert '"db": 15' in hist.dumps(history) and '"db"' not in hist.dumps(History((Advance(1),)))


def test_file_round_trip(tmp_path: Path) -> None:
    history = History((Advance(1),))
    hist.save(history, tmp_path / "h.jsonl")
    assert hist.load(tmp_path / "h.jsonl") == history


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "empty file"),
        ("[1]", ":1: the first line must be a header"),
        ('{"format": "difftest-history", "version": 9}', ":1 field 'version': this difftest reads version 1, got 9"),
        (HEADER + "\n{not json", ":2: not JSON"),
        (HEADER + '\n{"op": "jump"}', ":2 field 'op': 'jump' is not a step"),
        (
            '{"format": "difftest-history", "version": 1, "start_ms": 5}\n{"op": "advance", "ms": -6}',
            ":2 field 'ms': stepping back by 6 takes the clock to -1 ms, before 1970",
        ),
        (HEADER + '\n{"op": "advance"}', ":2: missing field 'ms'"),
        (HEADER + '\n{"op": "call", "verb": "CLAIMS", "queue": "q"}', ":2 field 'verb': 'CLAIMS' is not a transition"),
        (
            HEADER + '\n{"op": "call", "verb": "CLAIM", "queue": "q", "args": [true]}',
            "field 'args'[0]: expected a string",
        ),
        (
            HEADER + '\n{"op": "call", "verb": "CLAIM", "queue": {"hex": "zz"}}',
            "field 'queue': 'zz' is not hexadecimal",
        ),
        (HEADER + '\n{"op": "call", "verb": "CLAIM"}', ":2: a call needs 'queue' and 'args'"),
        (HEADER + '\n{"op": "call", "verb": "CLAIM", "queue": "q", "args": [1], "user": "x"}', "'x' is not declared"),
        (
            HEADER + '\n{"op": "begin", "worker": "A", "verb": "SWEEP", "queue": "q", "args": [1, 1]}',
            "only CLAIM is split",
        ),
        (HEADER + '\n{"op": "end", "worker": "A"}', ":2: 'end' for worker 'A', which has no open 'begin'"),
        (
            HEADER + '\n{"op": "begin", "worker": "A", "verb": "CLAIM", "queue": "q", "args": [1]}\n{"op": "restart"}',
            ":3: a restart while worker 'A'",
        ),
        (HEADER + '\n{"op": "raw", "command": []}', ":2 field 'command': expected a non-empty list"),
        (HEADER + '\n{"op": "notify"}', ":2: missing field 'flags'"),
        (HEADER + '\n{"op": "notify", "flags": true}', ":2 field 'flags': expected a string of notify-keyspace-events"),
        (HEADER + '\n{"op": "notify", "flags": "KEAq"}', ":2 field 'flags': 'q' not among the letters Valkey accepts"),
        (
            HEADER + '\n{"op": "raw", "command": ["CONFIG", "SET", "notify-keyspace-events", "KEA"]}',
            "'CONFIG SET' is not a data command",
        ),
        (
            '{"format": "difftest-history", "version": 1, "db": 16}',
            ":1 field 'db': expected a database number from 0 to 15",
        ),
        ('{"format": "difftest-history", "version": 1, "db": "2"}', ":1 field 'db': expected a database number"),
        ('{"format": "difftest-history", "version": 1, "db": true}', ":1 field 'db': expected a database number"),
        (
            HEADER + '\n{"op": "raw", "command": ["SELECT", "2"]}',
            "'SELECT' is not a data command: a raw step may only read or write keys",
        ),
    ],
)
def test_malformed_lines_name_the_line_and_field(body: str, message: str) -> None:
    with pytest.raises(HistoryError) as problem:
        hist.loads(body, "h.jsonl")
    text = str(problem.value)
    assert message in text
    assert text.startswith("h.jsonl")
    assert "\n" not in text


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="no such file"):
        hist.load(tmp_path / "absent.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe")
    with pytest.raises(HistoryError, match="not UTF-8"):
        hist.load(tmp_path / "bin.jsonl")


def test_memory_and_replica_steps_round_trip() -> None:
    history = History(
        (
            hist.MemoryLimit(True),
            CallStep(Call.of("COMPLETE", "q", "j1", 1)),
            CallStep(Call.of("COMPLETE", "q", "j1", 1), target=hist.REPLICA),
            hist.MemoryLimit(False),
        )
    )
    text = hist.dumps(history)
    assert '{"op": "memory", "limit": true}' in text and '"target": "replica"' in text
    assert hist.loads(text) == history


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (HEADER + '\n{"op": "memory"}', ":2: missing field 'limit'"),
        (HEADER + '\n{"op": "memory", "limit": 1}', ":2 field 'limit': expected true (maxmemory 1 with noeviction"),
        (HEADER + '\n{"op": "replicas"}', ":2: missing field 'required'"),
        (HEADER + '\n{"op": "replicas", "required": "yes"}', ":2 field 'required': expected true (every write denied"),
        (
            HEADER + '\n{"op": "call", "verb": "CLAIM", "queue": "q", "args": [1], "target": "primary"}',
            ":2 field 'target': expected 'replica'",
        ),
        (
            HEADER
            + '\n{"op": "begin", "worker": "A", "verb": "CLAIM", "queue": "q", "args": [1], "target": "replica"}',
            ":2 field 'target': only a 'call' or a 'multi' goes to a replica, not a 'begin'",
        ),
        (
            '{"format": "difftest-history", "version": 1, "users": {"w": []}}\n'
            '{"op": "call", "verb": "CLAIM", "queue": "q", "args": [1], "target": "replica", "user": "w"}',
            ":2 field 'target': a call to a replica runs as the admin, through each server's own executor: "
            "drop its 'user'",
        ),
        (
            HEADER + '\n{"op": "multi"}\n{"op": "call", "verb": "COMPLETE", "queue": "q", "args": ["j", 1], '
            '"target": "replica"}\n{"op": "exec"}',
            ":3: a call to a replica (a transaction runs on the server itself) inside the transaction",
        ),
        (HEADER + '\n{"op": "multi"}\n{"op": "notify", "flags": ""}', ":3: the step 'notify' inside the transaction"),
    ],
)
def test_memory_and_replica_steps_are_checked_at_load(body: str, message: str) -> None:
    with pytest.raises(HistoryError) as problem:
        hist.loads(body, "h.jsonl")
    assert message in str(problem.value) and "\n" not in str(problem.value)


def test_an_artifact_cut_inside_a_transaction_keeps_the_transaction_whole() -> None:
    """A call in a transaction meets what the transaction queues after it (a PAUSE refused when
    queued discards it whole): cut at that call, an artifact no longer reproduced (found by the null
    run: the shrunk SWEEP answered EXECABORT, replayed alone it ran)."""
    from difftest.history.format import Advance, Exec, Multi, cut_after

    steps = [Advance(1), Multi(), Advance(2), Advance(3), Exec(), Advance(4), Multi(), Advance(5)]
    assert [len(cut_after(steps, at)) for at in range(len(steps))] == [1, 5, 5, 5, 5, 6, 8, 8]
