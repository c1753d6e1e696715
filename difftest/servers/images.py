"""Container images built here, FROM scratch: valkey-server, the libraries it loads, the frozen
clock, the start-up shim and the native module, at the paths they have on this machine."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from difftest.base.problems import SetupProblem
from difftest.servers.compiled import clock_library, fastboot_library, init_binary
from difftest.servers.valkeys import checked_binary
from difftest.servers.walker import walker_module

IMAGE_REPOSITORY = "difftest-valkey"
LABEL = "org.difftest"  # every image, container and volume of the project carries it
IN_IMAGE = {
    "server": "/usr/local/bin/valkey-server",
    "module": "/opt/difftest/libemq_native.so",
    "walker": "/opt/difftest/libdifftest_walker.so",  # DIFFTEST.WALK, in every image (difftest/servers/walker-crate)
    "fastboot": "/opt/difftest/fastboot.so",
    "init": "/opt/difftest/init",  # the docker backend's PID 1 (init.c); the compose pair runs without
    "clock": "/opt/difftest/frozen_clock.so",  # docker-compose.yml preloads it by this path
}


def shared_libraries(binary: Path) -> list[Path]:
    """What the dynamic loader maps for a binary (ldd), the loader itself included."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
    found = []
    for line in out.splitlines():
        match = re.search(r"(/\S+)\s+\(0x", line)
        if match:
            found.append(Path(match.group(1)))
    return found


def _rootfs_files(module: Path | None) -> dict[str, Path]:
    """Path in the image -> file on this machine."""
    server = checked_binary()
    files = {IN_IMAGE["server"]: server, IN_IMAGE["clock"]: clock_library(), IN_IMAGE["walker"]: walker_module()}
    shim = fastboot_library()
    if shim is not None:
        files[IN_IMAGE["fastboot"]] = shim
    init = init_binary()
    if init is not None:
        files[IN_IMAGE["init"]] = init
    if module is not None:
        files[IN_IMAGE["module"]] = module
    for binary in list(files.values()):
        for library in shared_libraries(binary):
            files[str(library)] = library
    return files


def image_tag(module: Path | None) -> str:
    digest = hashlib.sha256()
    for inside, outside in sorted(_rootfs_files(module).items()):
        digest.update(inside.encode())
        digest.update(outside.resolve().read_bytes())
    return f"{IMAGE_REPOSITORY}:{digest.hexdigest()[:16]}"


def build_image(client: Any, module: Path | None) -> str:
    """Build (or reuse, by content) the image; returns its tag."""
    tag = image_tag(module)
    if client.images.list(name=tag):
        return tag
    files = _rootfs_files(module)
    with tempfile.TemporaryDirectory(prefix="difftest-image-") as scratch:
        root = Path(scratch) / "rootfs"
        for inside, outside in files.items():
            target = root / inside.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(outside.resolve(), target)
        (root / "data").mkdir()
        (root / "clock").mkdir()
        (root / "tmp").mkdir()
        dockerfile = Path(scratch) / "Dockerfile"
        dockerfile.write_text(
            f'FROM scratch\nCOPY rootfs/ /\nLABEL {LABEL}="1"\nWORKDIR /data\nENTRYPOINT ["{IN_IMAGE["server"]}"]\n'
        )
        try:
            client.images.build(path=scratch, tag=tag, rm=True, labels={LABEL: "1"})
        except Exception as exc:  # the docker package raises BuildError/APIError with the reason
            raise SetupProblem(f"building the server image {tag} failed: {exc}") from exc
    return tag
