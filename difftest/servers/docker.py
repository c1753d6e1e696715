"""Servers as containers (the docker backend): the same interface as the embedded servers.

Each server is a container of an image built here (FROM scratch), with no network at all
(network_mode none: reachable only through its unix socket, in a directory bind-mounted from this
machine; a replica's container shares its primary's namespace, and only that), its data in that
directory (kept across restart and kill), and the shared frozen clock read from the group's clock
file through a read-only bind mount.

A container's PID 1 is the project's init (init.c) when a C compiler built it: it starts the
server, and restarts it inside the container when asked through a unix socket in the data
directory, so a restart of a server costs a server's start-up, not a container's. It keeps what a
restart means: a new server process (a new run_id), the AOF loaded again, a crash a SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import valkey

from difftest.base.problems import SetupProblem
from difftest.servers.clients import SocketClients
from difftest.servers.clock import FrozenClock, server_clock_env
from difftest.servers.compiled import fastboot_library, init_binary
from difftest.servers.images import IN_IMAGE, LABEL, build_image
from difftest.servers.local import SERVER_HZ

OWNER_LABEL = "org.difftest.owner"  # the pid of the harness that made a container
GROUP_LABEL = "org.difftest.group"  # the server group (its temp root's name) a container belongs to
START_TIMEOUT_S = 30.0
CONTROL_SOCKET = "init.sock"  # the init's, in the data directory
# A container asked for a TCP port listens on this one, on the loopback of its own network namespace
# (network_mode none: nothing outside reaches it); a replica joins that namespace (network_mode
# container:<its primary>) and follows its primary there. The harness itself still uses the socket.
LOOPBACK_PORT = 6379


def docker_client() -> Any:
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:  # no package, no socket, daemon down: one line, and what to do
        raise SetupProblem(
            f"no Docker engine answers ({exc.__class__.__name__}: {str(exc)[:120]}): start it, "
            "or use the local backend (--backend local)"
        ) from exc
    return client


def remove_orphans(client: Any) -> int:
    """Containers a dead harness left behind (it was SIGKILLed before it could clean up)."""
    from docker.errors import NotFound

    removed = 0
    # other harnesses (pytest -n 2, a compose pair going down) remove containers at any moment:
    # one gone between the listing and its inspection or removal is no error
    for container in client.containers.list(all=True, ignore_removed=True, filters={"label": LABEL}):
        owner = container.labels.get(OWNER_LABEL, "")
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(NotFound):
                container.remove(force=True)
                removed += 1
    return removed


class DockerServer(SocketClients):
    """One valkey-server container; `restart()` is docker stop/start, `crash()` docker kill/start.
    A group's restarts (`restart_begin`, `restart_spawn`, `restart_await`) go through the init.

    `tcp_port` (any value: 0 asks for one, as for an embedded server) makes the server listen on
    LOOPBACK_PORT inside its network namespace; `network_of` puts the container into another's
    namespace (a replica beside its primary), where only that one's loopback port is reachable."""

    _control: socket.socket | None = None  # the connection to the init, while the container runs
    _with_init = False

    def __init__(
        self,
        name: str,
        workdir: Path,
        clock: FrozenClock,
        module: Path | None = None,
        module_args: Sequence[str] = (),
        tcp_port: int | None = None,
        extra_config: Sequence[str] = (),
        network_of: DockerServer | None = None,
    ) -> None:
        if module is not None and not module.is_file():
            raise SetupProblem(f"module {module} does not exist: build it with 'make setup' or pass its path")
        self.name = name
        self.workdir = workdir
        self.clock = clock
        self.module = module
        self.module_args = tuple(module_args)
        self.extra_config = tuple(extra_config)
        # the port other containers of its namespace reach it on; the harness reaches it by its socket
        self.tcp_port: int | None = None if tcp_port is None else LOOPBACK_PORT
        self.network_of = network_of
        self.container_starts = 0  # docker starts of its container: a new one, a new network namespace
        self._joined_starts = -1  # the start of `network_of`'s container this one's namespace is
        self._created_with: tuple[list[str], str] | None = None  # the command and network it was made with
        self.socket_path = workdir / "valkey.sock"
        self.logfile = workdir / "valkey.log"
        self.control_socket = workdir / CONTROL_SOCKET  # the init's
        self.starts = 0
        self._docker = docker_client()
        self._image = build_image(self._docker, module)
        self._with_init = init_binary() is not None  # then the image holds it (images.py)
        self._container: Any = None
        self._client: valkey.Valkey | None = None

    def _command(self) -> list[str]:
        args = [
            "--dir", "/data", "--unixsocket", "/data/valkey.sock", "--unixsocketperm", "777",
            *self._listen(), "--logfile", "/data/valkey.log", "--appendonly", "yes",
            "--appendfsync", "always", "--auto-aof-rewrite-percentage", "0", "--hz", SERVER_HZ, "--save", "",
            "--daemonize", "no",
            # as the embedded servers (docs/security.md); the harness reaches it on its Unix socket: local
            "--enable-debug-command", "local", "--enable-module-command", "local", "--enable-protected-configs", "no",
            "--sanitize-dump-payload", "yes",
            *self.extra_config, "--loadmodule", IN_IMAGE["walker"],
        ]  # fmt: skip
        if self.module is not None:
            args += ["--loadmodule", IN_IMAGE["module"], *self.module_args]
        return args

    def _listen(self) -> list[str]:
        if self.tcp_port is None:
            return ["--port", "0"]
        return ["--port", str(self.tcp_port), "--bind", "127.0.0.1"]

    def _network_mode(self) -> str:
        if self.network_of is None:
            return "none"
        if self.network_of._container is None or not self.network_of.running:
            raise RuntimeError(f"{self.name}: {self.network_of.name}, whose network it joins, is not running")
        return f"container:{self.network_of._container.id}"

    def _environment(self) -> dict[str, str]:
        fastboot = IN_IMAGE["fastboot"] if fastboot_library() else None
        environment = server_clock_env(f"/clock/{self.clock.path.name}", IN_IMAGE["clock"], fastboot)
        preload = environment["LD_PRELOAD"]
        if self._with_init:  # the init passes the preload on to the server only
            del environment["LD_PRELOAD"]
            environment["DIFFTEST_SERVER_PRELOAD"] = preload
            environment["DIFFTEST_INIT_SOCKET"] = f"/data/{CONTROL_SOCKET}"
            if fastboot_library():
                environment["DIFFTEST_INIT_READY"] = "1"
        return environment

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._await_ready(*self._spawn(None))

    def _choose_port(self) -> int | None:
        return None

    def _spawn(self, port: int | None) -> tuple[int, int | None]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        command, network = self._command(), self._network_mode()
        joined = -1 if self.network_of is None else self.network_of.container_starts
        if self._container is not None and (self._created_with != (command, network) or joined != self._joined_starts):
            # made with other settings, or in a namespace that has gone with its container's start
            self.close()
        if self._container is None:
            self._created_with, self._joined_starts = (command, network), joined
            self._container = self._docker.containers.create(
                self._image,
                entrypoint=[IN_IMAGE["init"], IN_IMAGE["server"]] if self._with_init else None,
                command=command,
                name=f"difftest-{os.getpid()}-{self.name}-{uuid.uuid4().hex[:8]}",
                labels={LABEL: "1", OWNER_LABEL: str(os.getpid()), GROUP_LABEL: self.workdir.parent.name},
                network_mode=network,
                environment=self._environment(),
                volumes={
                    str(self.workdir): {"bind": "/data", "mode": "rw"},
                    str(self.clock.path.parent): {"bind": "/clock", "mode": "ro"},
                },
            )
        if self._with_init:
            with contextlib.suppress(FileNotFoundError):
                self.control_socket.unlink()
        self._container.start()
        self.container_starts += 1
        return 0, port

    def _await_ready(self, log_offset: int, port: int | None) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        rounds = 0
        while True:
            if self._with_init and self._control is None:
                self._connect_control()
            # the container's state is asked of the engine (slow) only now and then; the init's
            # connection says at once whether it still runs
            if self._control is None or self._control_closed() or rounds % 100 == 99:
                self._container.reload()
                if self._container.status == "exited":
                    tail = self._container.logs(tail=5).decode(errors="replace").strip().splitlines()
                    last = tail[-1] if tail else "(no output)"
                    raise SetupProblem(f"{self.name}: the server container exited at start: {last[-240:]}")
            if self._reachable():
                break
            if time.monotonic() > deadline:
                raise SetupProblem(f"{self.name}: the server container did not answer within {START_TIMEOUT_S:.0f}s")
            rounds += 1
            time.sleep(0.0005)
        self.starts += 1

    # -- the init: restarts inside the container ----------------------------------------------

    def _connect_control(self) -> None:
        path = self.control_socket
        if not path.exists():
            return  # not listening yet: the caller polls
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            control.connect(str(path))
        except OSError:
            control.close()
            return
        self._control = control

    def _control_closed(self) -> bool:
        """Whether the init has gone (the container stopped): its end of the connection closed."""
        control = self._control
        if control is None:
            return True
        readable, _, _ = select.select([control], [], [], 0)
        if readable:
            try:
                gone = control.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                self._close_control()
                return True
        return False

    def _close_control(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None

    def restart_begin(self, crash: bool) -> None:
        """Ask for a restart (or a crash): the init is told before SHUTDOWN is sent, so it never
        takes the server's exit for the container's end."""
        if self._control is None:
            self.kill() if crash else self.request_shutdown()
            return
        self._drop_client()
        self._control.sendall(b"k" if crash else b"r")
        if not crash:
            self.request_shutdown()

    def restart_spawn(self) -> tuple[int, int | None]:
        """The old server gone and a new one started (the init answers once it listens)."""
        if self._control is None:
            self.stop()
            return self._spawn(None)
        self._control.settimeout(START_TIMEOUT_S)
        answer = b""
        with contextlib.suppress(OSError):
            while not answer.endswith(b"\n"):
                chunk = self._control.recv(16)
                if not chunk:
                    break
                answer += chunk
        self._control.settimeout(None)
        if answer != b"ok\n":
            self._close_control()
            raise SetupProblem(f"{self.name}: the server did not start again in its container ({answer!r})")
        return 0, None

    def restart_await(self, started: tuple[int, int | None]) -> None:
        self._await_ready(*started)

    def _reachable(self) -> bool:
        return self.socket_path.exists() and self.pings()

    def request_shutdown(self) -> None:
        self.shutdown()

    def stop(self) -> None:
        """Graceful: SHUTDOWN (as docker stop's SIGTERM would), then wait for the container."""
        if self._container is None or not self.running:
            return
        self.request_shutdown()
        self._container.wait(timeout=30)
        self._close_control()

    def kill(self) -> None:
        """docker kill: SIGKILL, as a crash."""
        self._drop_client()
        if self._container is not None and self.running:
            with contextlib.suppress(Exception):
                self._container.kill()
            self._container.wait(timeout=30)
        self._close_control()

    def restart(self) -> None:
        self.stop()
        self.start()

    def crash(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        self._drop_client()
        self._close_control()
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.remove(force=True)
            self._container = None

    @property
    def running(self) -> bool:
        if self._container is None:
            return False
        if self._control is not None:  # the init's connection answers without asking the engine
            return not self._control_closed()
        self._container.reload()
        return bool(self._container.status == "running")

    @property
    def pid(self) -> int | None:
        """The container's first process on this machine (the init, when there is one: the same across
        the restarts it makes; `run_id` tells those apart), as the engine reports it now."""
        if self._container is None:
            return None
        self._container.reload()
        return int(self._container.attrs["State"]["Pid"]) or None
