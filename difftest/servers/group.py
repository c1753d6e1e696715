"""A group of servers on one backend (embedded, docker, or an attached compose pair), sharing one
temp root and one frozen clock."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from difftest.base.problems import SetupProblem
from difftest.servers.clock import CLOCK_FILE, FrozenClock
from difftest.servers.compiled import clock_library
from difftest.servers.compose import AttachedPair, attached_project
from difftest.servers.docker import DockerServer, docker_client, remove_orphans
from difftest.servers.leftovers import PREFIX, mark_owner, sweep_leftovers
from difftest.servers.local import EmbeddedServer, fast_temp_dir

Server = EmbeddedServer | DockerServer  # a server this group starts itself (an attached pair's are its own)


class ServerGroup:
    """Servers sharing one temp root and one frozen clock; removed whole on exit.

    The backend "compose:<project>" attaches to a running compose pair instead: its servers are
    the pair's containers, its clock the file they read, and nothing of it is removed on exit.
    """

    def __init__(self, root: Path | None = None, start_ms: int | None = None, backend: str = "local") -> None:
        project = attached_project(backend)  # "compose:<project>": the running compose pair
        if backend not in ("local", "docker") and project is None:
            raise SetupProblem(f"unknown backend {backend!r}: use 'local' or 'docker'")
        self.backend = backend
        if backend == "docker":
            remove_orphans(docker_client())
        self.pair: AttachedPair | None = None
        if project is not None:
            # the pair's clock directory (bind-mounted into both containers) is the group's root
            self.pair = AttachedPair(project or None)
            root = self.pair.clock_dir
        self._owns_root = root is None
        if self._owns_root:
            sweep_leftovers()  # what killed processes before this one left in /dev/shm
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=fast_temp_dir())) if root is None else root
        if self._owns_root:
            mark_owner(self.root)  # removed by the next start if this process is killed first
        self.root.mkdir(parents=True, exist_ok=True)
        kwargs = {} if start_ms is None else {"start_ms": start_ms}
        try:
            clock_library()  # built now: without a C compiler, one line before any server
            self.clock = FrozenClock(self.root / CLOCK_FILE, **kwargs)
        except BaseException:  # no clock library, say: the directory made above goes with the group
            if self._owns_root:
                shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.servers: list[Any] = []  # EmbeddedServer, or DockerServer on the docker backend

    def add(
        self,
        name: str,
        module: Path | None = None,
        module_args: Sequence[str] = (),
        tcp_port: int | None = None,
        extra_config: Sequence[str] = (),
    ) -> Any:
        """Start a server of this group's backend (an EmbeddedServer or a DockerServer)."""
        kind: Any = EmbeddedServer
        if self.backend == "docker":
            kind = DockerServer
        if self.pair is not None:
            server = self.pair.server(name, self.clock, module, module_args, tcp_port, extra_config)
        else:
            server = kind(name, self.root / name, self.clock, module, module_args, tcp_port, extra_config)
        self.servers.append(server)
        server.start()
        return server

    def beside(self, primary: Server, name: str, extra_config: Sequence[str]) -> Server:
        """A server (not started, not one of the group's) beside `primary`, loading its module, that
        reaches the primary's TCP port: a replica. An embedded server shares the machine's loopback;
        a container joins the primary's network namespace (a container has no other network)."""
        if self.pair is not None:
            raise SetupProblem("an attached pair's servers have no replicas: drop --attach")
        args = (name, self.root / name, self.clock, primary.module, primary.module_args)
        if isinstance(primary, DockerServer):
            return DockerServer(*args, extra_config=extra_config, network_of=primary)
        return EmbeddedServer(*args, extra_config=extra_config)

    def restart_all(self, crash: bool, only: Sequence[Any] | None = None) -> None:
        """Restart (or crash) every running server (or those of `only`) at once: stops first, then
        starts in parallel, so a pair costs one server's start-up time, not two."""
        running = [server for server in self.servers if server.running and (only is None or server in only)]
        for server in running:
            server.restart_begin(crash)
        spawned = [(server, server.restart_spawn()) for server in running]
        for server, started in spawned:
            server.restart_await(started)

    def advance(self, ms: int) -> None:
        """Move the shared clock: every server's next command reads the new millisecond."""
        self.clock.advance(ms)

    def set_time(self, ms: int) -> None:
        self.clock.set(ms)

    def confirm_clock(self) -> None:
        """Check that every running server reads the frozen millisecond now: a server that does not
        has not loaded the clock library, and no step may run on it. (The replay checks the same in
        its reset's round trip.)"""
        expected = self.clock.now_ms
        for server in self.servers:
            if server.running and (ms := server.time_ms()) != expected:
                raise RuntimeError(
                    f"{server.name} reads {ms} ms, not the frozen {expected} ms: is the clock library preloaded?"
                )

    def close(self) -> None:
        for server in self.servers:
            server.close()
        if self.pair is not None:
            self.pair.close()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ServerGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
