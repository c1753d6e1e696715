"""Embedded servers: persistence across restart and crash, clear set-up errors, clean teardown."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from difftest.base.problems import SetupProblem
from difftest.servers.group import ServerGroup
from difftest.servers.local import EmbeddedServer


def test_restart_keeps_keyspace_and_changes_run_id(group: ServerGroup) -> None:
    server = group.add("a")
    server.client.hset("h", "f", "v")
    first_run = server.run_id
    server.restart()
    assert server.client.hgetall("h") == {b"f": b"v"}
    assert server.run_id != first_run
    assert server.starts == 2


def test_crash_keeps_acknowledged_writes(group: ServerGroup) -> None:
    server = group.add("a")
    for i in range(50):
        server.client.zadd("z", {f"m{i}": i})
    first_run, first_pid = server.run_id, server.pid
    server.crash()
    assert server.pid != first_pid
    assert server.client.zcard("z") == 50
    assert server.run_id != first_run


def test_tcp_port_is_optional_and_reachable(group: ServerGroup) -> None:
    server = group.add("a", tcp_port=0)
    assert server.tcp_port
    with socket.create_connection(("127.0.0.1", server.tcp_port), timeout=5) as conn:
        conn.sendall(b"PING\r\n")
        assert conn.recv(16) == b"+PONG\r\n"


def test_port_in_use_is_one_clear_error(group: ServerGroup) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(SetupProblem, match=f"port {port} .* in use"):
            group.add("a", tcp_port=port)


def _answers_ping(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"PING\r\n")
        return conn.recv(16) == b"+PONG\r\n"


def _held(port: int) -> socket.socket:
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    return holder


@pytest.mark.parametrize("crash", [True, False])
def test_a_picked_port_taken_while_its_server_restarts_is_exchanged_for_a_new_one(
    group: ServerGroup, crash: bool
) -> None:
    # the kernel hands a freed port to whoever asks next (another process's pick, an outgoing
    # connection's local port): a restart that insisted on it failed with "port in use"
    server = group.add("a", tcp_port=0)
    first = server.tcp_port
    assert first is not None
    # a group's restart: both servers stopped, then spawned, then awaited (restart_all's phases)
    server.restart_begin(crash)
    server.stop()  # the old process is gone, so its port is free for anyone to take
    with _held(first):
        server.restart_await(server._spawn(first))
    second = server.tcp_port
    assert second is not None and second != first and _answers_ping(second)
    # a crash step's kill, then start
    server.kill()
    with _held(second):
        server.start()
    third = server.tcp_port
    assert third is not None and third != second and _answers_ping(third)


def test_a_named_port_taken_while_its_server_restarts_is_one_clear_error(group: ServerGroup) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        named = probe.getsockname()[1]
    server = group.add("a", tcp_port=named)
    server.kill()
    with _held(named), pytest.raises(SetupProblem, match=f"port {named} .*in use"):
        server.start()


def test_missing_module_is_one_clear_error(group: ServerGroup, tmp_path: Path) -> None:
    with pytest.raises(SetupProblem, match="does not exist: build it"):
        group.add("a", module=tmp_path / "nope.so")


def test_unloadable_module_is_one_clear_error(group: ServerGroup, tmp_path: Path) -> None:
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an elf")
    with pytest.raises(SetupProblem, match="could not load module"):
        group.add("a", module=junk)


@pytest.mark.subprocess
def test_wrong_valkey_version_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "valkey-server"
    fake.write_text("#!/bin/sh\necho 'Valkey server v=7.2.4 sha=0 malloc=libc bits=64'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DIFFTEST_VALKEY_SERVER", str(fake))
    with ServerGroup() as group, pytest.raises(SetupProblem, match=r"is Valkey 7\.2\.4; difftest needs"):
        group.add("a")


@pytest.mark.subprocess  # a fresh cache: the frozen clock is compiled (cc) before the refusal
def test_missing_binary_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIFFTEST_VALKEY_SERVER", str(tmp_path / "absent"))
    with ServerGroup() as group, pytest.raises(SetupProblem, match="not an executable file"):
        group.add("a")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); read its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("PPid:")[1].split()[0])


@pytest.mark.servers
def test_close_removes_processes_and_files() -> None:
    group = ServerGroup()
    server = group.add("a")
    pid, zygote, root = server.pid, server.zygote_pid, group.root
    assert pid is not None and _alive(pid) and zygote is not None and _alive(zygote)
    group.close()
    assert not _alive(pid) and not _alive(zygote)
    assert not root.exists()


def test_every_start_is_a_fresh_server_forked_by_one_zygote(group: ServerGroup) -> None:
    """A restart and a crash start a new process (a new pid, a new run_id, the AOF loaded again)
    forked by the server's zygote, which stays; the zygote is no server (it never reached main)."""
    server = group.add("a")
    zygote = server.zygote_pid
    assert zygote is not None and server.pid is not None and _parent(server.pid) == zygote
    assert _parent(zygote) == os.getpid()
    server.client.hset("h", "f", "v")
    seen = [(server.pid, server.run_id)]
    for how in ("restart", "crash", "restart"):
        getattr(server, how)()
        assert server.zygote_pid == zygote and server.pid is not None and _parent(server.pid) == zygote
        assert server.client.hgetall("h") == {b"f": b"v"}
        seen.append((server.pid, server.run_id))
    assert len({pid for pid, _ in seen}) == len({run_id for _, run_id in seen}) == 4
    # the zygote never reached main(): one thread, where a server runs its background threads too
    assert len(os.listdir(f"/proc/{zygote}/task")) == 1 < len(os.listdir(f"/proc/{server.pid}/task"))


