"""A zygote: one loaded valkey-server that forks each start of its server (fastboot.c, part 3).

An embedded server is started afresh at every restart and crash of a history. A start by exec maps
and relocates the binary and its libraries and runs the C library's start-up again, whose CPU
probes trap to the hypervisor on a virtual machine; the zygote did all that once, before main(),
and a child it forks goes on into main() as a fresh server would: its own random seed (a new
run_id), the modules loaded, the AOF read. The harness talks to the zygote through a socket pair
(SOCK_SEQPACKET): a request carries the child's readiness pipe and stderr, the answer its pid and a
pidfd, which the harness waits on and signals through (`ForkedServer`, the part of
`subprocess.Popen` that servers use). The zygote reaps its children and reports their exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import subprocess
from collections.abc import Mapping, Sequence

# what the zygote sends: kind ('s' started, 'x' exited), pid, errno or wait status (fastboot.c)
MESSAGE = struct.Struct("@cii")  # native alignment, as the C struct is laid out
STARTED, EXITED = b"s", b"x"
REQUEST = b"s"
ZYGOTE_VARIABLE = "DIFFTEST_ZYGOTE_FD"
CLOSE_TIMEOUT_S = 10.0


class ZygoteGone(OSError):
    """The zygote is not there to fork (it died, or never started: see its exit status)."""

    def __init__(self, returncode: int | None) -> None:
        super().__init__(f"the zygote exited ({returncode})")
        self.returncode = returncode


class Zygote:
    """A valkey-server process held before main(), forking servers of one command line."""

    def __init__(self, command_line: Sequence[str], env: Mapping[str, str], stderr: int) -> None:
        self.command_line = list(command_line)
        self.env = dict(env)  # what its children run with (besides the socket's variable)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                self.command_line,
                env={**env, ZYGOTE_VARIABLE: str(theirs.fileno())},
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours
        self.exits: dict[int, int] = {}  # pid -> wait status, reported and not yet asked for

    def spawn(self, ready_write: int, stderr: int) -> ForkedServer:
        """A new server forked, its readiness pipe and stderr given; raises ZygoteGone when the
        zygote is not there (its exit code says why)."""
        try:
            socket.send_fds(self.control, [REQUEST], [ready_write, stderr])
            while True:
                kind, pid, value, descriptors = self._receive()
                if kind == STARTED:
                    if pid <= 0 or not descriptors:
                        raise OSError(value, f"the zygote could not fork: {os.strerror(value)}")
                    return ForkedServer(self, pid, descriptors[0])
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise ZygoteGone(self._ended()) from None

    def status_of(self, pid: int) -> int:
        """The wait status of a child that has exited (its pidfd said so): reported at its exit."""
        while pid not in self.exits:
            try:
                self._receive()
            except (ConnectionResetError, EOFError):
                return signal.SIGKILL  # the zygote is gone: its children died with it (SIGKILL)
        return self.exits.pop(pid)

    def _receive(self) -> tuple[bytes, int, int, list[int]]:
        message, descriptors, _, _ = socket.recv_fds(self.control, MESSAGE.size, 1)
        if not message:
            raise EOFError("the zygote closed its socket")
        kind, pid, value = MESSAGE.unpack(message)
        if kind == EXITED:
            self.exits[pid] = value
        return kind, pid, value, descriptors

    def _ended(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.process.wait(timeout=CLOSE_TIMEOUT_S)
        return None

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """The zygote goes (it exits when its socket closes; its children die with it)."""
        self.control.close()
        try:
            self.process.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ForkedServer:
    """A server the zygote forked: what `subprocess.Popen` gives a started server, through a pidfd
    (never the pid: it cannot be another process's by the time it is signalled)."""

    def __init__(self, zygote: Zygote, pid: int, pidfd: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.pidfd = pidfd
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self._ended()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self.pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.zygote.command_line, timeout or 0.0)
            self._ended()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def _ended(self) -> None:
        self.returncode = os.waitstatus_to_exitcode(self.zygote.status_of(self.pid))
        os.close(self.pidfd)
        self.pidfd = -1

    def close(self) -> None:
        """Forget the process (it has ended, or dies with its zygote): the pidfd is closed."""
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
