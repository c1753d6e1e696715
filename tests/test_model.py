"""The spec's model as a third voter: every recorded step agrees with it on both sides, a defect one
executor has is named on that side, a defect both share is a shared defect (on real servers), the
harness's own steps are predicted too, and a campaign reports the share of steps the model judged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from difftest.campaign.driver import CampaignConfig, run_campaign
from difftest.coverage.labels import MODEL_JUDGED, model_labels, model_share
from difftest.history import format as hist
from difftest.judge.verdicts import (
    LUA_WRONG,
    NATIVE_WRONG,
    SHARED,
    SPEC,
    JudgeState,
    Observation,
    judge,
    judge_all,
    spec_prediction,
    voters_of,
)
from difftest.replay import observations
from difftest.replay.replayer import Replayer
from difftest.spec import model
from difftest.spec.commands import Layout, Verb
from difftest.spec.snapshot import Entry, Snapshot
from executors.native.adapter import DEFAULT_MODULE
from mutants.score import caught_by
from tests.helpers import planted_scripts

OBSERVED = Path(__file__).parent / "observations"
FILES = sorted(p.name for p in OBSERVED.glob("*.jsonl"))


def _changed(steps: list[Observation], index: int, **fields: object) -> list[Observation]:
    return [dataclasses.replace(s, **fields) if i == index else s for i, s in enumerate(steps)]  # type: ignore[arg-type]


# -- the model's own check: the recorded observations agree with it on both sides ------------------


@pytest.mark.parametrize("name", FILES)
def test_every_recorded_step_is_judged_by_the_model_and_agrees_with_it(name: str) -> None:
    """Each file was recorded on the unmodified executors: the model predicts every step, and
    neither side departs from it (a departure here is a finding about the model or the spec)."""
    _, steps, _ = observations.load(OBSERVED / name)
    state = JudgeState()
    for step in steps:
        prediction = spec_prediction(state, step, _paused_read(state, step), state.limited)
        assert isinstance(prediction, model.Prediction), (step.resolved.index, prediction)
        sides = (("lua", prediction.lua, step.lua_reply, step.lua_after),
                 ("native", prediction.native, step.native_reply, step.native_after))  # fmt: skip
        for side, expected, reply, after in sides:
            assert model.departure(expected, reply, after) is None, (step.resolved.index, side)
        state, verdict = judge(state, step)
        assert verdict.ok and not verdict.unjudged, verdict.reason


def _paused_read(state: JudgeState, step: Observation) -> object:
    if not step.resolved.is_end:
        return None
    return next((read for begun, read in state.paused_reads if begun == step.resolved.begun_at), None)


def test_the_model_gives_each_side_its_own_outcome_where_a_row_lets_them_differ() -> None:
    """D7 on a recorded restart: the scripts count the expired lease, the module exempts it."""
    _, steps, recorded = observations.load(OBSERVED / "n1_d7_restart_is_not_a_stall.jsonl")
    at = next(i for i, verdict in enumerate(recorded) if verdict.rule == "D7")
    state = JudgeState()
    for step in steps[:at]:
        state, _ = judge(state, step)
    prediction = spec_prediction(state, steps[at], None, False)
    assert isinstance(prediction, model.Prediction)
    assert prediction.lua.reply != prediction.native.reply
    assert isinstance(prediction.native.reply, list) and prediction.native.reply[3] >= 1  # exempt


# -- which side is wrong ------------------------------------------------------------------------------


def _claim_step() -> tuple[list[Observation], int]:
    _, steps, _ = observations.load(OBSERVED / "n2_extend_row_read_only.jsonl")
    index = next(i for i, s in enumerate(steps) if s.resolved.transition and s.resolved.transition.verb is Verb.CLAIM)
    assert isinstance(steps[index].native_reply, list) and steps[index].native_reply, "the claim claimed nothing"
    return steps, index


def test_a_defect_of_the_module_alone_names_the_module() -> None:
    steps, index = _claim_step()
    step = steps[index]
    wrong = [step.native_reply[0], step.native_reply[1], 7]  # type: ignore[index]
    verdict = judge_all(_changed(steps, index, native_reply=wrong))[-1]
    assert verdict.kind == "divergence" and verdict.reason.startswith(NATIVE_WRONG + ": pair: "), verdict.reason
    assert "model: native: the spec says" in verdict.reason and "model: lua" not in verdict.reason
    assert voters_of(verdict.reason) == ["model", "pair"] and verdict.finding != SPEC


def test_a_defect_of_the_scripts_alone_names_the_scripts() -> None:
    steps, index = _claim_step()
    step = steps[index]
    stray = {**step.lua_after, b"emq:{q}:stray": Entry("string", b"x", -1)}
    verdict = judge_all(_changed(steps, index, lua_after=stray))[-1]
    assert verdict.kind == "divergence" and verdict.reason.startswith(LUA_WRONG + ": pair: "), verdict.reason
    assert "model: lua: its keyspace departs from the spec's at emq:{q}:stray" in verdict.reason


def test_a_defect_both_share_is_a_shared_defect_the_pair_cannot_see() -> None:
    steps, index = _claim_step()
    step = steps[index]
    wrong = [step.native_reply[0], step.native_reply[1], 7]  # type: ignore[index]
    verdict = judge_all(_changed(steps, index, native_reply=wrong, lua_reply=wrong))[-1]
    assert verdict.kind == "divergence" and verdict.finding == SPEC
    assert verdict.reason.startswith(SHARED + ": model: native: the spec says"), verdict.reason
    assert "pair" not in voters_of(verdict.reason) and caught_by(verdict.reason).startswith("model")


# -- the model's pieces ------------------------------------------------------------------------------


L = Layout(b"q")


def _facts(verb: Verb, *args: int | bytes, **more: object) -> model.CallFacts:
    return model.CallFacts(verb, L, args, **more)  # type: ignore[arg-type]


def _row(**fields: bytes) -> Entry:
    return Entry("hash", {k.encode(): v for k, v in fields.items()}, -1)


def test_a_claim_pops_the_oldest_and_the_scripts_reply_attempts_as_a_lua_number() -> None:
    big = 2**53 + 1
    before: Snapshot = {L.pending: Entry("zset", {b"b": b"5", b"a": b"5", b"c": b"1"}, 7_000),
                        L.row(b"c"): _row(payload=b"p", attempts=str(big).encode())}  # fmt: skip
    predicted = model.predict(_facts(Verb.CLAIM, 100), before, {}, 1000, b"r1")
    assert predicted.native.reply == [b"c", b"p", big + 1] and predicted.lua.reply == [b"c", b"p", 2**53 + 2]
    after = predicted.native.after
    assert after is not None and after[L.pending] == Entry("zset", {b"a": b"5", b"b": b"5"}, 7_000)  # TTL kept
    assert after[L.active] == Entry("zset", {b"c": b"1100"}, -1)


def test_a_fault_after_a_write_is_the_scripts_error_and_the_modules_refusal() -> None:
    """D5: active is not a zset. The scripts pop and fail (their writes not judged); the module
    answers WRONGTYPE and writes nothing."""
    before: Snapshot = {L.pending: Entry("zset", {b"j": b"1"}, -1), L.row(b"j"): _row(payload=b"p"),
                        L.active: Entry("string", b"x", -1)}  # fmt: skip
    predicted = model.predict(_facts(Verb.CLAIM, 100), before, {}, 1000, b"r1")
    assert predicted.lua.errors == ("WRONGTYPE",) and predicted.lua.after is None
    assert predicted.native.errors == ("WRONGTYPE",) and predicted.native.after is before


def test_a_caller_the_row_is_read_only_to_extends_through_the_scripts_only() -> None:
    """N2: the module's re-stamp writes the row."""
    before: Snapshot = {L.active: Entry("zset", {b"j": b"900"}, -1), L.row(b"j"): _row(attempts=b"3")}
    denied = frozenset({(L.row(b"j"), "write")})
    predicted = model.predict(_facts(Verb.EXTEND, b"j", 3, 50, denied=denied), before, {}, 1000, b"r1")
    assert predicted.lua.reply == 1 and predicted.native.errors == ("NOPERM",)


