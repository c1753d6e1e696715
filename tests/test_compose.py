"""The compose pair (docker-compose.yml): brought up and down by difftest, replayed on with --attach
(restarts and crashes of the servers inside their containers, data kept, the frozen clock shared), one
clear error when it cannot be, and nothing of a project left after it is taken down."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import valkey

from difftest.base.problems import SetupProblem
from difftest.cli.main import main
from difftest.history import format as hist
from difftest.replay.replayer import Replayer
from difftest.servers import compose
from difftest.servers.clock import CLOCK_FILE
from difftest.servers.compose import (
    COMPOSE_SERVICE_LABEL,
    DEFAULT_CLOCK_DIR,
    PairSettings,
    attach_backend,
    attached_project,
    choose_project,
    settings_from,
)
from difftest.servers.docker import docker_client
from difftest.servers.group import ServerGroup
from difftest.servers.local import free_tcp_port
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import TEST_PROJECT_PREFIX
from tests.test_engine_histories import EXPECTED_RULES, HISTORIES

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"pair": ("docker", "servers")}

RESTARTS = "n1_d7_restart_is_not_a_stall.jsonl"  # a restart and a crash


def _fresh(clock_dir: Path) -> PairSettings:
    """A project of its own on ports free now, so pairs of parallel test processes never meet."""
    lua = free_tcp_port()
    native = free_tcp_port()
    while native == lua:
        native = free_tcp_port()
    return PairSettings(f"{TEST_PROJECT_PREFIX}{uuid.uuid4().hex[:10]}", {"lua": lua, "native": native}, clock_dir)


def _use(settings: PairSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment overrides docker-compose.yml reads, as a user would set them."""
    for name, value in settings.environment().items():
        monkeypatch.setenv(name, value)


def _containers(project: str) -> dict[str, Any]:
    found = compose.project_containers(docker_client(), project)
    return {c.labels[COMPOSE_SERVICE_LABEL]: c for c in found}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PairSettings]:
    settings = _fresh(tmp_path_factory.mktemp("clock"))
    try:
        compose.up(settings, DEFAULT_MODULE)
        yield settings
    finally:
        left = compose.down(settings)
    assert left == []


# -- settings and choices (no engine needed) ------------------------------------------------------


def test_settings_read_the_compose_overrides() -> None:
    default = settings_from({})
    assert (default.project, dict(default.ports), default.clock_dir) == (
        "difftest", {"lua": 7701, "native": 7702}, DEFAULT_CLOCK_DIR,
    )  # fmt: skip
    env = {"DIFFTEST_LUA_PORT": "8801", "DIFFTEST_NATIVE_PORT": "8802", "DIFFTEST_CLOCK_DIR": "/tmp/c",
           "COMPOSE_PROJECT_NAME": "mine"}  # fmt: skip
    chosen = settings_from(env)
    assert (chosen.project, dict(chosen.ports), chosen.clock_dir) == (
        "mine",
        {"lua": 8801, "native": 8802},
        Path("/tmp/c"),
    )
    assert settings_from(env, "other").project == "other"  # --project wins over the environment
    assert chosen.environment({"lua": "img:1"}) == {
        "DIFFTEST_LUA_PORT": "8801", "DIFFTEST_NATIVE_PORT": "8802", "DIFFTEST_CLOCK_DIR": "/tmp/c",
        "DIFFTEST_LUA_IMAGE": "img:1",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("env", "project", "says"),
    [
        ({"DIFFTEST_LUA_PORT": "70000"}, None, "DIFFTEST_LUA_PORT='70000' is not a TCP port"),
        ({"DIFFTEST_NATIVE_PORT": "x"}, None, "DIFFTEST_NATIVE_PORT='x' is not a TCP port"),
        ({"DIFFTEST_LUA_PORT": "7702"}, None, "cannot share port 7702"),
        ({}, "Bad Name", "is not a compose project name"),
    ],
)
def test_bad_settings_are_one_clear_error(env: dict[str, str], project: str | None, says: str) -> None:
    with pytest.raises(SetupProblem, match=says) as problem:
        settings_from(env, project)
    assert "\n" not in str(problem.value)


def test_a_pair_from_an_older_compose_file_is_told_apart_by_its_clock() -> None:
    """Servers given the clock file run on the harness's clock; an older file's (libfaketime's
    timestamp file) do not, and attaching to them is refused with how to bring the pair up again."""

    class Container:
        def __init__(self, env: list[str] | None) -> None:
            self.attrs = {"Config": {"Env": env}}

    assert compose._reads_the_clock_file(Container(["TZ=UTC", "DIFFTEST_CLOCK_FILE=/clock/frozen-ms"]))
    assert not compose._reads_the_clock_file(Container(["FAKETIME_TIMESTAMP_FILE=/clock/faketime", "TZ=UTC"]))
    assert not compose._reads_the_clock_file(Container(None))


