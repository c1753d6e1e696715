"""Hypothesis's example database on a real Valkey server: a failure one campaign finds, the next replays first."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from difftest.campaign.driver import CampaignConfig, run_campaign
from difftest.campaign.exampledb import ENVIRONMENT, describe, is_server
from difftest.cli.main import EXIT_SETUP, main
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer, free_tcp_port
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import planted_scripts

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"database_server": ("servers",)}

PREFIX = b"hypothesis-example:"  # RedisExampleDatabase's default key prefix


@pytest.fixture
def database_server() -> Iterator[EmbeddedServer]:
    """A plain valkey-server on a TCP port, as a shared database would be (no module loaded)."""
    with ServerGroup() as group:
        yield group.add("examples", tcp_port=0)


def _any_queue(reason: str) -> str:
    return re.sub(r"emq:\{[a-z]\}", "emq:{queue}", reason)


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """executors/lua with COMPLETE counting two completions instead of one."""
    return planted_scripts(tmp_path, "complete.lua", "'count', 1)", "'count', 2)")


def campaign(tmp_path: Path, name: str, seed: int, scripts: Path, database: str | None) -> CampaignConfig:
    # without the class corpus: a failure it finds is an explicit example, which Hypothesis does not
    # store (the corpus replays first in every campaign anyway); this is about generated failures
    return CampaignConfig(seed=seed, module=DEFAULT_MODULE, reports=tmp_path / name, examples=200, workers=1,
                          pin=False, lua_scripts=scripts, database=database, shrink_tries=60,
                          corpus=False, sizes=False)  # fmt: skip


def test_a_failure_found_by_one_campaign_is_replayed_first_by_the_next(
    database_server: EmbeddedServer, planted: Path, tmp_path: Path
) -> None:
    port = database_server.tcp_port
    assert port is not None
    url = f"valkey://127.0.0.1:{port}/3"
    store = Redis(host="127.0.0.1", port=port, db=3)
    try:
        first = run_campaign(campaign(tmp_path, "first", 7, planted, url))
        # the planted double count, by whichever voter sees it first in this seed's histories (the pair's
        # keyspaces, or the model and the accounting where the scripts ran on both sides)
        assert len(first.failures) == 1 and "completed" in first.failures[0].reason + str(first.failures[0].detail)
        saved = list(store.scan_iter(match=PREFIX + b"*"))
        assert saved, "the failing example was not stored in the Valkey database"
        assert Redis(host="127.0.0.1", port=port, db=0).dbsize() == 0  # /3 chose the database

        # without the shared database, this seed needs several generated histories to hit the defect
        alone = run_campaign(campaign(tmp_path, "alone", 12345, planted, None))
        assert alone.failures and alone.histories > 1

        # with it, the very first history replayed is the stored failure, in the first batch
        again = run_campaign(campaign(tmp_path, "again", 12345, planted, url))
        assert len(again.failures) == 1
        assert again.failures[0].batch == 0 and again.histories == 1
        # the same defect at the same key of its queue (which of the two queues a shrink ends on
        # depends on how far it got: the stored example is shrunk again from where the first stopped)
        assert _any_queue(again.failures[0].reason) == _any_queue(first.failures[0].reason)
    finally:
        store.close()


@pytest.mark.servers
def test_a_database_server_that_does_not_answer_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"valkey://127.0.0.1:{free_tcp_port()}/0"  # nothing listens there
    reports = ["--reports", str(tmp_path / "r"), "--examples", "1", "--workers", "1"]
    assert main(["run", "--database", dead, *reports]) == EXIT_SETUP
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not answer" in err and dead in err
    # the environment variable names the same database when --database is not given
    monkeypatch.setenv(ENVIRONMENT, dead)
    assert main(["run", *reports]) == EXIT_SETUP
    assert dead in capsys.readouterr().err


def test_database_specs() -> None:
    assert is_server("valkey://db.example:6390/2") and is_server("redis://h:1")
    assert not is_server(".hypothesis/difftest-examples") and not is_server(Path("valkey://x"))
    assert describe("valkey://:secret@db.example:6390/2") == "valkey://db.example:6390/2"  # no password printed
    assert describe("valkey://db.example") == "valkey://db.example:6379"
