"""Campaigns on real servers: reproducible from a seed, coverage labelled, a planted defect found,
shrunk to a handful of steps, and replayed from both the artifact and Hypothesis's database."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.campaign.driver import CampaignConfig, batch_sizes, run_campaign
from difftest.cli.main import EXIT_DIVERGENCE, main
from difftest.history import format as hist
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import planted_scripts


def config(tmp_path: Path, **overrides: object) -> CampaignConfig:
    # without the class corpus unless a test asks: these tests are about what Hypothesis generates; and
    # without production's size (a sized history holds up to thousands of calls): about the campaign's mechanics
    settings: dict[str, object] = {"seed": 7, "module": DEFAULT_MODULE, "reports": tmp_path / "run", "examples": 30,
                                   "workers": 1, "pin": False, "corpus": False, "sizes": False}  # fmt: skip
    settings.update(overrides)
    return CampaignConfig(**settings)  # type: ignore[arg-type]


def test_batches_split_an_example_budget() -> None:
    assert batch_sizes(CampaignConfig(seed=1, module=Path(), reports=Path(), examples=90)) == [40, 40, 10]
    assert batch_sizes(CampaignConfig(seed=1, module=Path(), reports=Path(), examples=None, seconds=5)) is None


@pytest.mark.servers
def test_a_small_campaign_agrees_and_labels_what_it_reached(tmp_path: Path) -> None:
    result = run_campaign(config(tmp_path))
    assert result.failures == []
    assert result.histories == 30
    labels = result.labels
    assert labels["reply:ENQUEUE:added"] > 0 and labels["contract:N1"] > 0
    assert result.steps >= 30


@pytest.mark.servers
def test_the_same_seed_replays_the_same_campaign(tmp_path: Path) -> None:
    first = run_campaign(config(tmp_path, reports=tmp_path / "a"))
    second = run_campaign(config(tmp_path, reports=tmp_path / "b"))
    assert (first.histories, first.steps, first.labels) == (second.histories, second.steps, second.labels)
    other = run_campaign(config(tmp_path, reports=tmp_path / "c", seed=8))
    assert other.labels != first.labels


@pytest.mark.servers
def test_two_workers_share_the_budget(tmp_path: Path) -> None:
    result = run_campaign(config(tmp_path, examples=80, workers=2))
    assert sorted(r.worker for r in result.reports) == [0, 1]
    assert result.histories == 80 and not result.failures


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A copy of the scripts in which FAIL never dead-letters: it always retries."""
    return planted_scripts(tmp_path, "fail.lua", "if exhausted then", "if false then")


@pytest.mark.servers
def test_a_planted_defect_is_found_and_shrunk(
    planted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "examples"
    result = run_campaign(config(tmp_path, examples=400, lua_scripts=planted, database=database, shrink_tries=1200))
    assert len(result.failures) == 1
    failure = result.failures[0]
    artifact = Path(failure.artifact)
    minimal = hist.load(artifact / "history.jsonl")
    ops = [hist.step_to_json(s) for s in minimal.steps]
    verbs = [op["verb"] for op in ops if op["op"] in ("call", "begin")]
    # the least that shows it: enqueue, claim (whole or split), fail at the last attempt
    assert len(minimal.steps) <= 5, hist.dumps(minimal)
    assert verbs[-1] == "FAIL" and "CLAIM" in verbs and "ENQUEUE" in verbs
    # the artifact reproduces it
    code = main(["replay", str(artifact), "--lua-scripts", str(planted), "--reports", str(tmp_path / "r")])
    assert code == EXIT_DIVERGENCE
    assert "reproduced: yes" in capsys.readouterr().out
    # and Hypothesis's database replays it first next time, before generating anything new
    assert any(database.rglob("*"))
    again = run_campaign(config(tmp_path, reports=tmp_path / "again", examples=400, lua_scripts=planted,
                                database=database, seed=12345, shrink_tries=50))  # fmt: skip
    assert again.failures and again.histories <= 3


@pytest.mark.servers
def test_a_spent_shrink_budget_stops_at_once_and_keeps_the_smallest_failure(planted: Path, tmp_path: Path) -> None:
    # three replays of shrinking, then Hypothesis is stopped (hill-climbing or shrinking alike): the
    # campaign still reports the smallest failure it saw, the same one on every run of the seed
    runs = [
        run_campaign(config(tmp_path, reports=tmp_path / f"run-{n}", examples=400, lua_scripts=planted, shrink_tries=3))
        for n in (1, 2)
    ]
    minimal = []
    for result in runs:
        assert len(result.failures) == 1, result.failures
        history = hist.load(Path(result.failures[0].artifact) / "history.jsonl")
        assert [hist.step_to_json(s) for s in history.steps][-1]["verb"] == "FAIL"
        minimal.append(history)
    assert minimal[0] == minimal[1]
