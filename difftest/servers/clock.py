"""The frozen wall clock that every server of a pair reads, moved only by the harness.

The clock is a file of 8 bytes, the time in ms since the epoch (a little-endian int64), that the
harness and every server map shared: the servers through the project's clock library
(`difftest/servers/c/frozen_clock.c`, preloaded into the servers only), which answers their
wall-clock calls from it; the monotonic clocks stay real so the event loop runs. Moving the clock
is one aligned store into the mapping, seen by each server's next command: nothing to wait for and
nothing to confirm (docs/design-notes.md, "The frozen clock").
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Mapping
from pathlib import Path

from difftest.history.format import DEFAULT_START_MS

CLOCK_BYTES = 8  # one int64
CLOCK_FILE = "frozen-ms"  # its name in a server group's directory (and the compose pair's /clock)
CLOCK_VARIABLE = "DIFFTEST_CLOCK_FILE"  # where the clock library finds the file


class FrozenClock:
    """One clock file; every server started with `server_env()` (or given the file and the library
    in a container) reads it."""

    def __init__(self, path: Path, start_ms: int = DEFAULT_START_MS) -> None:
        self.path = path
        # opened, never replaced: a running server (a container of the compose pair, say) maps this
        # very file, so it is resized in place, and a stale file of another format is overwritten
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(descriptor, CLOCK_BYTES)
            self._mapping = mmap.mmap(descriptor, CLOCK_BYTES)
        finally:
            os.close(descriptor)
        # one aligned int64 over the mapping: a server never reads it half-written
        self._cell = ctypes.c_int64.from_buffer(self._mapping)
        self._now_ms = start_ms
        self._cell.value = start_ms

    @property
    def now_ms(self) -> int:
        return self._now_ms

    def set(self, ms: int) -> None:
        """Move the clock to an absolute time: each server's next command reads it."""
        if ms < 0:
            raise ValueError(f"the frozen clock cannot go before the epoch: {ms} ms")
        self._now_ms = ms
        self._cell.value = ms

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"the frozen clock only moves forward; advance({ms}) was asked")
        self.set(self._now_ms + ms)

    def server_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a server on this machine: the clock library (and the fastboot shim,
        when there is one) preloaded, pointed at this clock's file."""
        from difftest.servers.compiled import clock_library, fastboot_library

        env = dict(os.environ if base is None else base)
        env.update(server_clock_env(str(self.path), str(clock_library()), fastboot_library()))
        return env


def server_clock_env(clock_file: str, clock_library: str, fastboot: Path | str | None) -> dict[str, str]:
    """What a server's environment needs to run on a clock file: the same for a server started
    here and for one in a container (there, with the paths the image and its mounts give)."""
    preload = f"{fastboot}:{clock_library}" if fastboot else clock_library
    return {"LD_PRELOAD": preload, CLOCK_VARIABLE: clock_file, "TZ": "UTC"}