def test_over_the_memory_limit_growth_is_refused_and_draining_goes_on() -> None:
    before: Snapshot = {L.active: Entry("zset", {b"j": b"900"}, -1), L.row(b"j"): _row(attempts=b"3")}
    grow = model.predict(_facts(Verb.ENQUEUE, b"k", b"p", 0, gates=frozenset({model.MEMORY})), before, {}, 1000, b"r1")
    assert grow.lua.errors == ("OOM",) and grow.native.errors == ("OOM",) and grow.native.after is before
    drain = model.predict(_facts(Verb.COMPLETE, b"j", 3, gates=frozenset({model.MEMORY})), before, {}, 1000, b"r1")
    assert drain.lua.reply == drain.native.reply == 1


def test_the_clock_moving_on_shortens_every_ttl_and_expires_what_is_past() -> None:
    before: Snapshot = {b"a": Entry("string", b"x", 10), b"b": Entry("string", b"y", 5),
                        b"c": Entry("string", b"z", -1), b"d": Entry("string", b"w", 4)}  # fmt: skip
    after = model.advanced(before, 5).native.after
    assert after == {b"a": Entry("string", b"x", 5), b"b": Entry("string", b"y", 0), b"c": Entry("string", b"z", -1)}


def test_raw_writes_as_valkey_does_them() -> None:
    row = L.row(b"j")
    before: Snapshot = {row: Entry("hash", {b"payload": b"p"}, 50), L.pending: Entry("zset", {b"j": b"1"}, -1)}
    assert model.raw_write((b"HSET", row, b"stalled", b"x"), before, 0)[row] == Entry(  # type: ignore[index]
        "hash", {b"payload": b"p", b"stalled": b"x"}, 50
    )
    assert model.raw_write((b"HSET", L.pending, b"f", b"v"), before, 0) is before  # WRONGTYPE: nothing
    assert model.raw_write((b"ZADD", L.pending, b"1e3", b"k"), before, 0)[L.pending].value == {  # type: ignore[index]
        b"j": b"1",
        b"k": b"1000",
    }
    assert model.raw_write((b"PEXPIREAT", row, b"100"), before, 100) == {L.pending: before[L.pending]}
    assert model.raw_write((b"SET", row, b"junk"), before, 0)[row] == Entry("string", b"junk", -1)  # type: ignore[index]
    assert model.raw_write((b"HDEL", row, b"lease_epoch"), before, 0) == before  # set aside in every snapshot
    assert model.raw_write((b"HDEL", row, b"payload", b"lease_epoch"), before, 0) == {L.pending: before[L.pending]}
    epoch_only: Snapshot = {row: Entry("hash", {}, -1)}  # a row holding only lease_epoch (null run, seed 275953678)
    assert model.raw_write((b"HDEL", row, b"stalled"), epoch_only, 0) is epoch_only
    meta = {L.meta: Entry("hash", {b"paused": b"1"}, -1)}
    assert model.raw_write((b"HDEL", L.meta, b"paused"), meta, 0, {}) == {}  # its last field: the key goes
    kept = {L.meta: b"r1"}  # an epoch may keep it on one side
    assert model.raw_write((b"HDEL", L.meta, b"paused"), meta, 0, kept) == "raw-command"
    assert model.raw_write((b"FLUSHALL",), before, 0) == "raw-command"
    scores = [model.zset_score(s) for s in (b"+inf", b"-inf", b"1.5", b"-0", b"7", b"1_0", b"nan")]
    assert scores == [b"inf", b"-inf", b"1.5", b"-0", b"7", None, None]


