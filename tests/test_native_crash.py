"""A native module that takes its server down is a finding: a divergence at the step it died on,
with an artifact like any other, and the replayer goes on with a fresh server afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from difftest.history import format as hist
from difftest.replay.replayer import Replayer
from difftest.spec.replies import Died, NotSent
from mutants import catalogue as cat
from mutants.workspace import prepare

pytestmark = [pytest.mark.servers, pytest.mark.build, pytest.mark.subprocess]

MUTANT = "native-complete-aborts-on-a-later-lease"  # abort() in COMPLETE when the token is above 1

HEADER = '{"format": "difftest-history", "version": 1, "start_ms": 1000}\n'
# the crash comes at step 5 of one pipelined segment: the server dies with the replies of steps 0-4
# unwritten, so the replay must find the step again one round trip at a time
CRASHING = HEADER + "\n".join([
    '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}',
    '{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}',
    '{"op": "call", "verb": "FAIL", "queue": "q", "args": ["j1", 1, "e", 5, 0]}',
    '{"op": "call", "verb": "PROMOTE", "queue": "q", "args": [10]}',
    '{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]}',
    '{"op": "call", "verb": "COMPLETE", "queue": "q", "args": ["j1", 2]}',
    '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}',
])  # fmt: skip
HARMLESS = HEADER + '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}\n'


@pytest.fixture(scope="module")
def crashing_replayer() -> Iterator[Replayer]:
    mutant = {m.id: m for m in cat.load()}[MUTANT]
    workspace = prepare("native", cat.EXECUTOR_DIRS["native"], mutant.patch)
    assert workspace.artifact is not None, workspace.unviable
    with Replayer(workspace.artifact) as replayer:
        yield replayer


@pytest.mark.timeout(900)  # a fresh cache first builds the module's dependencies (~2 min)
def test_a_crash_is_a_divergence_at_its_step(crashing_replayer: Replayer) -> None:
    result = crashing_replayer.replay(hist.loads(CRASHING))
    divergence = result.divergence
    assert divergence is not None and divergence.index == 5, divergence
    assert isinstance(divergence.native_reply, Died) and isinstance(divergence.lua_reply, NotSent)
    assert "native server died" in divergence.reason
    # the steps before it were compared as usual
    assert [r.verdict.ok for r in result.records] == [True] * 5 + [False]
    # the next history runs on a fresh server
    again = crashing_replayer.replay(hist.loads(HARMLESS))
    assert again.ok and again.records[0].native_reply == 1
