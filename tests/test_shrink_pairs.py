"""The step-deletion pass never offers a history whose split claims no longer pair up (pure)."""

from __future__ import annotations

import json

from difftest import history as hist
from difftest.history import History, well_paired
from difftest.shrink import _without, minimise

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


def test_a_whole_pair_and_the_next_begin_are_not_deleted_alone() -> None:
    steps = history().steps
    # begin, end, begin of worker A: the workers begun and ended match, but the second end is left
    assert _without(steps, 1, 4) is None
    assert well_paired(steps) and not well_paired(steps[:1] + steps[4:])


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
