"""Tracked walks in the replay: the same verdicts as whole walks, and a write no event announced caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.campaign.driver import CampaignConfig, run_campaign
from difftest.history import format as hist
from difftest.judge import accounting, invariants
from difftest.replay.replayer import TRACKED, UNANNOUNCED, WHOLE, WHOLE_AGAIN, Replayer, ReplayResult
from difftest.servers import walker
from difftest.servers.wire import Wire
from difftest.spec.replies import Simple
from executors.native.adapter import DEFAULT_MODULE
from strategies import corpus

pytestmark = pytest.mark.servers


def _filled(jobs: int) -> list[hist.Step]:
    return [hist.call_step("ENQUEUE", "q", f"j{i}", "payload", 0) for i in range(jobs)]


def _whole_and_tracked(
    monkeypatch: pytest.MonkeyPatch, history: hist.History, track_from: str
) -> tuple[ReplayResult, ReplayResult]:
    """The history replayed over whole walks, then over tracked ones past `track_from` keys: both agree,
    each walked as asked and never judged again whole, with the same records step for step."""
    results = {}
    for choice in ("whole", "module"):
        monkeypatch.setenv(walker.CHOICE_VARIABLE, choice)
        monkeypatch.setenv(walker.TRACK_FROM_VARIABLE, track_from)
        with Replayer(DEFAULT_MODULE) as replayer:
            results[choice] = replayer.replay(history)
            assert not replayer.whole_again
    whole, tracked = results["whole"], results["module"]
    assert whole.ok and tracked.ok
    assert (whole.walks, tracked.walks) == (WHOLE, TRACKED)
    assert [(r.index, r.verdict, r.lua_reply, r.native_reply) for r in tracked.records] == [
        (r.index, r.verdict, r.lua_reply, r.native_reply) for r in whole.records
    ]
    return whole, tracked


def test_a_history_over_tracked_walks_is_judged_as_over_whole_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past TRACK_FROM keys a step's walk answers only what it wrote, proven at the history's end;
    the records are those of whole walks, step for step."""
    steps = [*_filled(40), hist.call_step("CLAIM", "q", 1000), hist.Advance(2000),
             hist.call_step("SWEEP", "q", 3, 10), hist.call_step("PAUSE", "q")]  # fmt: skip
    whole, tracked = _whole_and_tracked(monkeypatch, hist.History(tuple(steps)), track_from="8")
    assert [o.native_after for o in tracked.observations] == [o.native_after for o in whole.observations]


class _Planting(Replayer):
    """A replayer whose native server takes one write no keyspace event announces (a module's
    low-level write: DIFFTEST.PLANT) right after the history's clock advance."""

    def __init__(self) -> None:
        super().__init__(DEFAULT_MODULE)
        wire = Wire(self.native_server.address)
        wire.call(b"MODULE", b"UNLOAD", b"difftestwalk")
        assert wire.call(b"MODULE", b"LOAD", str(walker.walker_module()).encode(), b"plant") == Simple(b"OK")
        wire.close()

    def _boundary(self, step: object, mark: float) -> float:
        mark = super()._boundary(step, mark)  # type: ignore[arg-type]
        if isinstance(getattr(step, "step", None), hist.Advance):
            wire = Wire(self.native_server.address)
            wire.call(b"DIFFTEST.PLANT", b"emq:{q}:job:j3", b"payload", b"planted")
            wire.close()
        return mark


def test_a_write_no_event_announced_is_caught_and_judged_over_whole_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write the tracked walks cannot see is found by the verification at the segment's end, and
    the history is judged again over whole walks, which see it at the step it happened: a divergence
    there, not an agreement."""
    monkeypatch.setenv(walker.TRACK_FROM_VARIABLE, "0")
    steps = [*_filled(5), hist.Advance(10), hist.call_step("PAUSE", "q"), hist.call_step("ENQUEUE", "q", "j9", "x", 0)]
    with _Planting() as replayer:
        result = replayer.replay(hist.History(tuple(steps)))
        assert result.walks.startswith(f"{WHOLE_AGAIN}: {UNANNOUNCED}: 1 key(s) of the native server")
        assert b"emq:{q}:job:j3" in result.walks.encode()
        assert result.divergence is not None and result.divergence.index == 5  # the advance's step
        assert result.divergence.native_after[b"emq:{q}:job:j3"].value[b"payload"] == b"planted"  # type: ignore[index]
        assert replayer.whole_again[UNANNOUNCED] == 1


@pytest.mark.parametrize("seed", [31, 32])
def test_a_campaign_over_tracked_walks_reaches_what_one_over_whole_walks_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Every walk tracked (from 0 keys) and every check of the invariants and the accounting a short
    one (from 0 jobs): the same histories, the same steps compared, the same coverage labels and no
    divergence, as with a whole walk after every step and full checks."""
    reached = {}
    # the class corpus's size history at a tenth of its size: full checks after each of its calls
    # (the reference here) cost in the square of its 10,000-job fill
    for name, tenth in (("SIZE_FILL", 1_000), ("SIZE_BATCH", 200), ("SIZE_CLAIMS", 150)):
        monkeypatch.setattr(corpus, name, tenth)
    for choice, short_from in (("whole", 10**9), ("module", 0)):
        monkeypatch.setenv(walker.CHOICE_VARIABLE, choice)
        monkeypatch.setenv(walker.TRACK_FROM_VARIABLE, "0")
        monkeypatch.setattr(invariants, "FULL_CHECK_BELOW", short_from)
        monkeypatch.setattr(accounting, "FULL_CHECK_BELOW", short_from)
        # generated histories not at production's size: a sized one's fill of up to 8,192 jobs under a
        # full check after every call is the square again (the corpus's size history stands for them)
        config = CampaignConfig(seed, module=DEFAULT_MODULE, reports=tmp_path / choice, examples=150, workers=1,
                                sizes=False)  # fmt: skip
        result = run_campaign(config)
        assert not result.failures
        reached[choice] = (result.histories, result.steps, dict(result.labels))
    assert reached["module"] == reached["whole"]


# a producer's bulk stuck on a wrong-typed pending set: each ENQUEUE's script writes the row, then meets
# the set (D3, the Lua side re-synced at every call), the last at the segment's last step
STUCK = hist.loads(
    """{"format": "difftest-history", "version": 1, "start_ms": 1000}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0]}
{"op": "raw", "command": ["SET", "emq:{q}:pending", "junk"]}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}
{"op": "bulk", "count": 40, "verb": "ENQUEUE", "queue": "q", "args": ["f", "p", 0]}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j5", "p", 0]}
"""
)


def test_re_syncs_at_every_step_keep_the_walks_tracked_and_the_verdicts_of_whole_walks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A re-sync's own writes are reported by a Lua walk right after it, so the walks stay tracked
    (VERIFY at the segment's end once named the last re-sync's row as a write no event announced,
    and the history was judged again whole); the later steps run again in windows, not all at once."""
    whole, tracked = _whole_and_tracked(monkeypatch, STUCK, track_from="0")
    assert [r.verdict.rule for r in tracked.records] == [None, None] + ["D3"] * 42
    assert [o.lua_after for o in tracked.observations] == [o.lua_after for o in whole.observations]
