"""Bulk steps (issue 37): thousands of calls in one step, walked once after the last, their keyspace
between calls the spec's model's; the same verdicts as the calls one by one, a defect in any call
caught and replayed from its artifact as printed."""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.cli.main import EXIT_DIVERGENCE, EXIT_SETUP, main
from difftest.coverage.labels import SIZE_LABELS, labels
from difftest.history import format as hist
from difftest.history.format import Advance, Bulk, CallStep, History
from difftest.replay.artifacts import expected_verdict, save_divergence
from difftest.replay.replayer import Replayer, ReplayResult
from difftest.spec.calls import Call
from difftest.spec.replies import ErrorReply
from difftest.spec.snapshot import Members
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import planted_scripts


def bulk(verb: str, count: int, *args: bytes | int) -> tuple[CallStep, ...]:
    return Bulk(Call.of(verb, b"q", *args), count).steps()


# a fill of pending and of delayed jobs, a fleet's claims, completes and fails of the fill's ids
# (some not claimed: fenced), a batch PROMOTE and SWEEP, then claims of what they brought back
HISTORY = History((
    *bulk("ENQUEUE", 60, b"f0.", b"p", 0),
    *bulk("ENQUEUE", 40, b"d.", b"x", 5),
    *bulk("CLAIM", 45, 10),
    *bulk("COMPLETE", 20, b"f0.", 1),
    *bulk("FAIL", 30, b"f0.", 1, b"e", 1, 0),
    Advance(10),
    CallStep(Call.of("PROMOTE", b"q", 1000)),
    CallStep(Call.of("SWEEP", b"q", 2, 1000)),
    *bulk("CLAIM", 50, 3),
))  # fmt: skip


def plain(history: History) -> History:
    """The same calls, each a step of its own (walked after each)."""
    return replace(history, steps=tuple(replace(s, bulk=None, part=0) if isinstance(s, CallStep) else s
                                        for s in history.steps))  # fmt: skip


def replayed(history: History, lua_scripts: Path | None = None) -> ReplayResult:
    with Replayer(DEFAULT_MODULE, lua_scripts=lua_scripts) as replayer:
        return replayer.replay(history)


def test_a_bulk_line_holds_its_calls_and_writes_back_as_one() -> None:
    text = hist.dumps(HISTORY)
    assert len(text.splitlines()) == 1 + 9  # the header and one line a bulk
    loaded = hist.loads(text)
    assert loaded == HISTORY
    ids = [s.call.rest[3] for s in loaded.steps[:3]]
    assert ids == [b"f0.0", b"f0.1", b"f0.2"]  # the id, then the call's number
    # a history cut inside a bulk holds its first calls: one bulk line, shorter
    cut = hist.loads(hist.dumps(replace(HISTORY, steps=HISTORY.steps[:7])))
    assert len(cut.steps) == 7 and cut.steps[6].call.rest[3] == b"f0.6"
    assert '"count": 7' in hist.dumps(cut)


@pytest.mark.parametrize(("line", "said"), [
    ('{"op": "bulk", "count": 0, "verb": "CLAIM", "queue": "q", "args": [5]}', "expected an integer >= 1"),
    ('{"op": "bulk", "count": 20001, "verb": "CLAIM", "queue": "q", "args": [5]}', "past the 20,000"),
    ('{"op": "bulk", "count": 2, "verb": "CLAIM", "queue": "q", "args": [5], "worker": "A"}', "runs as the admin"),
    ('{"op": "bulk", "count": 2, "verb": "CLAIM", "numkeys": 3, "rest": []}', "names its 'queue'"),
    ('{"op": "multi"}\n{"op": "bulk", "count": 2, "verb": "PAUSE", "queue": "q"}\n{"op": "exec"}',
     "a 'bulk' (its calls are walked once"),
])  # fmt: skip
def test_a_malformed_bulk_is_one_line(line: str, said: str) -> None:
    with pytest.raises(hist.HistoryError) as refused:
        hist.loads('{"format": "difftest-history", "version": 1}\n' + line + "\n")
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_history_past_its_calls_is_refused_at_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ['{"format": "difftest-history", "version": 1}']
    lines += [f'{{"op": "bulk", "count": 20000, "verb": "ENQUEUE", "queue": "q", "args": ["b{n}.", "p", 0]}}'
              for n in range(hist.MAX_CALLS // 20_000 + 1)]  # fmt: skip
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(path), "--reports", str(tmp_path / "r")]) == EXIT_SETUP
    err = capsys.readouterr().err
    assert f"past the {hist.MAX_CALLS:,} steps" in err and len(err.strip().splitlines()) == 1


