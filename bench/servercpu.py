"""The CPU seconds a replayer's two servers have used so far, read from /proc (the benchmarks' servers column)."""

from __future__ import annotations

import os
from pathlib import Path


def servers_cpu_s(replayer: object) -> float:
    """The CPU seconds (user and system) of both servers' processes so far (/proc); a server whose
    process is not this machine's (a container's, gone) counts nothing."""
    total = 0.0
    for server in (getattr(replayer, "lua_server", None), getattr(replayer, "native_server", None)):
        pid = getattr(server, "pid", None)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, TypeError):
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total
