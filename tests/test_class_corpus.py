"""The classes where defects hid (issue 18): labels derived from the table, and a corpus that meets each."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.campaign.driver import CampaignConfig, run_campaign
from difftest.coverage.labels import CLASS_LABELS, REQUIRED, labels
from difftest.replay.replayer import Replayer
from difftest.spec import domains
from difftest.spec.commands import TRANSITIONS, ArgKind
from executors.native.adapter import DEFAULT_MODULE
from strategies.corpus import CORPUS_NOTE, class_corpus
from strategies.pools import USERS

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"replayer": ("servers",)}


def test_the_labels_follow_the_command_table() -> None:
    # every integer argument of every transition has its four bounds; nothing else does
    ints = {(v, a.name) for v, t in TRANSITIONS.items() for a in t.args if a.kind is ArgKind.INT}
    bounds = {tuple(label.split(":")[1:3]) for label in CLASS_LABELS if label.startswith("bound:")}
    assert bounds == ints
    # every key a transition writes, derived keys included, has its wrong-type label
    assert "wrongtype:COMPLETE:metrics:completed" in CLASS_LABELS
    assert "wrongtype:CLAIM:meta" not in CLASS_LABELS  # CLAIM only reads meta
    # every permission on every key each transition reaches, the rows and metrics by name
    assert {"acl:SWEEP:job:*:write", "acl:FAIL:metrics:failed:read", "acl:PAUSE:meta:write"} <= set(CLASS_LABELS)
    assert all(label in REQUIRED for label in CLASS_LABELS)
    assert len(set(REQUIRED)) == len(REQUIRED)  # one label, one thing (JUnit names a case by it)


def test_the_bounds_are_the_tables_own() -> None:
    assert domains.bound_value("CLAIM", "lease_ms", "max") == str(2**52).encode()
    assert domains.bound_value("CLAIM", "lease_ms", "above-max") == str(2**52 + 1).encode()
    assert domains.bound_value("FAIL", "token", "below-min") == b"-1"
    assert domains.bound_value("SWEEP", "limit", "above-max") == str(2**63).encode()
    assert domains.bound_edge("SWEEP", "limit", b"1") == "min"
    assert domains.bound_edge("SWEEP", "limit", b"2") is None


def test_each_permission_user_is_restricted_on_one_key_kind() -> None:
    for kind in domains.KEY_KINDS:
        read_only = USERS[domains.acl_user(kind, "read")]
        assert sum(1 for rule in read_only if rule.startswith("%R~") and rule.endswith(kind)) == 2  # both queues
        assert not any(rule == f"~emq:{{q}}:{kind}" for rule in USERS[domains.acl_user(kind, "none")])


@pytest.fixture(scope="module")
def replayer() -> Iterator[Replayer]:
    with Replayer(DEFAULT_MODULE) as replaying:
        yield replaying


def test_each_corpus_history_meets_its_own_class_and_the_executors_agree(replayer: Replayer) -> None:
    reached: Counter[str] = Counter()
    for history in class_corpus():
        result = replayer.replay(history)
        assert result.divergence is None, (history.note, result.divergence)
        got = labels(result)
        label = history.note.removeprefix(CORPUS_NOTE).split(" ")[0]
        assert got[label] > 0, f"{history.note}: its label was not reached"
        reached.update(got)
    # the corpus alone reaches every required label, the classes and the rarer behaviours alike
    assert [label for label in REQUIRED if reached[label] == 0] == []


@pytest.mark.servers
def test_the_first_batch_replays_the_corpus_and_the_budget_counts_generated_histories(tmp_path: Path) -> None:
    # one generated history: the corpus still reaches every required label, whatever the seed
    config = CampaignConfig(seed=7, module=DEFAULT_MODULE, reports=tmp_path / "run", examples=1, workers=1,
                            pin=False, database=None)  # fmt: skip
    result = run_campaign(config)
    assert result.histories == 1 and not result.failures
    reached = result.labels
    assert [label for label in REQUIRED if reached[label] == 0] == []
