"""The replayer remembers the server's ACL DRYRUN answers across histories, up to ACL_ANSWERS_KEPT,
then forgets them all at once: a step whose keys were partly remembered when the answers were
forgotten is asked again whole (a long campaign of sized histories met a KeyError there)."""

from __future__ import annotations

import pytest

from difftest.history import format as hist
from difftest.replay import replayer as replayer_module
from difftest.replay.replayer import Replayer
from executors.native.adapter import DEFAULT_MODULE

pytestmark = pytest.mark.servers

# a worker whose rules reach the whole queue: its second ENQUEUE derives the keys of the first (known)
# and a row of its own (not known yet)
HISTORY = """{"format": "difftest-history", "version": 1, "start_ms": 1000, "users": {"w": ["~emq:{q}:*"]}}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0], "user": "w"}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0], "user": "w"}
{"op": "call", "verb": "CLAIM", "queue": "q", "args": [100], "user": "w"}
"""


def test_answers_forgotten_mid_history_are_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replayer_module, "ACL_ANSWERS_KEPT", 2)
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(hist.loads(HISTORY))
        assert result.ok, result.divergence
        assert [r.native_reply for r in result.records] == [1, 1, [b"j1", b"p", 1]]
        assert 0 < len(replayer._acl) < 20  # forgotten at least once: three steps' keys are more