def test_a_zygote_that_died_is_made_again_and_its_server_died_with_it(group: ServerGroup) -> None:
    server = group.add("a")
    zygote, first = server.zygote_pid, server.pid
    assert zygote is not None and first is not None
    os.kill(zygote, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while server.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not server.running and not _alive(first)  # it dies with its zygote (and the harness)
    server.kill()  # what the replay's reset does with a server that died
    server.start()
    assert server.zygote_pid not in (None, zygote) and server.client.ping()


def test_without_the_zygote_every_start_is_an_exec(monkeypatch: pytest.MonkeyPatch, group: ServerGroup) -> None:
    monkeypatch.setenv("DIFFTEST_ZYGOTE", "0")
    server = group.add("a")
    first = server.pid
    server.restart()
    assert server.zygote_pid is None and server.pid not in (None, first)
    assert server.pid is not None and _parent(server.pid) == os.getpid() and server.client.ping()


HARNESS = textwrap.dedent(
    """
    import sys, time
    from difftest.servers.group import ServerGroup
    with ServerGroup() as group:
        server = group.add("a")
        print(server.pid, group.root, flush=True)
        time.sleep(60)
    """
)


@pytest.mark.servers
@pytest.mark.subprocess
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_servers_do_not_outlive_the_harness(sig: signal.Signals) -> None:
    """Ctrl-C unwinds the context manager; even SIGKILL of the harness takes the servers down."""
    harness = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None
    pid_text, root = harness.stdout.readline().split()
    pid = int(pid_text)
    assert _alive(pid)
    harness.send_signal(sig)
    try:
        # generous: the fresh clone's suite compiles the instrumented module and the mutants' crate
        # on both cores meanwhile, and a starved harness is slow, not wrong
        harness.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc = Path("/proc") / str(harness.pid)
        status = [ln for ln in (proc / "status").read_text().splitlines() if ln.startswith(("State", "Sig"))]
        pytest.fail(f"the harness did not end on {sig!r}: {status}, waiting in {(proc / 'wchan').read_text()!r}")
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(pid)
    if sig == signal.SIGINT:
        assert not Path(root).exists()
    else:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def test_start_failure_keeps_no_process(group: ServerGroup) -> None:
    server = EmbeddedServer("bad", group.root / "bad", group.clock, extra_config=["--no-such-option", "x"])
    with pytest.raises(SetupProblem, match="exited with code"):
        server.start()
    assert not server.running


@pytest.mark.servers
def test_nothing_of_a_server_is_left_in_dev_shm_by_a_crash_a_restart_or_the_end() -> None:
    shm = Path("/dev/shm")
    pids = []
    with ServerGroup() as group:
        root = group.root
        server = group.add("lua")
        pids.append(server.pid)
        server.crash()  # SIGKILL: no clean-up of its own runs
        pids.append(server.pid)
        group.restart_all(crash=False)
        pids.append(server.pid)
    numbers = {str(pid) for pid in pids}
    named = [entry.name for entry in shm.iterdir() if numbers & set(re.findall(r"\d+", entry.name))]
    assert len(set(pids)) == 3 and named == [] and not root.exists()


def test_a_group_whose_clock_cannot_be_built_leaves_no_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No C compiler refuses the group before any server, in one line: its temporary root goes too."""
    import tempfile

    from difftest.servers import compiled, group

    made: list[str] = []
    real = tempfile.mkdtemp

    def recorded(**options: Any) -> str:
        made.append(real(**options))
        return made[-1]

    monkeypatch.setattr(group.tempfile, "mkdtemp", recorded)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no cc, no gcc
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no clock library built before
    compiled.clock_library.cache_clear()
    try:
        with pytest.raises(SetupProblem, match=r"frozen clock.*install a C compiler"):
            ServerGroup()
    finally:
        compiled.clock_library.cache_clear()
    assert made and not Path(made[0]).exists()


def test_the_aof_is_rewritten_before_a_history_that_restarts_and_only_then() -> None:
    from difftest.replay.replayer import (
        AOF_COMPACT_BEFORE_RESTART_BYTES,
        AOF_COMPACT_BYTES,
        FINISH_REWRITE,
        START_REWRITE,
        aof_rewrite,
    )

    small, grown = AOF_COMPACT_BEFORE_RESTART_BYTES, AOF_COMPACT_BYTES
    assert aof_rewrite(small, history_restarts=True) is None
    assert aof_rewrite(small + 1, history_restarts=True) == START_REWRITE
    assert aof_rewrite(grown, history_restarts=False) is None
    assert aof_rewrite(grown + 1, history_restarts=False) == START_REWRITE
    # a restart may stop the rewrite before its history: past the bound, that one is waited for
    assert aof_rewrite(grown + 1, history_restarts=True) == FINISH_REWRITE


@pytest.mark.servers
def test_a_restart_replays_only_its_own_history_once_the_aof_has_grown() -> None:
    """Earlier histories' writes (FLUSHALLs between) past AOF_COMPACT_BYTES are rewritten away, and
    waited for, at the reset of a history that restarts: the restarted server's AOF holds this
    history's writes only, and they all came back. Below it the rewrite is not waited for, and a
    restart that comes first loads the older files too: the same keyspace."""
    from difftest.history import format as hist
    from difftest.replay.replayer import AOF_COMPACT_BEFORE_RESTART_BYTES, AOF_COMPACT_BYTES, Replayer
    from executors.native.adapter import DEFAULT_MODULE

    header = '{"format": "difftest-history", "version": 1, "start_ms": 1000}\n'

    def enqueues(count: int, size: int) -> hist.History:
        calls = (f'{{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j{n}", "{"p" * size}", 0]}}\n'
                 for n in range(count))  # fmt: skip
        return hist.loads(header + "".join(calls))

    kept = '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["kept", "x", 0]}\n'
    restarting = hist.loads(header + kept + '{"op": "restart"}\n')
    with Replayer(DEFAULT_MODULE) as replayer:
        native, lua = replayer.native_server, replayer.lua_server
        assert replayer.replay(enqueues(3, 2_000)).ok  # past the small bound only
        result = replayer.replay(restarting)  # its restart may come before the rewrite's end
        assert result.ok and result.records[-1].resolved.is_restart
        assert native.client.dbsize() == 2  # the row and pending, whichever files it loaded
        assert replayer.replay(enqueues(40, 7_000)).ok  # no restart: nothing is rewritten below the bound
        assert int(native.client.info("persistence")["aof_current_size"]) > AOF_COMPACT_BYTES
        result = replayer.replay(restarting)
        assert result.ok and result.records[-1].resolved.is_restart
        # the native server restarted on its own history's writes alone
        assert int(native.client.info("persistence")["aof_current_size"]) < AOF_COMPACT_BEFORE_RESTART_BYTES
        for server in (native, lua):
            assert server.client.hget("emq:{q}:job:kept", "payload") == b"x"


@pytest.mark.servers
def test_a_data_dir_too_deep_for_a_socket_address_still_serves_and_leaves_nothing(tmp_path: Path) -> None:
    """A unix socket's address is at most 107 bytes: a server whose data dir is deeper (a deep --state,
    checkout or pytest's tmp_path) gets its socket in a short directory of its own, removed by close."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(str(deep / "store" / "valkey.sock")) > 107
    with ServerGroup(root=deep) as deep_group:
        server = deep_group.add("store", tcp_port=0)
        socket_dir = server.socket_path.parent
        assert not str(server.socket_path).startswith(str(deep)) and len(str(server.socket_path)) <= 107
        server.client.set("k", "v")
        server.restart()  # the same short socket across a restart; the data stays in the deep data dir
        assert server.client.get("k") == b"v"
        assert (deep / "store").is_dir()
    assert not socket_dir.exists()
