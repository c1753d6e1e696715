"""Counters at the edges production's counters cross (2^31, 2^32, 2^53, i64's end), left a few below
one by another writer and crossed by the history's own increments: drawn, labelled, in the class
corpus, and the catalogue's counter-edge mutant caught there."""

from __future__ import annotations

import pytest

from difftest.coverage.labels import COUNTER_LABELS, labels
from difftest.history.format import CallStep, History, RawWrite
from difftest.replay.replayer import Replayer
from difftest.spec import domains
from executors.native.adapter import DEFAULT_MODULE
from mutants import catalogue as cat
from mutants.workspace import prepare
from strategies.corpus import class_corpus
from strategies.machine import HistoryShape, machine_settings, run_machine

MUTANT = "native-counter-held-in-i32"


def counter_history() -> History:
    (history,) = [h for h in class_corpus(sizes=False) if h.note.endswith("counter:crosses:2^31")]
    return history


def test_an_edge_is_crossed_from_below_it_to_it_or_past_it() -> None:
    assert domains.crossed_edges(2**31 - 1, 2**31) == ["2^31"]
    assert domains.crossed_edges(2**31, 2**31 + 1) == []  # already past it
    assert domains.crossed_edges(2**31 - 3, 2**32 + 5) == ["2^31", "2^32"]
    assert domains.crossed_edges(2**53 - 1, 2**53) == ["2^53"]
    assert domains.crossed_edges(2**63 - 2, 2**63 - 1) == ["i64"]
    assert domains.crossed_edges(5, 5) == []
    assert domains.below_edge("2^32", 3) == b"4294967293"


@pytest.mark.servers
def test_the_counter_history_crosses_every_edge_and_both_executors_agree() -> None:
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(counter_history())
    assert result.ok, result.divergence
    reached = labels(result)
    assert [label for label in COUNTER_LABELS if not reached[label]] == []
    assert reached["counter:attempts:crosses:2^32"] == 1 and reached["counter:count:crosses:i64"] == 1


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.subprocess
def test_a_module_holding_counters_in_32_bits_diverges_where_the_history_crosses_2_31() -> None:
    mutant = {m.id: m for m in cat.load()}[MUTANT]
    assert mutant.defect_class == "counter-edge"
    workspace = prepare("native", cat.EXECUTOR_DIRS["native"], mutant.patch)
    assert workspace.artifact is not None, workspace.unviable
    history = counter_history()
    with Replayer(workspace.artifact) as replayer:
        result = replayer.replay(history)
    assert result.divergence is not None
    # the first call after metrics:completed was left at 2^31 - 1: its COMPLETE
    step = history.steps[result.divergence.index]
    previous = history.steps[result.divergence.index - 1]
    assert isinstance(step, CallStep) and step.call.verb == "COMPLETE"
    assert isinstance(previous, RawWrite) and previous.command[-1] == domains.below_edge("2^31", 1)


def test_the_generator_leaves_counters_a_few_below_each_edge() -> None:
    near = {domains.below_edge(edge, gap) for edge in domains.COUNTER_EDGES for gap in domains.COUNTER_EDGE_GAPS}
    left: set[tuple[bytes, bytes]] = set()

    def on_history(history: History) -> None:
        for step in history.steps:
            if isinstance(step, RawWrite) and step.command[0] == b"HSET" and step.command[-1] in near:
                left.add((step.command[2], step.command[-1]))

    run_machine(HistoryShape(), on_history, machine_settings(600, 40), seed=4242)
    fields = {field for field, _ in left}
    assert fields == {b"attempts", b"stalled", b"count"}
    edges = {edge for edge in domains.COUNTER_EDGES for _, value in left
             if int(value) in range(domains.COUNTER_EDGES[edge] - 3, domains.COUNTER_EDGES[edge])}  # fmt: skip
    assert edges == set(domains.COUNTER_EDGES)
    # a row's counters never left near i64's end (Lua number precision: only the metrics counts)
    assert all(int(v) < 2**53 for f, v in left if f != b"count")
