"""The compose pair (docker-compose.yml): its images and life cycle, and attaching the harness to it.

`up` builds the images here (FROM scratch, as the docker backend does), runs `compose up -d` and
waits until both servers answer; `down` removes the containers, the network and the data volumes.
`AttachedPair` finds a running pair by its labels and hands the harness `AttachedServer`s: the
docker backend's servers, reached by TCP on the published ports, restarted and killed as containers,
and never removed (the pair belongs to the user; its keyspace is flushed when a harness attaches).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import valkey

from difftest.base.problems import SetupProblem
from difftest.servers.clients import Address
from difftest.servers.clock import CLOCK_BYTES, CLOCK_VARIABLE, FrozenClock
from difftest.servers.clock import CLOCK_FILE as CLOCK_FILE  # the name in the pair's clock directory
from difftest.servers.compiled import init_binary
from difftest.servers.docker import CONTROL_SOCKET, START_TIMEOUT_S, DockerServer, docker_client
from difftest.servers.images import IMAGE_REPOSITORY, IN_IMAGE, build_image
from difftest.servers.local import tcp_port_in_use

REPOSITORY = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPOSITORY / "docker-compose.yml"
DEFAULT_PROJECT = "difftest"  # also in .env, so a plain `docker compose` addresses the same pair
DEFAULT_PORTS = {"lua": 7701, "native": 7702}
DEFAULT_CLOCK_DIR = REPOSITORY / ".difftest" / "clock"  # docker-compose.yml's default, resolved
SERVICES = ("lua", "native")
SERVICE_LABEL = "org.difftest.service"  # set in docker-compose.yml
PROJECT_LABEL = "com.docker.compose.project"  # set by compose (v1 and v2) on all it makes
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"
CONTROL_DIR = "control"  # in the clock directory: control/<service>/init.sock, the servers' inits
LOCK_FILE = "attach.lock"
ATTACH_PREFIX = "compose:"  # a ServerGroup backend "compose:<project>" attaches to that pair
SERVER_PORT = "6379/tcp"


# -- settings (pure) -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PairSettings:
    """What docker-compose.yml is run with: the project, the published ports, the clock directory."""

    project: str
    ports: Mapping[str, int]
    clock_dir: Path

    def environment(self, images: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables docker-compose.yml reads (see its header)."""
        env = {
            "DIFFTEST_LUA_PORT": str(self.ports["lua"]),
            "DIFFTEST_NATIVE_PORT": str(self.ports["native"]),
            "DIFFTEST_CLOCK_DIR": str(self.clock_dir),
        }
        for service, tag in (images or {}).items():
            env[f"DIFFTEST_{service.upper()}_IMAGE"] = tag
        return env

    def addresses(self) -> dict[str, str]:
        return {service: f"127.0.0.1:{port}" for service, port in self.ports.items()}


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise SetupProblem(f"{name}={text!r} is not a TCP port: give a number from 1 to 65535")
    return int(text)


def check_project(name: str) -> str:
    """Compose's rule for project names (v2's, the stricter one)."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
        raise SetupProblem(
            f"{name!r} is not a compose project name: use lowercase letters, digits, '-' and '_', "
            "starting with a letter or digit"
        )
    return name


def settings_from(env: Mapping[str, str], project: str | None = None) -> PairSettings:
    """The pair's settings: the command line's project, then the environment, then the defaults."""
    name = check_project(project or env.get("COMPOSE_PROJECT_NAME") or DEFAULT_PROJECT)
    ports = {service: _port(env, f"DIFFTEST_{service.upper()}_PORT", DEFAULT_PORTS[service]) for service in SERVICES}
    if ports["lua"] == ports["native"]:
        raise SetupProblem(f"the lua and native servers cannot share port {ports['lua']}: give them two ports")
    clock = env.get("DIFFTEST_CLOCK_DIR", "").strip()
    clock_dir = (REPOSITORY / clock if clock else DEFAULT_CLOCK_DIR).resolve()
    return PairSettings(name, ports, clock_dir)


def attach_backend(project: str | None) -> str:
    """The ServerGroup backend that attaches to a running pair (any one if the project is None)."""
    return ATTACH_PREFIX + (check_project(project) if project else "")


def attached_project(backend: str) -> str | None:
    """The project of an attaching backend ('' when to be found); None for other backends."""
    return backend[len(ATTACH_PREFIX) :] if backend.startswith(ATTACH_PREFIX) else None


def choose_project(pairs: Mapping[str, Mapping[str, str]], wanted: str | None) -> str:
    """The pair to attach to, from each project's service -> container status."""

    def complete(project: str) -> bool:
        states = pairs.get(project, {})
        return all(states.get(service) == "running" for service in SERVICES)

    if wanted:
        if complete(wanted):
            return wanted
        states = pairs.get(wanted)
        if states:
            shown = ", ".join(f"{service} {states.get(service, 'missing')}" for service in SERVICES)
            raise SetupProblem(f"compose project {wanted!r} has no running pair ({shown}): run 'difftest servers up'")
        raise SetupProblem(f"no running pair in compose project {wanted!r}: start one with 'difftest servers up'")
    running = sorted(project for project in pairs if complete(project))
    if len(running) == 1:
        return running[0]
    if not running:
        raise SetupProblem("no running compose pair to attach to: start one with 'difftest servers up'")
    if DEFAULT_PROJECT in running:
        return DEFAULT_PROJECT
    raise SetupProblem(f"several running pairs ({', '.join(running)}): name one with --attach PROJECT")


