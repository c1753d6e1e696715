"""The catalogue's replication mutants need a restart to be seen (the servers reload their AOF) unless
each server has a replica: with replicas on and restarts off, every one of them is caught, as a
"propagation" divergence whose artifact `difftest replay` reproduces (it turns the replicas on, as
recorded); with neither, no history restarts, and what catches them is the histories that call a
replica (a production condition since issue 27), which start replicas for themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.cli.main import EXIT_DIVERGENCE, main
from difftest.history import format as hist
from difftest.history.format import REPLICA, CallStep, Restart
from difftest.replay.replicas import KIND
from mutants import catalogue as cat
from mutants import report
from mutants.run import EXIT_ALL_CAUGHT, EXIT_SOME_MISSED, RunConfig, run
from mutants.score import CAUGHT, Budget
from mutants.workspace import DEFAULT_CACHE, prepare

pytestmark = [pytest.mark.servers, pytest.mark.build, pytest.mark.subprocess]

REPLICATION = [m for m in cat.load() if m.defect_class.startswith("replication")]
SEED = 20261202
# with replicas a mutant is caught within the first dozen histories (1, 9 and 6 when this was
# written); the budget leaves room for a generator that reaches COMPLETE's success later
CAUGHT_WITHIN = 600
MISSED_IN = 150


def _budget(replicas: bool, examples: int) -> Budget:
    return Budget(
        seed=SEED, examples=examples, timeout_s=900.0, shrink_s=2.0, restarts=False, replicas=replicas, sizes=False
    )


@pytest.mark.timeout(1200)  # a fresh cache first builds the module's dependencies (~2 min)
def test_replication_mutants_are_caught_without_restarts_when_replicas_are_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert {m.id for m in REPLICATION} >= {
        "native-writes-not-replicated", "native-complete-not-replicated", "native-replicated-verbatim",
    }  # fmt: skip
    assert all("restarts" in m.needs for m in REPLICATION)  # what they need without replicas
    ids = [m.id for m in REPLICATION]

    code, outcomes = run(RunConfig(tmp_path / "on", _budget(True, CAUGHT_WITHIN), only=ids, jobs=2), say=lambda _: None)
    by_id = {o.id: o for o in outcomes}
    # the null run agrees with replicas on too: a replica of a healthy pair never differs
    assert by_id["null-run"].status == report.CLEAN and by_id["canary-lua-enqueue-replies-two"].status == CAUGHT
    for mutant in REPLICATION:
        outcome = by_id[mutant.id]
        assert outcome.status == CAUGHT, (mutant.id, outcome.reason)
        assert outcome.reason.startswith(f"{KIND}: the native server's replica differs"), outcome.reason
        assert not outcome.restarts
        # the artifact reproduces on the mutant's own module, the replicas turned on as recorded
        module = prepare("native", mutant.source_dir, mutant.patch, DEFAULT_CACHE).artifact
        assert module is not None
        artifact = tmp_path / "on" / outcome.artifact
        expect = json.loads((artifact / "history.jsonl").read_text().splitlines()[0])["expect"]
        assert expect["kind"] == KIND and expect["replicas"] is True
        capsys.readouterr()
        replayed = main(["replay", str(artifact), "--module", str(module), "--reports", str(tmp_path / "replays")])
        out = capsys.readouterr().out
        assert replayed == EXIT_DIVERGENCE and "reproduced: yes, the same step and reason" in out, out
        assert "PROPAGATION DIVERGENCE" in (artifact / "report.txt").read_text()
    assert code == EXIT_ALL_CAUGHT
    document = json.loads((tmp_path / "on" / report.OUTCOMES).read_text())
    assert document["budget"]["replicas"] is True and document["budget"]["restarts"] is False

    # neither --replicas nor restarts: only the histories that call a replica start replicas, and
    # each mutant caught is caught there, never by a restart
    code, outcomes = run(RunConfig(tmp_path / "off", _budget(False, MISSED_IN), only=ids, jobs=2), say=lambda _: None)
    by_id = {o.id: o for o in outcomes}
    caught = [by_id[m.id] for m in REPLICATION if by_id[m.id].status == CAUGHT]
    assert caught, {m.id: by_id[m.id].status for m in REPLICATION}
    for outcome in caught:
        minimal = hist.load(tmp_path / "off" / outcome.artifact / "history.jsonl")
        assert not any(isinstance(step, Restart) for step in minimal.steps), hist.dumps(minimal)
        if outcome.reason.startswith(KIND):  # seen by a replica: one the history called (the shrink's
            # time cap can end on another effect of the defect, so the kind is asked first)
            assert any(isinstance(step, CallStep) and step.target == REPLICA for step in minimal.steps), outcome.id
    assert code == (EXIT_ALL_CAUGHT if len(caught) == len(REPLICATION) else EXIT_SOME_MISSED)
