"""What the environment hands difftest, checked like flags before anything starts: the variables of
docs/usage.md's table of environment variables, and a module file (a shared object this host can load, read whole)."""

from __future__ import annotations

import platform
import struct
import sys
from collections.abc import Mapping
from pathlib import Path

from difftest.base.problems import SetupProblem

# on/off switches: unset (or empty) is on; 0 turns the thing off, 1 says the default aloud
SWITCHES = {
    "DIFFTEST_FASTBOOT": "starts servers without the start-up shim",
    "DIFFTEST_ZYGOTE": "starts every embedded server by an exec of its own",
    "DIFFTEST_INIT": "runs containers without the project's init",
    "DIFFTEST_ENGINE_HOOKS": "draws histories through Hypothesis's public API alone (strategies/engine.py)",
}
CAMPAIGN_EXAMPLES = "DIFFTEST_CAMPAIGN_EXAMPLES"
CAMPAIGN_EXAMPLES_DEFAULT = 40


def _set(environ: Mapping[str, str], name: str) -> str | None:
    """The variable's value, None when unset or empty (an empty assignment is how shells unset)."""
    value = environ.get(name)
    return value if value else None


def check_environment(environ: Mapping[str, str], *, servers: bool = True) -> None:
    """Every variable difftest reads, checked now: a bad value is one line (SetupProblem), never a
    silent default or an error in every worker later. `servers`: the command starts servers of this
    machine, so DIFFTEST_VALKEY_SERVER must be a valkey-server."""
    from difftest.campaign.progress import plain_interval
    from difftest.servers.valkeys import ENVIRONMENT, check_version
    from difftest.servers.walker import CHOICE_VARIABLE, TRACK_FROM_VARIABLE, WALKER_CHOICES

    for name, meaning in SWITCHES.items():
        value = _set(environ, name)
        if value is not None and value not in ("0", "1"):
            raise SetupProblem(f"{name}={value!r} is neither 0 nor 1: {name}=0 {meaning}; "
                               f"set it to 0 or 1, or unset it for the default")  # fmt: skip
    walker = _set(environ, CHOICE_VARIABLE)
    if walker is not None and walker not in WALKER_CHOICES:
        raise SetupProblem(f"{CHOICE_VARIABLE}={walker!r} is not a walker: use 'module' (the default: tracked walks), "
                           "'whole' or 'lua', or unset it")  # fmt: skip
    track_from = _set(environ, TRACK_FROM_VARIABLE)
    if track_from is not None and not track_from.isdigit():
        raise SetupProblem(f"{TRACK_FROM_VARIABLE}={track_from!r} is not a number of keys: give a whole number "
                           "(0: every walk tracked), or unset it for the default")  # fmt: skip
    plain_interval(environ)
    version = _set(environ, ENVIRONMENT)
    if version is not None:
        check_version(version, ENVIRONMENT)
    if servers and _set(environ, "DIFFTEST_VALKEY_SERVER") is not None and version is None:
        from difftest.servers.valkeys import checked_binary

        checked_binary()  # an executable, a valkey-server by its --version, new enough, dynamically linked


def campaign_examples(environ: Mapping[str, str]) -> int:
    """DIFFTEST_CAMPAIGN_EXAMPLES (read by the test suite's parity campaign alone, histories per
    shard): a whole number from 1, default 40."""
    text = _set(environ, CAMPAIGN_EXAMPLES)
    if text is None:
        return CAMPAIGN_EXAMPLES_DEFAULT
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise SetupProblem(f"{CAMPAIGN_EXAMPLES}={text!r} is not a number of histories: give a whole number from 1 "
                           f"(default {CAMPAIGN_EXAMPLES_DEFAULT}), or unset it")  # fmt: skip
    return value


# -- the module file: an ELF shared object for this host, whole ------------------------------------

ELF_MAGIC = b"\x7fELF"
ET_DYN = 3
# e_machine of the hosts Valkey runs on (the ELF specification's numbers)
MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "i386": 3, "i686": 3, "armv7l": 40,
            "riscv64": 243, "ppc64le": 21, "ppc64": 21, "s390x": 22, "loongarch64": 258}  # fmt: skip
MACHINE_NAMES = {62: "x86-64", 183: "aarch64", 3: "i386", 40: "arm", 243: "riscv", 21: "ppc64", 22: "s390x",
                 258: "loongarch", 8: "mips", 20: "ppc", 2: "sparc", 43: "sparcv9"}  # fmt: skip


def elf_problem(header: bytes, size: int, machine: str | None = None, bits: int | None = None) -> str | None:
    """Why a file of `size` bytes that starts with `header` (its first 64 bytes) cannot be a shared
    object this host loads, or None (pure: the magic, class, byte order, type, machine, and the
    program and section header tables within the file, which a truncated copy loses first)."""
    machine = (machine or platform.machine()).lower()
    bits = bits or struct.calcsize("P") * 8
    if len(header) < 4 or header[:4] != ELF_MAGIC:
        return "is not an ELF shared object (no ELF magic number)"
    if len(header) < 52:
        return f"is cut short ({size} bytes, not even an ELF header)"
    elf_class = {1: 32, 2: 64}.get(header[4])
    if elf_class is None:
        return f"has an unknown ELF class ({header[4]})"
    if elf_class != bits:
        return f"is a {elf_class}-bit ELF file; this host loads {bits}-bit modules"
    order = {1: "<", 2: ">"}.get(header[5])
    if order is None or (order == "<") != (sys.byteorder == "little"):
        return "is built for the other byte order than this host's"
    e_type, e_machine = struct.unpack_from(order + "HH", header, 16)
    want = MACHINES.get(machine)
    if want is not None and e_machine != want:
        built = MACHINE_NAMES.get(e_machine, f"machine {e_machine}")
        return f"is built for {built}, not this host's {machine}"
    if e_type != ET_DYN:
        return f"is an ELF file of type {e_type}, not a shared object (type {ET_DYN})"
    if elf_class == 64:
        if len(header) < 64:
            return f"is cut short ({size} bytes, not even an ELF header)"
        phoff, shoff = struct.unpack_from(order + "QQ", header, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", header, 54)
    else:
        phoff, shoff = struct.unpack_from(order + "II", header, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", header, 42)
    ends = [phoff + phentsize * phnum, shoff + shentsize * shnum]
    if max(ends) > size:
        return f"is cut short: {size:,} bytes, where its ELF headers say at least {max(ends):,}"
    return None


def module_problem(path: Path) -> str | None:
    """Why `path` cannot be the module this host loads, or None: missing, a directory, unreadable,
    or not a whole ELF shared object for this machine."""
    if path.is_dir():
        return "is a directory, not a module file"
    if not path.exists():
        return "no such file"
    try:
        with path.open("rb") as handle:
            header = handle.read(64)
            size = path.stat().st_size
    except OSError as problem:
        return f"cannot be read ({problem.strerror})"
    return elf_problem(header, size)
