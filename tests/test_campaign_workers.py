"""Several workers and a divergence on real servers: the first divergence stops the others between
batches (asked, not killed), so the campaign ends, is not taken for interrupted, and keeps every
worker's report."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.campaign.driver import CampaignConfig, run_campaign
from difftest.report import reports
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import planted_scripts

pytestmark = pytest.mark.servers


def test_two_workers_stop_together_at_the_first_divergence(tmp_path: Path) -> None:
    planted = planted_scripts(tmp_path, "fail.lua", "if exhausted then", "if false then")  # FAIL never dead-letters
    config = CampaignConfig(seed=1, module=DEFAULT_MODULE, reports=tmp_path / "run", examples=400, workers=2,
                            pin=False, lua_scripts=planted, shrink_tries=30, sizes=False)  # fmt: skip
    result = run_campaign(config)
    assert not result.interrupted
    assert result.failures, "the planted defect was not found"
    assert sorted(r.worker for r in result.reports) == [0, 1]  # neither worker's report lost
    assert result.histories < 400  # stopped early, not run to the end of the budget
    summary = reports.summary(result)
    assert summary["verdict"] == "divergence"
    assert {d["batch"] for d in summary["divergences"]} <= {b["batch"] for b in summary["batches"] if b["diverged"]}
