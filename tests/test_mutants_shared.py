"""A shared defect on real servers: both executors patched the same way (a catalogue entry with
executor "both") agree with each other, and the spec's model and the queue's accounting catch them;
the same history on the unmodified pair is no finding. One cheap native build (the shared target of the mutants'
cache holds the dependencies once built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.history import format as hist
from difftest.replay.replayer import Replayer
from executors.native.adapter import DEFAULT_MODULE
from mutants import catalogue as cat
from mutants.score import caught_by
from mutants.workspace import prepare

pytestmark = pytest.mark.servers

# a job claimed, failed for a retry, promoted and claimed again: the second claim's token must be
# above the first's
HISTORY = "\n".join([
    '{"format": "difftest-history", "version": 1, "start_ms": 1000}',
    '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}',
    '{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}',
    '{"op": "call", "verb": "FAIL", "queue": "q", "args": ["j1", 1, "e", 5, 0]}',
    '{"op": "call", "verb": "PROMOTE", "queue": "q", "args": [10]}',
    '{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}',
])  # fmt: skip


def test_the_history_is_no_finding_on_the_unmodified_pair() -> None:
    with Replayer(DEFAULT_MODULE) as engine:
        plain = engine.replay(hist.loads(HISTORY))
    assert plain.divergence is None
    assert plain.records[-1].native_reply == [b"j1", b"p", 2]  # the second claim's token: 2


@pytest.mark.build
@pytest.mark.subprocess
@pytest.mark.timeout(900)  # a fresh cache first builds the module's dependencies (~100 s here)
def test_a_token_handed_out_twice_is_an_accounting_finding_on_both_sides() -> None:
    mutant = next(m for m in cat.load() if m.id == "both-claim-token-reset-to-one")
    assert mutant.executors == ("lua", "native")
    built = {e: prepare(e, cat.EXECUTOR_DIRS[e], mutant.patch_for(e)) for e in mutant.executors}
    assert all(w.artifact is not None for w in built.values()), {e: w.unviable for e, w in built.items()}
    module, scripts = built["native"].artifact, built["lua"].artifact
    assert isinstance(module, Path) and isinstance(scripts, Path)
    with Replayer(module, lua_scripts=scripts) as engine:
        result = engine.replay(hist.loads(HISTORY))
    divergence = result.divergence
    assert divergence is not None and divergence.index == 4  # the second claim (steps count from 0)
    # both executors hand out token 1 twice and agree: the spec's model and the accounting see it, on each side
    assert divergence.reason.startswith("shared defect: both executors differ from the spec in the same way: ")
    assert "model: native: the spec says [b'j1', b'p', 2], it answered [b'j1', b'p', 1]" in divergence.reason
    assert "native: accounting:token: b'j1' of b'q'" in divergence.reason
    assert "lua: accounting:token: b'j1' of b'q'" in divergence.reason
    assert "#1 CLAIM token 1 -> active" in divergence.reason  # the job's life as evidence
    assert caught_by(divergence.reason) == "model, accounting" and divergence.kind == "spec"