@pytest.mark.servers
def test_bulk_steps_judge_as_the_same_calls_one_by_one() -> None:
    walked_once, walked_each = replayed(HISTORY), replayed(plain(HISTORY))
    assert walked_once.ok and walked_each.ok
    assert len(walked_once.records) == len(walked_each.records) == len(HISTORY.steps)
    for once, each in zip(walked_once.records, walked_each.records, strict=True):
        assert (once.lua_reply, once.native_reply) == (each.lua_reply, each.native_reply)
        assert once.verdict.rule == each.verdict.rule
    assert walked_once.observations[-1].native_after == walked_each.observations[-1].native_after
    # the bulk's calls before its last were not walked: the model's keyspace stood for theirs
    unwalked = [o for o in walked_once.observations if o.resolved.unwalked]
    assert len(unwalked) == 60 + 40 + 45 + 20 + 30 + 50 - 6
    # the replies the fill, the claims and the fenced completes gave
    replies = [r.native_reply for r in walked_once.records]
    assert replies[:100] == [1] * 100
    assert sum(1 for r in replies[145:165] if r == 1) >= 1 and 0 in replies[145:165]


@pytest.mark.servers
def test_a_defect_in_a_bulks_keyspace_is_caught_at_its_walk(tmp_path: Path) -> None:
    """One call's write wrong (its reply right): the walk after the bulk's last call holds it."""
    scripts = planted_scripts(
        tmp_path,
        "enqueue.lua",
        "redis.call('HSET', jk, 'payload', ARGV[2], 'state', 'pending'",
        "redis.call('HSET', jk, 'payload', id == 'f0.7' and 'x' or ARGV[2], 'state', 'pending'",
    )
    result = replayed(HISTORY, scripts)
    assert result.divergence is not None
    assert result.divergence.index == 59  # the fill's last call: the walk after it
    assert "emq:{q}:job:f0.7" in result.divergence.reason