def test_a_step_the_model_does_not_predict_is_marked_and_counted() -> None:
    _, steps, _ = observations.load(OBSERVED / "d6_bad_arguments.jsonl")
    raw = dataclasses.replace(steps[0], resolved=dataclasses.replace(
        steps[0].resolved, step=hist.RawWrite((b"FLUSHALL",))))  # fmt: skip
    _, verdict = judge(JudgeState(), raw)
    assert verdict.unjudged == "raw-command" and verdict.unjudged in model.UNJUDGED_KINDS


# -- on real servers ------------------------------------------------------------------------------------


def _scripts_history(*calls: str) -> hist.History:
    """Every call run through the Lua scripts on both servers (an upgrade's Lua-era workers)."""
    lines = ['{"format": "difftest-history", "version": 1, "start_ms": 1000}']
    lines += [call[:-1] + ', "executor": "lua"}' for call in calls]
    return hist.loads("\n".join(lines))


COMPLETE_WITH_A_STALE_TOKEN = (
    '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}',
    '{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}',
    '{"op": "call", "verb": "COMPLETE", "queue": "q", "args": ["j1", 9]}',
)


@pytest.mark.servers
def test_a_planted_shared_defect_is_reported_as_a_shared_defect(tmp_path: Path) -> None:
    """COMPLETE ignores its token, in the scripts that both servers run: the executors agree, the
    model says the fence should have held."""
    scripts = planted_scripts(tmp_path, "complete.lua", "~= ARGV[2] then return 0", "== nil then return 0")
    with Replayer(DEFAULT_MODULE, lua_scripts=scripts) as engine:
        result = engine.replay(_scripts_history(*COMPLETE_WITH_A_STALE_TOKEN))
    divergence = result.divergence
    assert divergence is not None and divergence.index == 2 and divergence.kind == SPEC
    assert divergence.reason.startswith(SHARED + ": model: native: the spec says 0, it answered 1"), divergence.reason
    assert divergence.lua_reply == divergence.native_reply == 1
    assert caught_by(divergence.reason).split(", ")[0] == "model" and "pair" not in caught_by(divergence.reason)
    # the artifact and the summary's brief say what the model expected of each side
    from difftest.replay.artifacts import brief, save_divergence

    assert brief(divergence)["model"]["native"]["expects"] == "reply 0"
    report = (save_divergence(result, tmp_path / "artifact") / "report.txt").read_text()
    assert report.startswith("SPEC DIVERGENCE at step 2") and "what the spec's model says at this step:" in report
    with Replayer(DEFAULT_MODULE) as engine:  # the same history on the unmodified scripts: no finding
        assert engine.replay(_scripts_history(*COMPLETE_WITH_A_STALE_TOKEN)).divergence is None


