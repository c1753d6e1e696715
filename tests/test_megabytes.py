"""Payloads and error texts of a megabyte: drawn for single calls (never a bulk's), labelled, in the class
corpus, and judged alike on both executors (a CLAIM's reply carries the payload back)."""

from __future__ import annotations

import pytest

from difftest.coverage.labels import VALUE_SIZE_LABELS, labels
from difftest.history.format import CallStep, History
from difftest.replay.replayer import Replayer
from difftest.spec import domains
from executors.native.adapter import DEFAULT_MODULE
from strategies.corpus import class_corpus
from strategies.machine import HistoryShape, machine_settings, run_machine


@pytest.mark.servers
def test_the_corpus_history_sends_and_claims_a_megabyte_and_both_executors_agree() -> None:
    (history,) = [h for h in class_corpus(sizes=False) if h.note.endswith("size:value:payload:1MiB")]
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(history)
    assert result.ok, result.divergence
    claimed = result.records[-2].native_reply
    assert isinstance(claimed, list) and claimed[1] == domains.MEGABYTE == result.records[-2].lua_reply[1]  # type: ignore[index]
    reached = labels(result)
    assert [label for label in VALUE_SIZE_LABELS if not reached[label]] == []


def test_the_generator_draws_megabytes_for_single_calls_only() -> None:
    found: dict[str, int] = {"single": 0, "bulk": 0}

    def on_history(history: History) -> None:
        for step in history.steps:
            if isinstance(step, CallStep) and domains.MEGABYTE in step.call.rest:
                found["bulk" if step.bulk is not None else "single"] += 1

    run_machine(HistoryShape(), on_history, machine_settings(600, 40), seed=4244)
    assert found["single"] > 0 and found["bulk"] == 0
