"""A mutant only a restart or crash exposes: missed when the campaign's histories can neither
restart nor crash the servers, caught when they can; and the report tells the two runs apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mutants import catalogue as cat
from mutants import report
from mutants.run import EXIT_ALL_CAUGHT, EXIT_SOME_MISSED, run
from mutants.score import CAUGHT, MISSED, Budget

# writes not propagated to the AOF: invisible until the servers reload it (restart or crash);
# with restarts on it is caught within the first dozen histories of this seed (~10 s here)
MUTANT = "native-writes-not-replicated"


@pytest.mark.timeout(900)  # a fresh cache first builds the module's dependencies (~2 min)
def test_a_restart_mutant_is_missed_without_restarts_and_caught_with_them(tmp_path: Path) -> None:
    assert "restarts" in {m.id: m for m in cat.load()}[MUTANT].needs
    verdicts = {}
    for restarts in (False, True):
        budget = Budget(seed=20261202, examples=150, timeout_s=120.0, shrink_s=2.0, restarts=restarts)
        directory = tmp_path / ("on" if restarts else "off")
        code, outcomes = run(directory, budget, only=[MUTANT], say=lambda _: None, jobs=2)
        by_id = {o.id: o for o in outcomes}
        assert by_id["null-run"].status == MISSED and by_id["canary-lua-enqueue-replies-two"].status == CAUGHT
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
            assert outcome.histories == 150  # the whole budget, no divergence
    assert verdicts == {False: (MISSED, EXIT_SOME_MISSED), True: (CAUGHT, EXIT_ALL_CAUGHT)}
