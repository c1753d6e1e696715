"""`--replicas`: a replica beside each server, compared with it after every segment.

The verdict is a pure comparison of two snapshots (no server); the replicas themselves are real
embedded servers: every hand-written history and the scenario agree with them on, restarts and
crashes included; a replica that does not hold its primary's keyspace (here: made writable and
written behind its primary's back) is named with the key and field; and a campaign records the
setting in its summary, its reproduce line and its page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.cli.main import EXIT_OK, EXIT_SETUP, main
from difftest.history import format as hist
from difftest.history.scenario import SCENARIO
from difftest.replay.build import command
from difftest.replay.replayer import Replayer
from difftest.replay.replicas import KIND, Replicas, primary_options, propagation_problem
from difftest.report import html as html_report
from difftest.servers.group import ServerGroup
from difftest.spec.snapshot import Entry
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import Q

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"any_group": ("servers",)}

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.jsonl"))
ROW = (Q + "job:j1").encode()
EPOCH_DIFFERS = f"{KIND}: the native server's replica differs from its primary: {Q}job:j1 (fields lease_epoch differ)"


def _row(**fields: bytes) -> Entry:
    return Entry("hash", {name.encode(): value for name, value in fields.items()}, -1)


def test_the_verdict_is_a_pure_comparison_that_names_keys_and_fields_not_values() -> None:
    pending = Entry("zset", {b"j1": b"1000", b"j2": b"1001"}, -1)
    primary = {ROW: _row(state=b"active", lease_epoch=b"R1"), b"emq:{q}:pending": pending}
    assert propagation_problem("native", primary, dict(primary)) is None
    assert propagation_problem("native", {}, {}) is None

    epoch = propagation_problem("native", primary, {**primary, ROW: _row(state=b"active", lease_epoch=b"R2")})
    assert epoch == EPOCH_DIFFERS
    assert "R1" not in epoch and "R2" not in epoch  # a replica's own run_id never makes the reason vary

    lost = propagation_problem("lua", primary, {ROW: primary[ROW]})
    assert lost == f"{KIND}: the lua server's replica differs from its primary: {Q}pending (missing on the replica)"
    behind = propagation_problem("native", primary, {**primary, b"emq:{q}:pending": Entry("zset", {b"j1": b"1"}, -1)})
    assert behind is not None and "members j2 missing on the replica, members j1 differ" in behind
    kinds = propagation_problem("native", primary, {**primary, ROW: Entry("string", b"x", -1)})
    assert kinds is not None and "a hash on the primary, a string on the replica" in kinds
    extra = {**primary, **{f"k{n}".encode(): Entry("string", b"v", -1) for n in range(6)}}
    many = propagation_problem("native", primary, extra)
    assert many is not None and many.endswith("; and 2 more key(s)") and "(only on the replica)" in many


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def any_group(request: pytest.FixtureRequest) -> Iterator[ServerGroup]:
    """A group of embedded servers, and one of containers (whose replicas join their primary's
    network namespace: a container has no other network)."""
    with ServerGroup(backend=request.param) as servers:
        yield servers


def test_a_replica_written_behind_its_primarys_back_is_named(any_group: ServerGroup) -> None:
    group = any_group
    lua = group.add("lua", **primary_options())
    native = group.add("native", module=DEFAULT_MODULE, **primary_options())
    replicas = Replicas(group, [("lua", lua), ("native", native)])
    try:
        native.client.hset(ROW, mapping={"state": "active", "lease_epoch": native.run_id})
        lua.client.zadd(Q + "pending", {"j1": 1000})
        assert replicas.check() is None  # both caught up: equal, lease_epoch included
        replica = replicas.pairs[1].replica
        replica.client.config_set("replica-read-only", "no")
        replica.client.hset(Q + "job:j1", "lease_epoch", "not-the-primary's")
        found = replicas.check()
        assert found is not None and found.side == "native"
        assert found.reason == EPOCH_DIFFERS
        row = found.primary[ROW].value
        assert isinstance(row, dict) and row[b"lease_epoch"] == native.run_id.encode()
        # a restart of the primary: a fresh replica follows the new start, equal again
        before = replica.run_id
        group.restart_all(crash=True)
        assert replicas.check() is None and replica.run_id != before
        if group.backend == "docker":  # the replica's container is in its primary's namespace, no other
            for pair in replicas.pairs:
                pair.replica._container.reload()
                pair.primary._container.reload()
                assert pair.primary._container.attrs["HostConfig"]["NetworkMode"] == "none"
                mode = pair.replica._container.attrs["HostConfig"]["NetworkMode"]
                assert mode == f"container:{pair.primary._container.id}"
    finally:
        replicas.close()
    assert not any(pair.replica.running for pair in replicas.pairs)
    if group.backend == "docker":  # the replicas' containers are removed with them
        assert all(pair.replica._container is None for pair in replicas.pairs)


@pytest.mark.servers
@pytest.mark.timeout(300)
def test_every_hand_history_and_the_scenario_agree_with_a_replica_beside_each_server() -> None:
    with Replayer(DEFAULT_MODULE, replicas=True) as replayer:
        assert replayer.replicas is not None
        pids = {pair.side: pair.replica.pid for pair in replayer.replicas.pairs}
        for history in [*(hist.load(path) for path in HISTORIES), SCENARIO]:
            result = replayer.replay(history)
            assert result.divergence is None, (history.note, result.divergence and result.divergence.reason)
            assert result.replicas
        assert replayer.stages["replicas"] > 0  # the checks ran
        # the restarts and crashes among them (of the native server alone) each had a fresh replica
        # follow the new start; the Lua server, never restarted, kept its replica
        fresh = {pair.side: pair.replica.pid != pids[pair.side] for pair in replayer.replicas.pairs}
        assert fresh == {"native": True, "lua": False}
        servers = replayer.replicas.servers
    assert not any(server.running for server in servers)


def test_an_attached_pair_gets_no_replicas(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["run", "--replicas", "--attach", "nosuch", "--examples", "1", "--reports", str(tmp_path)])
    assert code == EXIT_SETUP
    err = capsys.readouterr().err
    assert "an attached pair is not ours" in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # refused before a run directory was made


@pytest.mark.servers
@pytest.mark.timeout(300)
def test_a_campaign_with_replicas_records_them(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["run", "--replicas", "--examples", "40", "--seed", "5", "--workers", "1", "--no-database",
                 "--reports", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    (run,) = tmp_path.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["replicas"] is True and summary["histories"] >= 40 and not summary["divergences"]
    assert html_report.reproduce_command(summary).endswith("--replicas")
    expected = command("run", "--seed", "5", "--examples", "40", "--workers", "1", "--no-database", "--replicas")
    assert f"reproduce: {expected}" in out
    assert "each server's replica compared with it after every segment" in (run / "report.html").read_text()


def test_a_native_replica_that_dies_is_a_finding_and_is_replaced(
    group: ServerGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    lua = group.add("lua", **primary_options())
    native = group.add("native", module=DEFAULT_MODULE, **primary_options())
    replicas = Replicas(group, [("lua", lua), ("native", native)])
    try:
        assert replicas.check() is None
        lua_replica, native_replica = (pair.replica for pair in replicas.pairs)
        # a replica that dies between two checks (as if of what its primary sent it): not replaced
        # before it is waited on, which is where the check meets its death
        monkeypatch.setattr(type(replicas.pairs[0]), "stale", lambda pair: False)
        native_replica.kill()
        found = replicas.check()
        assert found is not None and found.side == "native" and "replica died" in found.reason
        lua_replica.kill()
        with pytest.raises(RuntimeError, match="lua-replica"):  # the reference's replica: the harness's fault
            replicas.check()
        monkeypatch.undo()
        assert replicas.check() is None  # fresh replicas follow again
        assert lua_replica.running and native_replica.running
    finally:
        replicas.close()
