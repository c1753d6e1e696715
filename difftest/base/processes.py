"""Whether a process still runs, asked by its pid (a zombie, killed and not yet reaped, does not)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def alive(pid: int) -> bool:
    """True while `pid` runs (also when it is another user's); False once it has ended, or ended
    and waits to be reaped (a zombie has done all it will)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False
