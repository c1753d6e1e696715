"""The step-deletion pass never offers a history whose split claims no longer pair up (pure)."""

from __future__ import annotations

import json

from difftest.history import format as hist
from difftest.history.format import History, well_paired
from difftest.history.shrink import _without, minimise

HEADER = {"format": "difftest-history", "version": 1, "start_ms": 1000, "users": {}}
STEPS = [
    {"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]},
    {"op": "begin", "worker": "A", "verb": "CLAIM", "queue": "q", "args": [100]},
    {"op": "end", "worker": "A"},
    {"op": "begin", "worker": "A", "verb": "CLAIM", "queue": "q", "args": [100]},
    {"op": "end", "worker": "A"},
    {"op": "restart"},
    {"op": "begin", "worker": "B", "verb": "CLAIM", "queue": "q", "args": [100]},
    {"op": "call", "verb": "PAUSE", "queue": "q", "args": []},
    {"op": "end", "worker": "B"},
]


def history() -> History:
    return hist.loads("\n".join(json.dumps(line) for line in [HEADER, *STEPS]))


def test_a_whole_pair_and_the_next_begin_take_that_begin_s_end_with_them() -> None:
    steps = history().steps
    # begin, end, begin of worker A: the second begin's own end goes too, never a lone end left
    assert not well_paired(steps[:1] + steps[4:])
    assert _without(steps, 1, 4) == steps[:1] + steps[5:]


def test_a_begin_left_open_at_the_end_is_deleted_alone() -> None:
    # a history may end inside a split claim; deleting that begin keeps worker A's earlier pair
    # (the pass once deleted every step of the worker, and a needed claim with them)
    steps = history().steps[:5] + history().steps[1:2]
    assert well_paired(steps)
    assert _without(steps, 5, 6) == steps[:5]
    assert _without(steps, 3, 4) == steps[:3] + steps[5:]  # the second pair's begin: its end goes too


def test_every_candidate_the_pass_tries_pairs_up_and_loads() -> None:
    tried: list[History] = []

    def still_fails(candidate: History) -> bool:
        tried.append(candidate)
        return False  # nothing is kept, so the pass tries every chunk size over the whole history

    assert minimise(history(), still_fails) == history()
    assert len(tried) > 5
    for candidate in tried:
        assert well_paired(candidate.steps), hist.dumps(candidate)
        assert hist.loads(hist.dumps(candidate)) == candidate  # a history file would accept it