def test_the_attach_backend_names_its_project() -> None:
    assert attached_project(attach_backend("p1")) == "p1"
    assert attached_project(attach_backend(None)) == ""  # found when attaching
    assert attached_project("docker") is None and attached_project("local") is None


def test_choose_project() -> None:
    up = {"lua": "running", "native": "running"}
    assert choose_project({"a": up}, None) == "a"
    assert choose_project({"a": up, "difftest": up}, None) == "difftest"  # the default pair
    assert choose_project({"a": up, "b": up}, "b") == "b"
    with pytest.raises(SetupProblem, match=r"several running pairs \(a, b\)"):
        choose_project({"a": up, "b": up}, None)
    with pytest.raises(SetupProblem, match="no running compose pair"):
        choose_project({"a": {"lua": "exited", "native": "running"}}, None)
    with pytest.raises(SetupProblem, match=r"'a' has no running pair \(lua exited, native missing\)"):
        choose_project({"a": {"lua": "exited"}}, "a")
    with pytest.raises(SetupProblem, match="no running pair in compose project 'c'"):
        choose_project({"a": up}, "c")


# -- the pair itself ----------------------------------------------------------------------------


def test_the_pair_is_private_on_loopback_with_volumes_and_the_clock(pair: PairSettings) -> None:
    containers = _containers(pair.project)
    assert set(containers) == {"lua", "native"}
    for service, container in containers.items():
        assert container.status == "running"
        bindings = container.attrs["HostConfig"]["PortBindings"]["6379/tcp"]
        assert bindings == [{"HostIp": "127.0.0.1", "HostPort": str(pair.ports[service])}]
        networks = set(container.attrs["NetworkSettings"]["Networks"])
        assert networks == {f"{pair.project}_pair"} or networks == {f"{pair.project}-pair"}  # compose v1, v2
        mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
        assert mounts["/data"]["Type"] == "volume" and pair.project in mounts["/data"]["Name"]
        assert (Path(mounts["/clock"]["Source"]), mounts["/clock"]["RW"]) == (pair.clock_dir, False)
        # PID 1 is the init, listening in a directory of this machine: restarts happen inside
        assert Path(mounts["/control"]["Source"]) == pair.clock_dir / "control" / service
        assert (pair.clock_dir / "control" / service / "init.sock").exists()
        assert container.attrs["Config"]["Entrypoint"] == ["/opt/difftest/init", "/usr/local/bin/valkey-server"]
        command = container.attrs["Config"]["Cmd"]
        assert "--appendonly" in command and command[command.index("--appendfsync") + 1] == "always"
    native = valkey.Valkey("127.0.0.1", pair.ports["native"])
    lua = valkey.Valkey("127.0.0.1", pair.ports["lua"])
    with native, lua:
        assert b"emq" in _modules(native) and b"emq" not in _modules(lua)


def _modules(client: valkey.Valkey) -> set[bytes]:
    listed = client.execute_command("MODULE", "LIST")
    return {dict(zip(entry[::2], entry[1::2], strict=True))[b"name"] for entry in listed}


def test_attached_replay_restarts_and_crashes_the_servers_in_their_containers(pair: PairSettings) -> None:
    before = {service: (c.id, c.attrs["State"]["StartedAt"]) for service, c in _containers(pair.project).items()}
    with Replayer(DEFAULT_MODULE, backend=attach_backend(pair.project)) as replayer:
        assert replayer.native_server.address == ("127.0.0.1", pair.ports["native"])
        for name in (RESTARTS, "d7_acl_refusal_on_the_counted_path.jsonl", "d1_pause_lands_between.jsonl"):
            result = replayer.replay(hist.load(HISTORIES / name))
            assert result.divergence is None, result.divergence and result.divergence.reason
            assert dict(result.rules_hit) == EXPECTED_RULES[name]
        assert replayer.native_server.starts == 1 + 3  # attached, then the three restarts and crashes
    after = {service: (c.id, c.attrs["State"]["StartedAt"]) for service, c in _containers(pair.project).items()}
    for service in ("lua", "native"):
        assert after[service][0] == before[service][0]  # the same containers, not new ones
        assert after[service][1] == before[service][1]  # never restarted: their inits restarted the servers
    assert all(c.status == "running" for c in _containers(pair.project).values())  # left running


