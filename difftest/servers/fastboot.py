"""Builds (once, cached) and finds the fastboot shim that shortens a server's start-up calibration.

Optional: without a C compiler the servers start at their normal speed. DIFFTEST_FASTBOOT=0 turns
it off.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("fastboot.c")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "difftest"


@functools.cache
def fastboot_library() -> Path | None:
    if os.environ.get("DIFFTEST_FASTBOOT", "1") == "0":
        return None
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not SOURCE.is_file():
        return None
    digest = hashlib.sha1(SOURCE.read_bytes()).hexdigest()[:12]
    target = _cache_dir() / f"fastboot-{digest}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        result = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(SOURCE), "-ldl"],
            capture_output=True,
            check=False,
        )
        if result.returncode != 0:
            return None
        os.replace(built, target)  # atomic: parallel workers may build it at the same time
    return target