@pytest.mark.servers
def test_a_one_sided_defect_of_the_scripts_names_the_scripts(tmp_path: Path) -> None:
    """The same defect in the Lua executor only: the pair diverges, and the model says which side."""
    scripts = planted_scripts(tmp_path, "complete.lua", "~= ARGV[2] then return 0", "== nil then return 0")
    history = hist.loads("\n".join(['{"format": "difftest-history", "version": 1, "start_ms": 1000}',
                                    *COMPLETE_WITH_A_STALE_TOKEN]))  # fmt: skip
    with Replayer(DEFAULT_MODULE, lua_scripts=scripts) as engine:
        divergence = engine.replay(history).divergence
    assert divergence is not None and divergence.index == 2 and divergence.kind == "divergence"
    assert divergence.reason.startswith(LUA_WRONG + ": pair: "), divergence.reason
    assert "model: lua: the spec says 0, it answered 1" in divergence.reason
    assert "model: native" not in divergence.reason


@pytest.mark.servers
def test_a_campaign_reports_the_share_of_steps_the_model_judged(tmp_path: Path) -> None:
    """summary.json's `model` entry and the terminal's summary row, from a campaign on real servers."""
    import io

    from difftest.campaign.progress import print_table, summary_table
    from difftest.report import reports

    config = CampaignConfig(seed=5, module=DEFAULT_MODULE, reports=tmp_path / "run", examples=8, workers=1, pin=False,
                            corpus=False)  # fmt: skip
    result = run_campaign(config)
    assert result.failures == []
    reports.write(result, config.reports)
    share = json.loads((config.reports / "summary.json").read_text())["model"]
    assert share == model_share(result.labels)
    assert share["judged_steps"] == result.labels[MODEL_JUDGED] > 0
    assert share["judged_steps"] + sum(share["unjudged"].values()) == share["steps"] >= result.histories
    assert share["share"] == round(share["judged_steps"] / share["steps"], 6)
    terminal = io.StringIO()
    print_table(summary_table(result, 5, "none"), terminal)
    assert "judged by the spec's model" in terminal.getvalue()
    assert f"{share['judged_steps']:,} of {share['steps']:,} steps" in terminal.getvalue()


@pytest.mark.servers
def test_the_share_counts_each_replayed_step() -> None:
    with Replayer(DEFAULT_MODULE) as engine:
        replayed = engine.replay(_scripts_history(*COMPLETE_WITH_A_STALE_TOKEN))
    assert replayed.divergence is None and model_labels(replayed) == {MODEL_JUDGED: 3}


def test_under_the_limit_a_script_meets_the_limit_first_and_a_plain_command_the_acl_first() -> None:
    """valkey 9.1 checks a script's deny-oom first write for the memory limit before the caller's ACL
    (ENQUEUE by a caller who may only read rows: OOM on both), while the Lua host's plain HSET (PAUSE)
    is checked for its ACL first (a caller denied meta: NOPERM on both; docs/contract-decisions.md,
    "Two refusals at once")."""
    oom = frozenset({model.MEMORY})
    row_read_only = frozenset({(L.row(b"k"), "write")})
    grow = model.predict(_facts(Verb.ENQUEUE, b"k", b"p", 0, gates=oom, denied=row_read_only), {}, {}, 1000, b"r1")
    assert grow.lua.errors == ("OOM",) and grow.native.errors[0] == "OOM"
    meta_denied = frozenset({(L.meta, "write"), (L.meta, "read")})
    pause = model.predict(_facts(Verb.PAUSE, gates=oom, denied=meta_denied, checked=(L.meta,)), {}, {}, 1000, b"r1")
    assert pause.lua.errors == ("NOPERM",) and pause.native.errors == ("NOPERM",)
    both = frozenset({model.MEMORY, model.WRITES_DENIED})
    claim = model.predict(_facts(Verb.CLAIM, 10, gates=both), {L.pending: Entry("zset", {b"j": b"1"}, -1)}, {}, 1000,
                          b"r1")  # fmt: skip
    assert claim.lua.errors == ("NOREPLICAS",) and claim.native.errors == ("NOREPLICAS",)  # ZPOPMIN: not deny-oom
