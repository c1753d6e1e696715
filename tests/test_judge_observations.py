"""The judge without servers: observations recorded on real servers (tests/observations/), judged again.

Each file holds a history of tests/histories/, what both servers did at every step and the verdict
given when it was recorded (`scripts/record_observations.py`). The judge must give the same verdicts
from the file alone; changed observations must change them; and a replay on real servers must still
observe what the file holds, so the files stay true to the executors.
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.history import format as hist
from difftest.judge.verdicts import JudgeState, Observation, judge, judge_all
from difftest.replay import observations
from difftest.replay.replayer import Replayer
from difftest.spec.commands import VERBS
from difftest.spec.replies import ErrorReply
from difftest.spec.snapshot import Entry
from executors.native.adapter import DEFAULT_MODULE
from tests.test_engine_histories import EXPECTED_RULES, HISTORIES

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"replayer": ("servers",)}

ROOT = Path(__file__).resolve().parent.parent
OBSERVED = Path(__file__).parent / "observations"
FILES = sorted(p.name for p in OBSERVED.glob("*.jsonl"))


def test_every_history_has_its_observations() -> None:
    assert sorted(p.name for p in HISTORIES.glob("*.jsonl")) == FILES


@pytest.mark.parametrize("name", FILES)
def test_the_judge_gives_the_recorded_verdicts(name: str) -> None:
    _, steps, recorded = observations.load(OBSERVED / name)
    assert judge_all(steps) == recorded
    rules: dict[str, int] = {}
    for verdict in recorded:
        assert verdict.ok, verdict.reason
        if verdict.rule:
            rules[verdict.rule] = rules.get(verdict.rule, 0) + 1
    assert rules == EXPECTED_RULES[name]  # the reviewed expectation, not only what was recorded


def test_a_false_divergence_stays_gone() -> None:
    """Seed 275953678's shrunk history: meta goes bad between a split claim's read (nil) and its
    end. The Lua host sends the script (which meets the junk pending); the native meets the junk
    meta. D1, not D2: the read that D2 speaks of answered nil."""
    _, steps, _ = observations.load(OBSERVED / "d1_meta_corrupted_between.jsonl")
    end = judge_all(steps)[-1]
    assert (end.kind, end.rule) == ("allowed", "D1")
    assert isinstance(steps[-1].lua_reply, ErrorReply) and isinstance(steps[-1].native_reply, ErrorReply)


def _changed(steps: list[Observation], index: int, **fields: object) -> list[Observation]:
    return [dataclasses.replace(s, **fields) if i == index else s for i, s in enumerate(steps)]  # type: ignore[arg-type]


def _allowed_steps() -> Iterator[tuple[str, int, str]]:
    for name in FILES:
        _, _, recorded = observations.load(OBSERVED / name)
        for index, verdict in enumerate(recorded):
            if verdict.kind == "allowed":
                yield name, index, verdict.rule or ""


@pytest.mark.parametrize(("name", "index", "rule"), list(_allowed_steps()))
def test_a_native_write_on_an_allowed_step_is_caught(name: str, index: int, rule: str) -> None:
    """Every allowed difference has an exact native outcome: one more key written on the native
    side (and only there) is a divergence, whichever rule allowed the step."""
    _, steps, _ = observations.load(OBSERVED / name)
    step = steps[index]
    extra = {**step.native_after, b"emq:{q}:stray": Entry("string", b"x", -1)}
    verdicts = judge_all(_changed(steps, index, native_after=extra))
    assert len(verdicts) == index + 1 and verdicts[-1].kind == "divergence", (rule, verdicts[-1])


def _matched_calls() -> Iterator[tuple[str, int]]:
    for name in FILES:
        _, steps, recorded = observations.load(OBSERVED / name)
        for index, verdict in enumerate(recorded):
            if verdict.kind == "match" and steps[index].resolved.sends_transition:
                yield name, index


@pytest.mark.parametrize(("name", "index"), list(_matched_calls()))
def test_a_different_native_reply_is_caught(name: str, index: int) -> None:
    """Where both sides answered alike and no rule applied, another native reply is a divergence."""
    _, steps, _ = observations.load(OBSERVED / name)
    verdicts = judge_all(_changed(steps, index, native_reply=ErrorReply("ERR planted")))
    assert verdicts[-1].kind == "divergence" and len(verdicts) == index + 1


def test_a_stale_lease_epoch_is_caught() -> None:
    """N1: the native's epoch after a claim must be the run_id at that claim."""
    _, steps, _ = observations.load(OBSERVED / "n2_extend_row_read_only.jsonl")
    claim = 1
    stamped = {key: b"run-0" for key in steps[claim].native_epochs}
    assert stamped, "the claim stamped no row"
    verdicts = judge_all(_changed(steps, claim, native_epochs=stamped))
    assert (verdicts[-1].kind, verdicts[-1].rule) == ("divergence", "N1")


