"""Hand-written histories, one per contract row, replayed on real servers through the engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.history import format as hist
from difftest.replay.replayer import Replayer
from executors.native.adapter import DEFAULT_MODULE

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"replayer": ("servers",)}

HISTORIES = Path(__file__).parent / "histories"

EXPECTED_RULES = {
    "d1_pause_lands_between.jsonl": {"D1": 2},
    "d1_meta_corrupted_between.jsonl": {"D1": 1},
    "d1_meta_mended_between.jsonl": {"D1": 1},
    "d1_paused_then_meta_corrupted.jsonl": {"D1": 1},
    "d2_meta_error.jsonl": {"D2": 2},
    "d2_split_claim_meta_error.jsonl": {"D2": 1},
    "d3_wrong_type_after_write.jsonl": {"D3": 2},
    "d3_row_wrong_typed_and_read_only.jsonl": {"D3": 1},
    "d4_bad_counters.jsonl": {"D4": 3},
    "d5_active_not_a_zset.jsonl": {"D5": 1},
    "d6_bad_arguments.jsonl": {"D6": 5},
    "d7_acl_refusal_on_the_counted_path.jsonl": {"D7": 1},
    "d7_exempt_row_read_only.jsonl": {"D7": 1},
    "d8_sweep_refusals.jsonl": {"D8": 3},
    "d9_promote_row_not_a_hash.jsonl": {"D9": 1},
    "n1_d7_restart_is_not_a_stall.jsonl": {"D7": 1},
    "n2_extend_row_read_only.jsonl": {"N2": 1},
    "n3_paused_claim_declared_key_denied.jsonl": {"N3": 1},
    "n4_pause_meta_write_only.jsonl": {"N4": 2, "D6": 1},
    "claim_ghost_by_a_write_only_row_caller.jsonl": {},
    "d7_lua_stops_at_an_earlier_members_destination.jsonl": {"D7": 1},
    "n5_claim_attempts_past_2_53.jsonl": {"N5": 2},
    "d1_n5_stale_claim_past_2_53.jsonl": {"D1": 1},
    "d7_metrics_write_only_dead_letter.jsonl": {"D7": 1},
}


@pytest.fixture(scope="module")
def replayer() -> Iterator[Replayer]:
    with Replayer(DEFAULT_MODULE) as engine:
        yield engine


def test_every_history_file_is_listed() -> None:
    assert {p.name for p in HISTORIES.glob("*.jsonl")} == set(EXPECTED_RULES)


@pytest.mark.parametrize("name", sorted(EXPECTED_RULES))
def test_history_matches_under_the_contract(replayer: Replayer, name: str) -> None:
    result = replayer.replay(hist.load(HISTORIES / name))
    assert result.divergence is None, result.divergence and result.divergence.reason
    assert dict(result.rules_hit) == EXPECTED_RULES[name]
    assert len(result.records) == len(result.history.steps)


def test_every_contract_row_is_exercised() -> None:
    reached = set().union(*EXPECTED_RULES.values())
    assert reached == {"D1", "D2", "D3", "D4", "D5", "D6", "D7", "D8", "D9", "N2", "N3", "N4", "N5"}


def test_worked_example_d7_replies(replayer: Replayer) -> None:
    result = replayer.replay(hist.load(HISTORIES / "n1_d7_restart_is_not_a_stall.jsonl"))
    sweep = result.records[4]
    assert (sweep.verdict.rule, sweep.lua_reply, sweep.native_reply) == ("D7", [0, 1, 0, 0], [0, 0, 0, 1])
    # after the re-sync both claim j1 again: attempts 2 on both
    assert result.records[5].lua_reply == result.records[5].native_reply == [b"j1", b"p", 2]
    # EXTEND after a crash re-stamps (N1 checked by the engine at every step), and the sweep counts
    assert result.records[7].native_reply == 1
    assert result.records[9].native_reply == [0, 1, 0, 0]


def test_replays_are_reproducible(replayer: Replayer) -> None:
    history = hist.load(HISTORIES / "d8_sweep_refusals.jsonl")
    first = [(r.verdict, r.lua_reply, r.native_reply) for r in replayer.replay(history).records]
    second = [(r.verdict, r.lua_reply, r.native_reply) for r in replayer.replay(history).records]
    assert first == second
