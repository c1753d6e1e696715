"""The docker backend: images built here FROM scratch, containers with data kept across restart and
kill, the shared frozen clock, the engine's histories judged as on the local backend, cleanup."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import valkey

from difftest.base.problems import SetupProblem
from difftest.campaign.driver import CampaignConfig, run_campaign
from difftest.coverage.labels import REQUIRED, labels
from difftest.history import format as hist
from difftest.replay.replayer import Replayer
from difftest.servers.docker import GROUP_LABEL, OWNER_LABEL, docker_client
from difftest.servers.group import ServerGroup
from difftest.servers.images import LABEL, image_tag
from executors.native.adapter import DEFAULT_MODULE
from strategies.corpus import class_corpus
from tests.test_engine_histories import EXPECTED_RULES, HISTORIES

pytestmark = pytest.mark.docker
# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"replayer": ("servers",)}


def _ours(group: ServerGroup | None = None) -> list[object]:
    """This process's containers, or one group's."""
    label = f"{GROUP_LABEL}={group.root.name}" if group else f"{OWNER_LABEL}={os.getpid()}"
    return docker_client().containers.list(all=True, ignore_removed=True, filters={"label": label})


@pytest.fixture(scope="module")
def replayer() -> Iterator[Replayer]:
    with Replayer(DEFAULT_MODULE, backend="docker") as engine:
        yield engine
    assert _ours() == []  # the replayer's containers are gone


@pytest.mark.parametrize("name", sorted(EXPECTED_RULES))
def test_histories_judge_the_same_on_containers(replayer: Replayer, name: str) -> None:
    result = replayer.replay(hist.load(HISTORIES / name))
    assert result.divergence is None, result.divergence and result.divergence.reason
    assert dict(result.rules_hit) == EXPECTED_RULES[name]


def test_histories_that_call_a_replica_judge_the_same_on_containers(replayer: Replayer) -> None:
    """The class corpus's histories that call a replica (a replica container beside each server,
    in its network namespace) reach on containers what they reach on embedded servers."""

    def calls_a_replica(history: hist.History) -> bool:
        return any(isinstance(step, hist.CallStep | hist.Multi) and step.target for step in history.steps)

    calling = [history for history in class_corpus() if calls_a_replica(history)]
    assert len(calling) > 10
    reached: set[str] = set()
    with Replayer(DEFAULT_MODULE) as local:
        for history in calling:
            on_containers, embedded = replayer.replay(history), local.replay(history)
            assert on_containers.divergence is None, (history.note, on_containers.divergence.reason)
            assert labels(on_containers) == labels(embedded), history.note
            reached |= set(labels(on_containers))
    assert {label for label in REQUIRED if label.startswith("condition:replica")} <= reached


@pytest.mark.servers
def test_the_image_is_from_scratch_and_labelled() -> None:
    client = docker_client()
    with ServerGroup(backend="docker") as group:
        group.add("lua")
        image = client.images.get(image_tag(None))
        assert image.labels.get(LABEL) == "1"
        assert len(image.attrs["RootFS"]["Layers"]) == 1  # one COPY on top of nothing
        assert image.attrs["Config"]["Entrypoint"] == ["/usr/local/bin/valkey-server"]


@pytest.mark.servers
def test_restart_and_crash_keep_data_and_the_frozen_clock() -> None:
    with ServerGroup(backend="docker") as group:
        server = group.add("native", module=DEFAULT_MODULE)
        group.advance(42)
        server.client.hset("h", "f", "v")
        first = server.run_id
        server.crash()
        assert server.client.hgetall("h") == {b"f": b"v"}
        assert server.run_id != first
        second = server.run_id
        server.restart()
        assert server.client.hgetall("h") == {b"f": b"v"} and server.run_id != second
        assert server.time_ms() == group.clock.now_ms
        assert len(_ours(group)) == 1
    assert _ours(group) == []


@pytest.mark.servers
def test_a_group_restart_is_a_new_server_in_the_same_container() -> None:
    """The init (PID 1) restarts the server inside its container: a new process (a new run_id) on
    the same data, SHUTDOWN for a restart and SIGKILL for a crash (the server says goodbye only to
    the first), and the container itself never restarts."""
    with ServerGroup(backend="docker") as group:
        server = group.add("native", module=DEFAULT_MODULE)
        assert server._with_init, "a C compiler builds the init here"
        server._container.reload()
        container = server._container.id
        started_at = server._container.attrs["State"]["StartedAt"]
        server.client.hset("h", "f", "v")
        goodbyes = server.logfile.read_text().count("bye bye")
        for crash, said_goodbye in ((False, 1), (True, 0), (False, 1)):
            before = server.run_id
            group.restart_all(crash=crash)
            assert server.client.hgetall("h") == {b"f": b"v"}
            assert server.run_id != before
            assert server.time_ms() == group.clock.now_ms
            now = server.logfile.read_text().count("bye bye")
            assert now - goodbyes == said_goodbye
            goodbyes = now
        server._container.reload()
        assert server._container.id == container
        assert server._container.attrs["State"]["StartedAt"] == started_at
        with pytest.raises(valkey.ConnectionError):  # the server closes the connection as it exits
            server.client.execute_command("SHUTDOWN")  # unannounced: the container ends with it
        server._container.wait(timeout=30)
        assert not server.running
    assert _ours(group) == []


def test_no_engine_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(SetupProblem, match="no Docker engine answers") as problem:
        ServerGroup(backend="docker")
    assert "\n" not in str(problem.value)


@pytest.mark.servers
def test_a_campaign_runs_on_containers(tmp_path: Path) -> None:
    before = {c.id for c in _ours()}  # type: ignore[attr-defined]
    result = run_campaign(
        CampaignConfig(
            seed=3,
            module=DEFAULT_MODULE,
            reports=tmp_path,
            examples=15,
            workers=1,
            pin=False,
            backend="docker",
            corpus=False,  # generated histories only: the corpus's 305 are the parity suite's business
        )
    )
    assert result.failures == [] and result.histories == 15
    assert {c.id for c in _ours()} == before  # type: ignore[attr-defined]  # its pair is gone