# -- docker compose itself -----------------------------------------------------------------------


def compose_command() -> list[str]:
    """`docker compose` (the v2 plugin) if present, else `docker-compose` (v1)."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise SetupProblem(
        "neither 'docker compose' nor 'docker-compose' is installed: install the Compose plugin "
        "(apt-get install -y docker-compose-plugin, or docker-compose)"
    )


def _compose(settings: PairSettings, args: Sequence[str], images: Mapping[str, str] | None = None) -> str:
    if not COMPOSE_FILE.is_file():
        raise SetupProblem(f"{COMPOSE_FILE} is missing: run difftest from its checkout")
    command = [*compose_command(), "-p", settings.project, "-f", str(COMPOSE_FILE), *args]
    env = {**os.environ, **settings.environment(images)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPOSITORY, check=False)
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit code {done.returncode}"
        raise SetupProblem(f"'{' '.join([*command[: -len(args)], args[0]])}' failed: {last[-300:]}")
    return done.stdout


def build_images(client: Any, module: Path) -> dict[str, str]:
    """Both images (reused by content), also tagged as docker-compose.yml's defaults."""
    if not module.is_file():
        raise SetupProblem(f"module {module} does not exist: build it with 'make setup' or pass --module PATH")
    if init_binary() is None:
        raise SetupProblem(
            "the compose pair's images need the init (difftest/servers/c/init.c) built with a C compiler: "
            "install one (apt-get install -y gcc)"
        )
    images = {"lua": build_image(client, None), "native": build_image(client, module)}
    for service, tag in images.items():
        client.images.get(tag).tag(IMAGE_REPOSITORY, service)
    return images


def prepare_clock(clock_dir: Path) -> Path:
    """The clock file the servers read from their start; an existing one is kept (a running pair
    maps it), a new one (or one of another size: not a clock) is the harness's fixed origin."""
    clock_dir.mkdir(parents=True, exist_ok=True)
    for service in SERVICES:  # where each server's init listens (docker-compose.yml mounts them)
        (clock_dir / CONTROL_DIR / service).mkdir(parents=True, exist_ok=True)
    path = clock_dir / CLOCK_FILE
    if not path.is_file() or path.stat().st_size != CLOCK_BYTES:
        FrozenClock(path)
    return path


def project_containers(client: Any, project: str) -> list[Any]:
    return list(client.containers.list(all=True, ignore_removed=True, filters={"label": f"{PROJECT_LABEL}={project}"}))


def leftovers(client: Any, project: str) -> list[str]:
    """Whatever of a compose project still exists: containers, networks, volumes."""
    label = {"label": f"{PROJECT_LABEL}={project}"}
    found = [f"container {c.name}" for c in client.containers.list(all=True, ignore_removed=True, filters=label)]
    found += [f"network {n.name}" for n in client.networks.list(filters=label)]
    found += [f"volume {v.name}" for v in client.volumes.list(filters=label)]
    return found


def _published_port(container: Any) -> int | None:
    bindings = (container.attrs.get("HostConfig", {}).get("PortBindings") or {}).get(SERVER_PORT) or []
    ports = [int(b["HostPort"]) for b in bindings if str(b.get("HostPort", "")).isdigit()]
    return ports[0] if ports else None


def _check_ports(client: Any, settings: PairSettings) -> None:
    """Each port free, or held by this project's own server (an `up` of a running pair refreshes it)."""
    ours = {
        c.labels.get(COMPOSE_SERVICE_LABEL): _published_port(c)
        for c in project_containers(client, settings.project)
        if c.status == "running"
    }
    for service, port in settings.ports.items():
        if ours.get(service) != port and tcp_port_in_use(port):
            raise SetupProblem(
                f"port {port} on 127.0.0.1 (for the {service} server) is in use: stop what holds it "
                f"or choose another with DIFFTEST_{service.upper()}_PORT"
            )


