"""The parity campaign as plain pytest tests: shards that `pytest -n auto` spreads over cores, each
xdist worker with its own server pair. DIFFTEST_CAMPAIGN_EXAMPLES scales it (default: a short run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from difftest.campaign.driver import CampaignConfig, run_campaign
from difftest.cli.preflight import campaign_examples
from executors.native.adapter import DEFAULT_MODULE

pytestmark = pytest.mark.servers

SHARDS = 4
EXAMPLES = campaign_examples(os.environ)  # checked (one line) by conftest.py before any test starts
SEED = int(os.environ.get("DIFFTEST_CAMPAIGN_SEED", "20261202"))


@pytest.mark.parametrize("shard", range(SHARDS))
def test_parity_shard(shard: int, tmp_path: Path) -> None:
    result = run_campaign(
        CampaignConfig(
            seed=SEED + shard, module=DEFAULT_MODULE, reports=tmp_path, examples=EXAMPLES, workers=1, pin=False
        )
    )
    failures = [f"{f.reason} (artifact {f.artifact})" for f in result.failures]
    assert not failures, failures
    assert result.histories == EXAMPLES
