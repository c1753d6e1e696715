"""The frozen wall clock that every server of a pair reads, moved only by the harness.

libfaketime, preloaded into the servers only, reads the absolute time from a timestamp file on
every clock call (FAKETIME_NO_CACHE); the monotonic clock stays real so the event loop runs.
Rewriting the file (atomically, by rename) is the only way time moves.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
from collections.abc import Mapping
from pathlib import Path

from difftest.problems import SetupProblem

LIBFAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
)

# 2026-01-01T00:00:00Z: a fixed origin so that every run's scores are reproducible.
DEFAULT_START_MS = 1_767_225_600_000
# 9999-12-31T23:59:59.999Z: the last moment libfaketime's timestamp file (a four-digit year, written
# through datetime) can hold; a history's clock must stay within [0, MAX_MS]
MAX_MS = 253_402_300_799_999
LIBFAKETIME_VARIABLE = "DIFFTEST_LIBFAKETIME"
ELF_MAGIC = b"\x7fELF"


def find_libfaketime() -> Path:
    override = os.environ.get(LIBFAKETIME_VARIABLE)
    if override:
        # named on purpose: a wrong path must not fall back to another library (or preload nothing,
        # which the dynamic loader only warns about, leaving the servers on the real clock)
        return _checked_override(override)
    for candidate in LIBFAKETIME_CANDIDATES:
        if Path(candidate).is_file():
            return Path(candidate)
    raise SetupProblem(
        "libfaketime not found (needed to freeze the servers' clock): "
        "run 'apt-get install -y libfaketime' or set DIFFTEST_LIBFAKETIME to its path"
    )


def _checked_override(value: str) -> Path:
    path = Path(value)
    fix = f"point {LIBFAKETIME_VARIABLE} at libfaketime.so.1, or unset it to use Debian's (apt-get install libfaketime)"
    if not path.is_file():
        raise SetupProblem(f"{LIBFAKETIME_VARIABLE}={value}: no such file; {fix}")
    try:
        with path.open("rb") as library:
            magic = library.read(len(ELF_MAGIC))
    except OSError as problem:
        raise SetupProblem(f"{LIBFAKETIME_VARIABLE}={value}: cannot be read ({problem.strerror}); {fix}") from None
    if magic != ELF_MAGIC:
        raise SetupProblem(f"{LIBFAKETIME_VARIABLE}={value}: not a shared library (no ELF header); {fix}")
    return path.absolute()


def format_timestamp(ms: int) -> str:
    """libfaketime's absolute format, UTC (the servers run with TZ=UTC), 100 ns into the millisecond.

    libfaketime turns the fraction into nanoseconds by truncating a double, so ".200" becomes
    0.199999999 s, and the servers add up to a millisecond of real time to the frozen reading
    (measured: readings spread over [t - 1 ns, t + 1 ms)); a reading then fell in the millisecond
    before about one time in 300, on one server and not the other. 100 ns in, every reading
    stays within its millisecond.
    """
    if ms < 0:
        raise ValueError(f"the frozen clock cannot go before the epoch: {ms} ms")
    return f"{_second(ms // 1000)}.{ms % 1000:03d}0001"


@functools.lru_cache(maxsize=256)
def _second(seconds: int) -> str:
    """The date and time of a second, formatted once (a history's clock stays within a few)."""
    return f"{dt.datetime.fromtimestamp(seconds, tz=dt.UTC):%Y-%m-%d %H:%M:%S}"


class FrozenClock:
    """One timestamp file; every server started with `server_env()` reads it."""

    def __init__(self, path: Path, start_ms: int = DEFAULT_START_MS) -> None:
        self.path = path
        self._scratch = str(path.with_suffix(".tmp"))
        self.library = find_libfaketime()
        self._now_ms = start_ms
        self._write()

    @property
    def now_ms(self) -> int:
        return self._now_ms

    def set(self, ms: int) -> None:
        """Move the clock to an absolute time; callers then confirm each server sees it."""
        self._now_ms = ms
        self._write()

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"the frozen clock only moves forward; advance({ms}) was asked")
        self.set(self._now_ms + ms)

    def server_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.pop("FAKETIME", None)  # the variable would win over the file
        from difftest.servers.fastboot import fastboot_library

        shim = fastboot_library()
        preload = f"{shim}:{self.library}" if shim else str(self.library)
        env.update(
            LD_PRELOAD=preload,
            FAKETIME_TIMESTAMP_FILE=str(self.path),
            FAKETIME_NO_CACHE="1",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
            TZ="UTC",
        )
        return env

    def _write(self) -> None:
        # a half-written file makes libfaketime abort the server: write aside, then rename
        # (os-level calls: the clock moves at every advance and every history)
        scratch = os.open(self._scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(scratch, f"{format_timestamp(self._now_ms)}\n".encode())
        finally:
            os.close(scratch)
        os.replace(self._scratch, self.path)