def test_restart_and_crash_keep_data_and_read_the_shared_clock(pair: PairSettings) -> None:
    with ServerGroup(backend=attach_backend(pair.project)) as group:
        assert group.clock.path == pair.clock_dir / CLOCK_FILE  # the file the containers read
        server = group.add("native", module=DEFAULT_MODULE)
        group.advance(42)
        assert server.time_ms() == group.clock.now_ms
        server.client.hset("h", "f", "v")
        first = server.run_id
        group.restart_all(crash=True)
        assert server.client.hgetall("h") == {b"f": b"v"} and server.run_id != first
        second = server.run_id
        group.restart_all(crash=False)
        assert server.client.hgetall("h") == {b"f": b"v"} and server.run_id != second
        group.confirm_clock()  # the restarted server reads the frozen time again (or this raises)
        assert server.time_ms() == group.clock.now_ms


def test_attaching_flushes_what_an_earlier_run_left(pair: PairSettings) -> None:
    with valkey.Valkey("127.0.0.1", pair.ports["lua"]) as lua:
        lua.set("left-over", "1")
        lua.acl_setuser("someone", enabled=True, nopass=True)
        assert lua.exists("left-over") == 1
        with ServerGroup(backend=attach_backend(pair.project)) as group:
            group.add("lua")
            assert lua.dbsize() == 0
            assert [u.decode() if isinstance(u, bytes) else u for u in lua.acl_users()] == ["default"]


def test_one_harness_at_a_time_on_a_pair(pair: PairSettings) -> None:
    first = ServerGroup(backend=attach_backend(pair.project))
    with first, pytest.raises(SetupProblem, match="another difftest is attached"):
        ServerGroup(backend=attach_backend(pair.project))
    ServerGroup(backend=attach_backend(pair.project)).close()  # released when the first ends


def test_attaching_with_another_module_build_is_refused(pair: PairSettings, tmp_path: Path) -> None:
    other = tmp_path / "libemq_native.so"
    other.write_bytes(DEFAULT_MODULE.read_bytes() + b"\0")
    with pytest.raises(SetupProblem, match="runs another build than"):
        Replayer(other, backend=attach_backend(pair.project))
    with Replayer(DEFAULT_MODULE, backend=attach_backend(pair.project)):  # the failed one let go
        pass


# -- the command line, from up to down ------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.servers
def test_servers_up_replay_attached_then_down_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = _fresh(tmp_path / "clock")
    _use(settings, monkeypatch)
    try:
        assert main(["servers", "up", "--project", settings.project]) == 0
        out = capsys.readouterr().out
        for service, port in settings.ports.items():
            assert f"{service:<7} 127.0.0.1:{port}" in out
        code = main(["replay", str(HISTORIES / RESTARTS), "--attach", settings.project, "--reports", str(tmp_path)])
        out = capsys.readouterr().out
        assert code == 0 and "verdict: the two executors agree" in out
        assert '{"op": "crash"}' in out and '{"op": "restart"}' in out
        assert {c.status for c in _containers(settings.project).values()} == {"running"}
    finally:
        assert main(["servers", "down", "--project", settings.project]) == 0
    assert compose.leftovers(docker_client(), settings.project) == []
    assert _containers(settings.project) == {}


# -- one clear error ----------------------------------------------------------------------------


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("difftest: ") and "\n" not in err, err
    return err


@pytest.mark.docker
def test_ports_in_use_are_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = _fresh(tmp_path / "clock")
    _use(settings, monkeypatch)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", settings.ports["native"]))
        holder.listen()
        assert main(["servers", "up", "--project", settings.project]) == 2
    err = _one_line(capsys)
    assert f"port {settings.ports['native']} on 127.0.0.1 (for the native server) is in use" in err
    assert compose.leftovers(docker_client(), settings.project) == []


@pytest.mark.docker
def test_attach_without_a_running_pair_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    missing = f"{TEST_PROJECT_PREFIX}none-{os.getpid()}"
    assert main(["replay", str(HISTORIES / RESTARTS), "--attach", missing]) == 2
    assert f"no running pair in compose project '{missing}'" in _one_line(capsys)


@pytest.mark.docker
@pytest.mark.parametrize(
    "argv",
    [["servers", "up"], ["servers", "down"], ["replay", str(HISTORIES / RESTARTS), "--attach"]],
)
def test_no_engine_is_one_clear_error(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert main(argv) == 2
    assert "no Docker engine answers" in _one_line(capsys)