@pytest.mark.servers
def test_a_defect_in_a_bulk_calls_reply_is_found_at_that_call_and_reproduced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A call's reply wrong: the divergence is that call's, its keyspace walked (the history replayed
    up to it), and its artifact replays to the same verdict."""
    scripts = planted_scripts(tmp_path, "enqueue.lua", "return 1", "if id == 'f0.7' then return 2 end\nreturn 1")
    result = replayed(HISTORY, scripts)
    assert result.divergence is not None and result.divergence.index == 7
    artifact = save_divergence(result, tmp_path / "artifact")
    assert len(hist.load(artifact / "history.jsonl").steps) == 8  # the fill cut at its eighth call
    assert expected_verdict(artifact) == {"verdict": "divergence", "step": 7, "reason": result.divergence.reason}
    code = main(["replay", str(artifact), "--lua-scripts", str(scripts), "--reports", str(tmp_path / "r")])
    assert code == EXIT_DIVERGENCE
    assert "reproduced: yes, the same step and reason" in capsys.readouterr().out


@pytest.mark.servers
def test_a_bulk_call_the_model_gives_no_keyspace_is_walked(tmp_path: Path) -> None:
    """A bulk ENQUEUE into a delayed set another writer made a string: each script stops half-way
    (its row written, then WRONGTYPE), which the model does not predict: that call is walked, and the
    rest of its bulk (the history replayed again so); the next bulk is walked once, after its last."""
    corrupt = History((hist.raw("SET", "emq:{q}:delayed", "x"), *bulk("ENQUEUE", 5, b"z.", b"p", 5),
                       *bulk("ENQUEUE", 3, b"y.", b"p", 0)))  # fmt: skip
    result = replayed(corrupt)
    assert result.ok, result.divergence
    assert [o.resolved.unwalked for o in result.observations] == [False] * 6 + [True, True, False]
    assert [r.native_reply for r in result.records[6:]] == [1, 1, 1]  # the pending fill after it
    assert all(isinstance(r.lua_reply, ErrorReply) for r in result.records[1:6])


@pytest.mark.servers
def test_the_size_labels_are_reached_by_the_class_corpus_size_history() -> None:
    from strategies.corpus import class_corpus

    (sized,) = [h for h in class_corpus() if h.note.endswith("size:queue:10000")]
    result = replayed(sized)
    assert result.ok, result.divergence
    reached = labels(result)
    assert [label for label in SIZE_LABELS if not reached[label]] == []


MEMBER_NAMES = (b"a", b"b", b"c", b"d", b"e")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(MEMBER_NAMES), st.integers(0, 3)), max_size=40))
def test_members_keep_zset_order_and_what_was_written(writes: list[tuple[bool, bytes, int]]) -> None:
    """The model's zsets: equal to the dict of their members, in zset order (score, then member) from
    the order of the one they were made from, each write's member known since an earlier one."""
    first = members = Members({b"a": b"1", b"z": b"0"})
    plain = {b"a": b"1", b"z": b"0"}
    for add, member, score in writes:
        before = members
        members = members.with_score(member, b"%d" % score) if add else members.without(member)
        if add:
            plain[member] = b"%d" % score
        else:
            plain.pop(member, None)
        assert members == plain and plain == members
        assert members.ordered() == sorted((float(s), m, s) for m, s in plain.items())
        # the order taken by the one made from it: the one before sorts again when asked
        assert before.ordered() == sorted((float(s), m, s) for m, s in before.items())
    changed = members.changes_since(first)
    assert changed is not None
    assert {m for m in changed if (m in first) != (m in members)} == set(first) ^ set(plain)
    assert pickle.loads(pickle.dumps(members)) == plain and type(pickle.loads(pickle.dumps(members))) is dict


def test_the_last_pass_cuts_a_bulk_to_its_fewest_failing_calls_first() -> None:
    """A failure that needs a bulk of 700 calls: the bulk is cut by halving to 700 in a few tries,
    before any step is deleted one by one (each try a replay of the whole history)."""
    from difftest.history.shrink import fewer_bulk_calls, minimise

    history = History((CallStep(Call.of("PAUSE", b"q")), *bulk("ENQUEUE", 5_000, b"f.", b"p", 0),
                       CallStep(Call.of("RESUME", b"q"))))  # fmt: skip
    tries: list[int] = []

    def still_fails(candidate: History) -> bool:
        tries.append(len(candidate.steps))
        return sum(1 for s in candidate.steps if isinstance(s, CallStep) and s.call.verb == "ENQUEUE") >= 700

    cut = fewer_bulk_calls(history, still_fails)
    assert len(cut.steps) == 702 and len(tries) <= 13
    assert hist.loads(hist.dumps(cut)) == cut  # still one bulk line: its first 700 calls
    smallest = minimise(history, still_fails)
    assert [s.call.verb for s in smallest.steps if isinstance(s, CallStep)] == ["ENQUEUE"] * 700


@pytest.mark.servers
def test_a_resync_in_a_segment_cut_inside_a_bulk_reads_the_lua_keyspace() -> None:
    """A contract row that re-syncs the pair (D3), then a bulk longer than a pipeline's 256 steps in
    the same segment: the segment ends at a call with no walk after it."""
    from difftest.replay.replayer import SEGMENT_STEPS

    d3 = hist.load(Path(__file__).parent / "histories" / "d3_wrong_type_after_write.jsonl")
    history = replace(
        d3, steps=(*d3.steps, *Bulk(Call.of("ENQUEUE", b"s", b"f.", b"p", 0), SEGMENT_STEPS + 50).steps())
    )
    result = replayed(history)
    assert result.ok, result.divergence
    assert result.rules_hit["D3"] >= 1 and len(result.records) == len(history.steps)
