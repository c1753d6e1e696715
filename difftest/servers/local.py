"""Embedded valkey-server processes: one temp dir each, AOF on, the frozen clock preloaded."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import valkey

from difftest.base.problems import SetupProblem
from difftest.servers.clients import SocketClients
from difftest.servers.clock import FrozenClock
from difftest.servers.compiled import fastboot_library
from difftest.servers.valkeys import checked_binary
from difftest.servers.walker import walker_module
from difftest.servers.zygote import ForkedServer, Zygote, ZygoteGone

START_TIMEOUT_S = 20.0
ZYGOTE_VARIABLE = "DIFFTEST_ZYGOTE"  # 0: every start of a server is an exec of its own
SERVER_HZ = "100"  # every server the harness starts, in a container too (docker-compose.yml says it itself)
STOP_TIMEOUT_S = 20.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: the server gets SIGKILL if the harness dies first."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tcp_port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def fast_temp_dir() -> str | None:
    """/dev/shm when it is usable: the clock file is rewritten at every advance, and the AOF is
    fsynced at every write; on tmpfs both cost microseconds, not the disk's hundreds."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


# What a server started for histories may be made to do (docs/security.md): DEBUG and MODULE only
# from this machine (the harness's DEBUG SET-ACTIVE-EXPIRE; a history's raw step cannot name
# either), RESTORE's and loaded RDBs' payloads checked whole, no protected config changeable at all.
# A module constant, so that bench/bench_replay.py --hardening can start a pair without the checks
# it costs to measure (Valkey's defaults but the DEBUG the harness needs).
HARDENING: tuple[str, ...] = (
    "--enable-debug-command", "local",
    "--enable-module-command", "local",
    "--enable-protected-configs", "no",
    "--sanitize-dump-payload", "yes",
)  # fmt: skip
RELAXED: tuple[str, ...] = ("--enable-debug-command", "local", "--enable-module-command", "local",
                            "--sanitize-dump-payload", "no")  # fmt: skip


def pin_to_core(core: int) -> int:
    """Pin this process (and the servers it starts from now on) to one core, as the measurements
    advise: a loopback round trip costs ~10x less when client and servers share a core."""
    cores = sorted(os.sched_getaffinity(0))
    chosen = cores[core % len(cores)]
    os.sched_setaffinity(0, {chosen})
    return chosen


_LOG_PREFIX = re.compile(r"^\d+:[A-Z] \d{2} \w{3} \d{4} [\d:.]+ [.*#-] ")


def _log_message(line: str) -> str:
    """A server log line without its "pid:role date time level" prefix."""
    return _LOG_PREFIX.sub("", line.strip())


SUN_PATH_MAX = 107  # a unix socket's address holds 108 bytes on Linux, its final NUL one of them


def socket_path_for(workdir: Path) -> tuple[Path, Path | None]:
    """Where a server's unix socket goes: in its data dir, or, when that path is too long for a socket's
    address (a deep --state, checkout or temporary directory: valkey-server refuses to start), in a short
    directory of its own under the temporary directory, returned too, so that close() removes it."""
    wanted = workdir / "valkey.sock"  # as the server is given it (and measures it)
    if len(os.fsencode(wanted)) <= SUN_PATH_MAX:
        return wanted, None
    short = Path(tempfile.mkdtemp(prefix="difftest-sock-"))
    return short / "valkey.sock", short