def _await_pair(client: Any, settings: PairSettings) -> None:
    """Until both servers answer PING on their published ports (or one has exited)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = dict(settings.ports)
    while waiting:
        for service, port in list(waiting.items()):
            probe = valkey.Valkey("127.0.0.1", port, socket_timeout=2, socket_connect_timeout=2)
            with probe, contextlib.suppress(valkey.ConnectionError, valkey.BusyLoadingError, valkey.TimeoutError):
                if probe.ping():
                    del waiting[service]
        if not waiting:
            return
        for container in project_containers(client, settings.project):
            if container.status == "exited":
                tail = container.logs(tail=5).decode(errors="replace").strip().splitlines()
                name = container.labels.get(COMPOSE_SERVICE_LABEL, container.name)
                raise SetupProblem(f"the {name} server exited at start: {(tail or ['(no output)'])[-1][-240:]}")
        if time.monotonic() > deadline:
            raise SetupProblem(
                f"the {', '.join(waiting)} server(s) did not answer within {START_TIMEOUT_S:.0f}s: "
                f"see 'docker compose -p {settings.project} logs'"
            )
        time.sleep(0.05)


def build(settings: PairSettings, module: Path) -> dict[str, str]:
    """What `compose up` needs from this machine: both images and the clock file."""
    images = build_images(docker_client(), module)
    prepare_clock(settings.clock_dir)
    return images


def up(settings: PairSettings, module: Path) -> dict[str, str]:
    """Build the images, bring the pair up (or refresh it) and wait for it; a pair that failed to
    come up, or an interrupted `up`, is taken down again. Returns service -> address."""
    client = docker_client()
    _check_ports(client, settings)
    images = build_images(client, module)
    prepare_clock(settings.clock_dir)
    try:
        _compose(settings, ["up", "-d", "--remove-orphans"], images)
        _await_pair(client, settings)
    except BaseException:
        with contextlib.suppress(SetupProblem):
            down(settings)
        raise
    return settings.addresses()


def down(settings: PairSettings) -> list[str]:
    """Remove the pair's containers, network and volumes; returns whatever is still left."""
    client = docker_client()
    _compose(settings, ["down", "-v", "--remove-orphans", "-t", "10"])
    return leftovers(client, settings.project)


# -- attaching ----------------------------------------------------------------------------------


def _pairs(client: Any) -> dict[str, dict[str, str]]:
    """project -> service -> container status, for every compose pair on this engine."""
    pairs: dict[str, dict[str, str]] = {}
    for container in client.containers.list(all=True, ignore_removed=True, filters={"label": SERVICE_LABEL}):
        project = container.labels.get(PROJECT_LABEL)
        if project:
            pairs.setdefault(project, {})[container.labels[SERVICE_LABEL]] = container.status
    return pairs


def _file_in(container: Any, path: str) -> bytes:
    """A file of a container, read through the engine (the images have no shell)."""
    chunks, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
        member = archive.next()
        extracted = archive.extractfile(member) if member is not None else None
        return extracted.read() if extracted is not None else b""


def _reads_the_clock_file(container: Any) -> bool:
    """Whether a server container runs on the clock file this harness moves (docker-compose.yml
    gives it CLOCK_VARIABLE; an older file gave libfaketime a timestamp file instead)."""
    environment = container.attrs.get("Config", {}).get("Env") or []
    return any(entry.startswith(f"{CLOCK_VARIABLE}=") for entry in environment)


def _project_option(project: str) -> str:
    return "" if project == DEFAULT_PROJECT else f" --project {project}"


