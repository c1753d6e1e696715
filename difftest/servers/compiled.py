"""Builds (once, cached by the source's digest) and finds the project's small C pieces: the frozen
clock every test server preloads (needed), the fastboot shim and the containers' init (optional:
without them servers start more slowly; DIFFTEST_FASTBOOT=0 and DIFFTEST_INIT=0 turn them off).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from difftest.base.problems import SetupProblem

CLOCK_SOURCE = Path(__file__).with_name("c") / "frozen_clock.c"
SOURCE = Path(__file__).with_name("c") / "fastboot.c"
INIT_SOURCE = Path(__file__).with_name("c") / "init.c"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "difftest"


@functools.cache
def clock_library() -> Path:
    """The frozen clock (frozen_clock.c): without it no server can run on the harness's time."""
    built = _built(CLOCK_SOURCE, "frozen-clock", ".so", ["-shared", "-fPIC"], ["-ldl"])
    if built is None:
        raise SetupProblem(
            f"could not build the servers' frozen clock ({CLOCK_SOURCE.name}): install a C compiler "
            "('apt-get install -y gcc') and try again"
        )
    return built


@functools.cache
def fastboot_library() -> Path | None:
    if os.environ.get("DIFFTEST_FASTBOOT", "1") == "0":
        return None
    return _built(SOURCE, "fastboot", ".so", ["-shared", "-fPIC"], ["-ldl"])


@functools.cache
def init_binary() -> Path | None:
    """The containers' PID 1 (init.c), which restarts valkey-server inside its container; None
    without a C compiler (then a restart of a server is a restart of its container)."""
    if os.environ.get("DIFFTEST_INIT", "1") == "0":
        return None
    return _built(INIT_SOURCE, "init", "", [], [])


def _built(source: Path, name: str, suffix: str, flags: list[str], libraries: list[str]) -> Path | None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not source.is_file():
        return None
    digest = hashlib.sha1(source.read_bytes()).hexdigest()[:12]
    target = _cache_dir() / f"{name}-{digest}{suffix}"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        result = subprocess.run(
            [compiler, *flags, "-O2", "-o", str(built), str(source), *libraries],
            capture_output=True,
            check=False,
        )
        if result.returncode != 0:
            return None
        os.replace(built, target)  # atomic: parallel workers may build it at the same time
    return target