class EmbeddedServer(SocketClients):
    """One valkey-server child process with its own data dir, reached by a unix socket.

    `restart()` shuts down gracefully, `crash()` kills with SIGKILL; both start again on the same
    data (AOF with appendfsync always, so an acknowledged write survives) with a new run_id.
    """

    def __init__(
        self,
        name: str,
        workdir: Path,
        clock: FrozenClock,
        module: Path | None = None,
        module_args: Sequence[str] = (),
        tcp_port: int | None = None,
        extra_config: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.workdir = workdir
        self.clock = clock
        self.module = module
        self.module_args = tuple(module_args)
        self.requested_port = tcp_port  # None: unix socket only; 0: a free port is picked
        self.extra_config = tuple(extra_config)
        self.hardening = HARDENING  # read once: a server keeps its flags across restarts
        self.tcp_port: int | None = None
        self.binary = checked_binary()
        if module is not None and not module.is_file():
            raise SetupProblem(
                f"module {module} does not exist: build it with 'make setup' "
                "(cargo build --release in executors/native) or pass the path of your build"
            )
        self.walker = walker_module()  # DIFFTEST.WALK, the replay's keyspace walk (difftest/servers/walker-crate)
        self.socket_path, self._socket_dir = socket_path_for(workdir)
        self.logfile = workdir / "valkey.log"
        self.stderr_file = workdir / "valkey.stderr"  # what the server writes there, since its last start
        self._process: subprocess.Popen[bytes] | ForkedServer | None = None
        self._zygote: Zygote | None = None  # with the fastboot shim: what forks this server's starts
        self._stderr = -1  # stderr_file, open for appending while the server is in use
        self._client: valkey.Valkey | None = None
        self._ready_read = -1  # the read end of the shim's readiness pipe while a start is awaited
        self.starts = 0

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._process is not None:
            raise RuntimeError(f"{self.name} is already running")
        attempts = 3 if self.requested_port == 0 else 1
        for attempt in range(attempts):
            port = self._choose_port()
            try:
                self._launch(port)
                return
            except _PortTaken:
                if attempt + 1 == attempts:
                    raise SetupProblem(
                        f"TCP port {port} on 127.0.0.1 is in use: choose another port or stop the process that holds it"
                    ) from None
                self._forget_port()

    def _forget_port(self) -> None:
        """A port the kernel picked for this server was taken while it was down (by another
        process's pick, or as the local port of an outgoing connection: the ports come from one
        range): such a port is not ours to keep, so the next start picks a new one. Its replica
        follows, being made again for each start of its primary (difftest/replay/replicas.py)."""
        if self.requested_port == 0:
            self.tcp_port = None

    def _choose_port(self) -> int | None:
        if self.tcp_port is not None:
            return self.tcp_port  # a restart keeps its port, so replicas can find it again
        if self.requested_port is None:
            return None
        if self.requested_port == 0:
            return free_tcp_port()
        if tcp_port_in_use(self.requested_port):
            raise SetupProblem(
                f"TCP port {self.requested_port} on 127.0.0.1 is in use: choose another port "
                "or stop the process that holds it"
            )
        return self.requested_port

    def _command_line(self, port: int | None) -> list[str]:
        args = [
            str(self.binary),
            "--dir", str(self.workdir),
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--port", str(port or 0),
            "--bind", "127.0.0.1",
            "--logfile", str(self.logfile),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--auto-aof-rewrite-percentage", "0",  # rewrites only between histories (replay's reset)
            # the server notices a rewrite's end in its cron: at hz 10, up to 100 ms after the rewrite
            # a reset asked for, by when most histories have restarted the server on the old files
            "--hz", SERVER_HZ,
            "--save", "",
            "--daemonize", "no",
        ]  # fmt: skip
        args += list(self.hardening)
        args += list(self.extra_config)
        args += ["--loadmodule", str(self.walker)]
        if self.module is not None:
            args += ["--loadmodule", str(self.module), *self.module_args]
        return args

    def _launch(self, port: int | None) -> None:
        self._await_ready(*self._spawn(port))

    def _spawn(self, port: int | None) -> tuple[int, int | None]:
        """Start the process; returns what `_await_ready` needs (so several can start at once)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log_offset = self.logfile.stat().st_size if self.logfile.exists() else 0
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        if self._stderr < 0:
            self._stderr = os.open(self.stderr_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        os.ftruncate(self._stderr, 0)  # only this start's words are read if it fails
        command_line = self._command_line(port)
        env = self.clock.server_env()
        env["DIFFTEST_PARENT_PID"] = str(os.getpid())
        # With the fastboot shim the server binds its life to ours by itself, a zygote forks it
        # (no exec: zygote.py), and it tells when it listens, through a pipe whose write end only
        # the new server holds. Without the shim, Popen with a pre-exec hook that binds its life
        # to ours (a slower fork of this process), and the caller polls.
        if fastboot_library() is None:
            self._process = subprocess.Popen(
                command_line, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
                preexec_fn=_die_with_parent,
            )  # fmt: skip
            return log_offset, port
        self._ready_read, ready_write = os.pipe()
        try:
            if os.environ.get(ZYGOTE_VARIABLE, "1") == "0":
                os.set_inheritable(ready_write, True)
                env["DIFFTEST_READY_FD"] = str(ready_write)
                self._process = subprocess.Popen(
                    command_line, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
                    close_fds=False,
                )  # fmt: skip
            else:
                self._process = self._forked(command_line, env, ready_write, log_offset)
        except BaseException:
            self._close_ready()
            raise
        finally:
            os.close(ready_write)
        return log_offset, port

    def _forked(self, command_line: list[str], env: dict[str, str], ready_write: int, log_offset: int) -> ForkedServer:
        """A server forked by this server's zygote, made (again) for this command line and
        environment: a zygote that died (or never started: a bad clock file, say) is one start
        failure, as an exec's."""
        zygote = self._zygote
        if zygote is None or (zygote.command_line, zygote.env) != (command_line, env) or not zygote.alive:
            if zygote is not None:
                zygote.close()
            self._zygote = zygote = Zygote(command_line, env, self._stderr)
        try:
            return zygote.spawn(ready_write, self._stderr)
        except ZygoteGone as gone:
            self._zygote = None
            raise self._start_failure(gone.returncode, self._stderr_text(), log_offset, None) from None

    def _stderr_text(self) -> str:
        try:
            return self.stderr_file.read_bytes().decode(errors="replace")
        except OSError:
            return ""

    def _wait_listening(self, deadline: float) -> None:
        """Block until the server listens on its socket, or dies first (the shim's pipe: a byte,
        or end of file); without the shim, return at once (the caller polls). A server that did
        not load the shim never writes: its socket file or its exit ends the wait as well."""
        if self._ready_read < 0:
            return
        try:
            while time.monotonic() < deadline:
                if select.select([self._ready_read], [], [], 0.05)[0]:
                    return
                if self.socket_path.exists() or (self._process is not None and self._process.poll() is not None):
                    return
        finally:
            self._close_ready()

    def _close_ready(self) -> None:
        if self._ready_read >= 0:
            os.close(self._ready_read)
            self._ready_read = -1

    def _await_ready(self, log_offset: int, port: int | None) -> None:
        process = self._process
        assert process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        self._wait_listening(deadline)
        while True:
            code = process.poll()
            if code is not None:
                self._process = None
                raise self._start_failure(code, self._stderr_text(), log_offset, port)
            if self.socket_path.exists() and self.pings():
                break
            if time.monotonic() > deadline:
                self.kill()
                raise SetupProblem(
                    f"{self.name}: valkey-server did not answer within {START_TIMEOUT_S:.0f}s; see {self.logfile}"
                )
            time.sleep(0.0005)
        self.tcp_port = port
        self.starts += 1

    def _start_failure(self, code: int | None, stderr: str, log_offset: int, port: int | None) -> Exception:
        log = ""
        if self.logfile.exists():
            with self.logfile.open("rb") as fh:
                fh.seek(log_offset)
                log = fh.read().decode(errors="replace")
        text = stderr + "\n" + log
        if "Address already in use" in text and port:
            return _PortTaken()
        lines = [_log_message(ln) for ln in text.splitlines() if ln.strip()]
        if "Module" in text and ("failed" in text or "Can't load" in text or "Error" in text):
            # the server's own words about the module (e.g. "does not export ValkeyModule_OnLoad()"),
            # never an empty reason: else the last lines it wrote
            said = [ln for ln in lines if "odule" in ln] or lines[-2:] or ["(no output)"]
            return SetupProblem(
                f"{self.name}: valkey-server could not load module {self.module}: "
                f"{' / '.join(said[-2:])[-300:]}; pass the libemq_native.so that cargo build --release "
                "makes (make setup builds this checkout's)"
            )
        last = lines[-1:] or ["(no output)"]
        return SetupProblem(f"{self.name}: valkey-server exited with code {code} at start: {last[0][-240:]}")

    def request_shutdown(self) -> None:
        """Send SHUTDOWN without waiting for the process: `stop` waits."""
        if self._process is None:
            return
        self.shutdown()

    def stop(self) -> None:
        """Graceful: SHUTDOWN (the AOF is already fsynced), then wait for the process to end."""
        process = self._process
        if process is None:
            return
        self.shutdown()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._close_process()

    def kill(self) -> None:
        """SIGKILL, no goodbye: what a crash looks like to the data dir."""
        process = self._process
        if process is None:
            return
        self._drop_client()
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()
        self._close_process()

    def restart(self) -> None:
        self.stop()
        self.start()

    # a group's restart, in three phases so that its servers stop and start side by side
    def restart_begin(self, crash: bool) -> None:
        if crash:
            self.kill()
        else:
            self.request_shutdown()

    def restart_spawn(self) -> tuple[int, int | None]:
        self.stop()
        return self._spawn(self._choose_port())

    def restart_await(self, started: tuple[int, int | None]) -> None:
        try:
            self._await_ready(*started)
        except _PortTaken:
            if self.requested_port != 0:
                raise SetupProblem(
                    f"TCP port {started[1]} on 127.0.0.1 was taken while {self.name} restarted: "
                    "choose another port or stop the process that holds it"
                ) from None
            self._forget_port()
            self.start()

    def crash(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        """The server killed, its zygote gone, its stderr closed (the data dir stays)."""
        self.kill()
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        if self._stderr >= 0:
            os.close(self._stderr)
            self._stderr = -1
        if self._socket_dir is not None:
            with contextlib.suppress(OSError):
                self.socket_path.unlink(missing_ok=True)
                self._socket_dir.rmdir()

    def _close_process(self) -> None:
        self._close_ready()
        if isinstance(self._process, ForkedServer):
            self._process.close()
        self._process = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def zygote_pid(self) -> int | None:
        """The process that forks this server's starts (its CPU counts their reaped children's)."""
        return self._zygote.process.pid if self._zygote is not None else None


class _PortTaken(Exception):
    pass