class AttachedPair:
    """A running compose pair the harness replays on; one harness at a time (a lock file)."""

    def __init__(self, project: str | None) -> None:
        self._docker = docker_client()
        wanted = project or os.environ.get("COMPOSE_PROJECT_NAME") or None
        self.project = choose_project(_pairs(self._docker), wanted)
        self.containers = {
            c.labels[SERVICE_LABEL]: c
            for c in project_containers(self._docker, self.project)
            if c.labels.get(SERVICE_LABEL) in SERVICES
        }
        mounts = {
            service: next((m["Source"] for m in c.attrs["Mounts"] if m["Destination"] == "/clock"), None)
            for service, c in self.containers.items()
        }
        if None in mounts.values() or len(set(mounts.values())) != 1:
            raise SetupProblem(
                f"the pair of project {self.project} does not share one clock directory ({mounts}): "
                "bring it up again with 'difftest servers up'"
            )
        self.clock_dir = Path(str(next(iter(mounts.values()))))
        older = [service for service, c in self.containers.items() if not _reads_the_clock_file(c)]
        if older:
            option = _project_option(self.project)
            raise SetupProblem(
                f"the pair of project {self.project} was brought up from an older docker-compose.yml, whose "
                f"servers ({', '.join(older)}) keep their clock another way: bring it down and up again "
                f"(difftest servers down{option}; difftest servers up{option})"
            )
        self._lock = self._take_lock()

    def _take_lock(self) -> Any:
        handle = (self.clock_dir / LOCK_FILE).open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise SetupProblem(
                f"another difftest is attached to the pair of project {self.project}: wait for it to end, "
                "or bring up another pair (difftest servers up --project NAME)"
            ) from None
        return handle

    def server(
        self,
        name: str,
        clock: FrozenClock,
        module: Path | None,
        module_args: Sequence[str] = (),
        tcp_port: int | None = None,
        extra_config: Sequence[str] = (),
    ) -> AttachedServer:
        if name not in self.containers:
            raise SetupProblem(f"the compose pair has no {name!r} server: it serves {', '.join(SERVICES)}")
        if tcp_port is not None or extra_config or module_args:
            raise SetupProblem("an attached pair runs as docker-compose.yml configures it: drop the extra settings")
        container = self.containers[name]
        self._check_module(name, container, module)
        # a pair brought up from an older docker-compose.yml has no init: its restarts stay container restarts
        control = next((m["Source"] for m in container.attrs["Mounts"] if m["Destination"] == "/control"), None)
        control_socket = Path(str(control)) / CONTROL_SOCKET if control is not None else None
        return AttachedServer(name, container, self._docker, clock, module, control_socket)

    def _check_module(self, name: str, container: Any, module: Path | None) -> None:
        """The pair must run the build this harness was told to judge, or its verdicts are about
        another module: the file in the container is compared with the local one."""
        if module is None:
            return
        if not module.is_file():
            raise SetupProblem(f"module {module} does not exist: build it with 'make setup' or pass --module PATH")
        try:
            inside = _file_in(container, IN_IMAGE["module"])
        except Exception as exc:  # NotFound: the container has no module at all
            raise SetupProblem(
                f"the {name} server of project {self.project} has no module ({exc.__class__.__name__}): "
                "bring the pair up again with 'difftest servers up'"
            ) from exc
        if hashlib.sha256(inside).digest() != hashlib.sha256(module.read_bytes()).digest():
            raise SetupProblem(
                f"the {name} server of project {self.project} runs another build than {module}: "
                f"refresh it with 'difftest servers up --module {module}'"
            )

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the lock
            self._lock = None


class AttachedServer(DockerServer):
    """A server of the compose pair: the docker backend's server, reached by TCP on its published
    port, restarted and killed as its container; never removed, flushed when attached."""

    def __init__(self, name: str, container: Any, client: Any, clock: FrozenClock, module: Path | None,
                 control_socket: Path | None = None) -> None:  # fmt: skip
        self.name = name
        self.clock = clock
        self.module = module
        self.module_args = ()
        self.extra_config = ()
        self.tcp_port = _published_port(container)
        if self.tcp_port is None:
            raise SetupProblem(f"the {name} container {container.name} publishes no port: run 'difftest servers up'")
        self.workdir = clock.path.parent  # the only directory of this machine the server reads
        self.socket_path = self.workdir / "none.sock"  # never used: the address is TCP
        self.logfile = self.workdir / "none.log"
        self.starts = 0
        self._docker = client
        self._image = container.image.id
        self._container = container
        self._client: valkey.Valkey | None = None
        self._with_init = control_socket is not None
        if control_socket is not None:
            self.control_socket = control_socket

    @property
    def address(self) -> Address:
        assert self.tcp_port is not None
        return ("127.0.0.1", self.tcp_port)

    def _spawn(self, port: int | None) -> tuple[int, int | None]:
        if not self.running:
            self._container.start()
        return 0, port

    def _reachable(self) -> bool:
        return self.pings()

    def start(self) -> None:
        first = self.starts == 0
        super().start()
        if first:
            self.clean()

    def clean(self) -> None:
        """What earlier runs left: keys, scripts, users (users live in memory, a restart clears
        them too, but the pair may not have restarted)."""
        self.client.flushall()
        self.client.script_flush()
        listed: list[bytes | str] = self.client.acl_users()  # type: ignore[assignment]
        users = [u.decode() if isinstance(u, bytes) else u for u in listed]
        for user in users:
            if user != "default":
                self.client.acl_deluser(user)

    def close(self) -> None:
        """Leave the pair running: a server stopped halfway (an interrupted restart) starts again."""
        self._drop_client()
        self._close_control()
        with contextlib.suppress(Exception):
            if not self.running:
                self._container.start()
