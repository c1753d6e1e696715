"""A mutant a restart or crash exposes: caught when the campaign's histories can restart and crash
the servers; without them no history restarts, and since the production conditions (issue 27) the
histories that call a replica expose it too; the report tells the two runs apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.history import format as hist
from difftest.history.format import REPLICA, CallStep, Restart
from difftest.replay.replicas import KIND
from mutants import catalogue as cat
from mutants import report
from mutants.run import EXIT_ALL_CAUGHT, RunConfig, run
from mutants.score import CAUGHT, Budget

pytestmark = [pytest.mark.servers, pytest.mark.build, pytest.mark.subprocess]

# writes not propagated to the AOF: invisible until the servers reload it (restart or crash);
# with restarts on it is caught within the first dozen histories of this seed (~10 s here)
MUTANT = "native-writes-not-replicated"


@pytest.mark.timeout(900)  # a fresh cache first builds the module's dependencies (~2 min)
def test_a_restart_mutant_is_missed_without_restarts_and_caught_with_them(tmp_path: Path) -> None:
    assert "restarts" in {m.id: m for m in cat.load()}[MUTANT].needs
    verdicts = {}
    for restarts in (False, True):
        budget = Budget(seed=20261202, examples=150, timeout_s=600.0, shrink_s=2.0, restarts=restarts, sizes=False)
        directory = tmp_path / ("on" if restarts else "off")
        code, outcomes = run(RunConfig(directory, budget, only=[MUTANT], jobs=2), say=lambda _: None)
        by_id = {o.id: o for o in outcomes}
        assert by_id["null-run"].status == report.CLEAN and by_id["canary-lua-enqueue-replies-two"].status == CAUGHT
        outcome = by_id[MUTANT]
        assert outcome.restarts is restarts  # the record says under which campaign it was scored
        verdicts[restarts] = outcome.status, code
        # the report says it too: the budget in the JSON, the run and each row on the page
        document = json.loads((directory / report.OUTCOMES).read_text())
        assert document["budget"]["restarts"] is restarts
        assert {r["id"]: r["restarts"] for r in document["outcomes"]}[MUTANT] is restarts
        page = (directory / report.HTML).read_text()
        assert ("restarts and crashes</dt><dd>on" in page) is restarts
        assert ("restarts and crashes</dt><dd>off (no restarts, no crashes)" in page) is not restarts
        if not restarts:
            # writes kept from the AOF are kept from a replica's stream too: a history that calls a
            # replica shows it with no restart (the switch is honoured: none restarts or crashes);
            # the shrink's time cap can end on another of its effects, so the kind is asked first
            assert outcome.status == CAUGHT, outcome.reason
            minimal = hist.load(directory / outcome.artifact / "history.jsonl")
            assert not any(isinstance(step, Restart) for step in minimal.steps), hist.dumps(minimal)
            if outcome.reason.startswith(KIND):  # seen by a replica: one the history called
                assert any(isinstance(step, CallStep) and step.target == REPLICA for step in minimal.steps)
    assert verdicts == {False: (CAUGHT, EXIT_ALL_CAUGHT), True: (CAUGHT, EXIT_ALL_CAUGHT)}