def test_judging_is_a_fold_over_plain_data() -> None:
    """The same state and observation give the same next state and verdict, and the state given is
    left as it was."""
    _, steps, _ = observations.load(OBSERVED / "d7_acl_refusal_on_the_counted_path.jsonl")
    state = JudgeState()
    for step in steps:
        before = dataclasses.replace(state)
        first = judge(state, step)
        assert judge(state, step) == first and state == before
        state = first[0]


@pytest.mark.subprocess
def test_the_judge_imports_no_server_client_or_replay() -> None:
    code = ("import sys, difftest.judge.verdicts, difftest.judge.contract, difftest.replay.observations as o; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('valkey', 'redis', 'docker') "
            "or m.startswith(('difftest.servers', 'difftest.servers.wire', 'difftest.replay.sides'))))")  # fmt: skip
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


JUDGING_CODE = ["judge/verdicts.py", "judge/contract.py", "spec/model.py", "judge/invariants.py", "replay/replayer.py",
                "replay/sides.py", "campaign/driver.py", "coverage/labels.py", "history/resolve.py",
                "history/shrink.py"]  # fmt: skip


@pytest.mark.parametrize("module", JUDGING_CODE)
def test_no_verb_name_is_quoted_outside_the_spec_table(module: str) -> None:
    """Per-verb knowledge lives in difftest/spec/commands.py; judging, replay and campaign code reads it
    from there (a rule like D2 is then reviewed in one place)."""
    tree = ast.parse((ROOT / "difftest" / module).read_text())
    quoted = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in VERBS]
    assert quoted == []


@pytest.fixture(scope="module")
def replayer() -> Iterator[Replayer]:
    with Replayer(DEFAULT_MODULE) as engine:
        yield engine


@pytest.mark.parametrize("name", FILES)
def test_real_servers_still_observe_what_the_file_holds(replayer: Replayer, name: str) -> None:
    """Re-recorded on real servers, the file comes out the same (run_ids are named in order)."""
    result = replayer.replay(hist.load(HISTORIES / name))
    assert observations.dumps(result) == (OBSERVED / name).read_text(encoding="utf-8"), (
        "the executors no longer do what tests/observations/ records: run scripts/record_observations.py "
        "and review the diff"
    )


def test_an_exemption_the_caller_may_not_write_is_caught() -> None:
    """D7 held to the caller's permissions: where the caller may only read rows, a native that
    exempts the lease anyway (writing its row) is a divergence, though its keyspace is exactly the
    exemption's."""
    from difftest.spec.commands import Layout
    from difftest.spec.model import sweep

    _, steps, recorded = observations.load(OBSERVED / "d7_exempt_row_read_only.jsonl")
    assert (recorded[-1].kind, recorded[-1].rule) == ("allowed", "D7")
    state = JudgeState()
    for step in steps[:-1]:
        state, _ = judge(state, step)
    last = steps[-1]
    exempted = sweep(state.before, state.before_epochs, Layout(b"q"), 5, 10, last.now_ms, last.run_id)
    assert exempted.reply == [0, 0, 0, 1] and exempted.after is not None
    verdicts = judge_all(_changed(steps, len(steps) - 1, native_reply=exempted.reply, native_after=exempted.after))
    assert verdicts[-1].kind == "divergence" and "NOPERM" in verdicts[-1].reason
