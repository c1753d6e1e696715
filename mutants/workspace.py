"""A mutant applied to a cached copy of its executor's source, and (native) built into its own module."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from difftest.base.filelock import file_lock
from executors.native.adapter import seed_dependencies
from mutants.catalogue import HERE

DEFAULT_CACHE = HERE / ".cache"
MODULE_NAME = "libemq_native.so"
BUILD_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Workspace:
    """A patched copy; `artifact` is what the campaign takes: the module .so, or the scripts dir."""

    executor: str
    directory: Path
    artifact: Path | None  # None: unviable
    unviable: str = ""  # why (patch did not apply, build failed)
    build_s: float = 0.0  # 0 when taken from the cache
    cached: bool = False


def source_files(executor: str, source: Path) -> list[Path]:
    """The files a mutant can patch: the crate (never target/), or the scripts."""
    if executor == "lua":
        return sorted(source.glob("*.lua"))
    files = [source / "Cargo.toml", source / "Cargo.lock", *sorted((source / "src").rglob("*.rs"))]
    return [f for f in files if f.is_file()]


def cache_key(executor: str, source: Path, patch: str) -> str:
    digest = hashlib.sha256(executor.encode() + b"\0" + patch.encode() + b"\0")
    for path in source_files(executor, source):
        digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def _copy_source(executor: str, source: Path, into: Path) -> None:
    for path in source_files(executor, source):
        target = into / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)  # a fresh mtime: cargo must never take an older build as current


def apply_patch(patch: str, directory: Path, dry_run: bool = False) -> str:
    """`patch -p1` in `directory`; the error text, or "" when it applied cleanly (no fuzz, no offset)."""
    command = ["patch", "-p1", "--batch", "--forward", "--fuzz=0", "--no-backup-if-mismatch", "-d", str(directory)]
    if dry_run:
        command.append("--dry-run")
    result = subprocess.run(command, input=patch, capture_output=True, text=True, check=False)
    text = result.stdout + result.stderr
    if result.returncode != 0:
        return text.strip() or f"patch exited {result.returncode}"
    if "offset" in text or "fuzz" in text:
        return f"applied only with offset or fuzz: {text.strip()}"
    return ""


@contextmanager
def _build_lock(cache: Path) -> Iterator[None]:
    """One cargo build at a time from this cache, whatever process asks (the machine has 2 cores)."""
    with file_lock(cache / "build.lock"):
        yield


def _build_native(crate: Path, cache: Path, log: Path) -> tuple[Path | None, str]:
    """cargo build --release with the cache's shared target dir (dependencies compiled once)."""
    jobs = os.environ.get("CARGO_BUILD_JOBS", "2")
    env = dict(os.environ, CARGO_TARGET_DIR=str(cache / "target"), CARGO_BUILD_JOBS=jobs)
    with _build_lock(cache), log.open("w") as out:
        seed_dependencies(cache / "target")  # a first build: the checkout's dependencies, compiled the same
        # every source file newer than the last build in the shared target: cargo leaves the path out
        # of a root crate's fingerprint, so a copy made before another mutant's build (while this one
        # waited for the lock) looked fresh to it and took that mutant's .so (a null run built so
        # ran a crashing mutant, and was void)
        now = time.time()
        for path in source_files("native", crate):
            os.utime(path, (now, now))
        try:
            result = subprocess.run(
                ["cargo", "build", "--release", "--locked", "--manifest-path", str(crate / "Cargo.toml")],
                env=env, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return None, f"cargo build took over {BUILD_TIMEOUT_S:.0f} s"
        if result.returncode != 0:
            return None, f"cargo build failed (exit {result.returncode}); see {log}"
        built = cache / "target" / "release" / MODULE_NAME
        module = crate.parent / MODULE_NAME
        shutil.copy2(built, module)  # the shared target's copy is overwritten by the next build
    return module, ""


def prepare(executor: str, source: Path, patch: str, cache: Path = DEFAULT_CACHE) -> Workspace:
    """The patched copy under cache/<executor>/<key>/, built if native; reused when already there.
    Safe when several processes (shards, test workers) share the cache: one prepares, others wait."""
    key = cache_key(executor, source, patch)
    with file_lock(cache / executor / f"{key}.lock"):
        return _prepare(executor, source, patch, cache, key)


def _prepare(executor: str, source: Path, patch: str, cache: Path, key: str) -> Workspace:
    directory = cache / executor / key
    tree = directory / "src-tree"
    artifact = directory / MODULE_NAME if executor == "native" else tree
    done = directory / "done"
    if done.is_file():
        reason = done.read_text()
        return Workspace(executor, directory, None if reason else artifact, reason, 0.0, cached=True)
    shutil.rmtree(directory, ignore_errors=True)
    tree.mkdir(parents=True)
    _copy_source(executor, source, tree)
    reason = apply_patch(patch, tree) if patch.strip() else ""
    build_s = 0.0
    if not reason and executor == "native":
        started = time.perf_counter()
        module, reason = _build_native(tree, cache, directory / "build.log")
        build_s = time.perf_counter() - started
        if module is not None:
            artifact = module
    # a patch that does not apply, or does not build, is unviable; cached as such
    done.write_text(reason)
    return Workspace(executor, directory, None if reason else artifact, reason, build_s)
