"""What a killed process leaves in /dev/shm: each server group names its owner, the next start removes an orphan."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from difftest.base.processes import alive

SHM = Path("/dev/shm")
OWNER_FILE = "owner.pid"  # in a server group's directory: the pid that removes it
PREFIX = "difftest-"  # a server group's directory's name (tempfile.mkdtemp's prefix)


def mark_owner(root: Path) -> None:
    """Name this process as the one that removes `root` (a server group's directory in /dev/shm): if
    it is killed before it can (SIGKILL, or a signal its test fixture never sees), the next start's
    `sweep_leftovers` does."""
    if root.parent == SHM and root.name.startswith(PREFIX):  # not an attached pair's clock directory
        with contextlib.suppress(OSError):
            (root / OWNER_FILE).write_text(f"{os.getpid()}\n")


def sweep_leftovers(shm: Path = SHM) -> list[Path]:
    """Remove what killed processes left in `shm`: server-group directories whose owner no longer
    runs. Never anything a live process holds, nor a directory without an owner (one being made, or
    not a server group's). Returns what it removed."""
    removed: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in shm.iterdir():
            if entry.name.startswith(PREFIX):
                try:
                    owner = int((entry / OWNER_FILE).read_text().strip())
                except (OSError, ValueError):
                    continue  # not a server group's, or its owner still writing: left alone
                if not alive(owner):
                    shutil.rmtree(entry, ignore_errors=True)
                    removed.append(entry)
    return removed
