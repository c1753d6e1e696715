"""The build under test (module, scripts, Valkey version) as recorded, and commands printed to run as shown.

A run, a scenario and every artifact record which native module and which Lua scripts they ran
(absolute path and sha256) and the Valkey version; `difftest replay` of an artifact uses that record
unless its command line says otherwise. Every command difftest prints (a run's `reproduce:` line,
an artifact's, report.txt's) is built here: `command()` starts it with the program as it can be run
from where the user stands, and the flags carry the build under test wherever it differs from the
defaults (the checkout's module, executors/lua, the venv's Valkey; replicas are said either way).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from difftest.base.problems import SetupProblem

BUILD_FIELD = "build"  # in an artifact's history header and report.json


def program() -> list[str]:
    """How to start difftest from the current directory: `difftest` when that name on PATH is this
    very program, else the venv's script by its path from here (`make run` puts nothing on PATH),
    else `python -m difftest` with this interpreter's absolute path."""
    script = Path(sys.prefix) / "bin" / "difftest"
    found = shutil.which("difftest")
    if found is not None and script.is_file():
        try:
            if os.path.samefile(found, script):
                return ["difftest"]
        except OSError:
            pass
    if script.is_file():  # from the checkout: .venv/bin/difftest; from elsewhere, its absolute path
        relative = os.path.relpath(script)
        if relative.startswith(os.pardir):
            return [str(script.absolute())]
        return [relative if os.sep in relative else f".{os.sep}{relative}"]
    return [str(Path(sys.executable).absolute()), "-m", "difftest"]


def command(*words: str | Path) -> str:
    """A difftest command line as printed everywhere: the program as it runs from here, then `words`."""
    return shlex.join([*program(), *(str(word) for word in words)])


def _here(path: Path) -> str:
    """A path as typed from the current directory: relative inside it, else absolute."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith(os.pardir) else relative


def sha256_file(path: Path) -> str | None:
    try:
        digest = hashlib.sha256()
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None


def sha256_scripts(directory: Path | None) -> str:
    """One digest of the scripts a replay loads (each scripted verb's <verb>.lua, by name)."""
    from executors.lua.adapter import load_scripts

    digest = hashlib.sha256()
    for verb, source in sorted(load_scripts(directory).items()):
        digest.update(verb.encode() + b"\0" + hashlib.sha256(source).digest())
    return digest.hexdigest()


def default_scripts() -> Path:
    from executors.lua.adapter import script_directory

    return script_directory()


def record(module: Path, lua_scripts: Path | None, module_given: bool = True,
           valkey: str | None = None, valkey_requested: bool = False) -> dict[str, Any]:  # fmt: skip
    """What ran, for a summary or an artifact: the module and the scripts (absolute paths and sha256;
    `lua_scripts` None: this checkout's executors/lua) and the Valkey version. `module_given`: the
    module is not this checkout's own release build (the reproduce line then carries --module)."""
    module = Path(module).absolute()
    scripts = Path(lua_scripts).absolute() if lua_scripts is not None else None
    return {
        "module": str(module),
        "module_sha256": sha256_file(module),
        "module_given": module_given,
        "lua_scripts": str(scripts) if scripts is not None else None,
        "lua_scripts_dir": str(scripts or default_scripts()),
        "lua_scripts_sha256": sha256_scripts(scripts),
        "valkey": valkey,
        "valkey_requested": valkey_requested,
    }


def build_flags(build: dict[str, Any]) -> list[str]:
    """The options that put a replay or a run on the recorded build (what differs from the defaults)."""
    words: list[str] = []
    if build.get("module_given") and build.get("module"):
        words += ["--module", str(build["module"])]
    if build.get("lua_scripts"):
        words += ["--lua-scripts", str(build["lua_scripts"])]
    if build.get("valkey_requested") and build.get("valkey"):
        words += ["--valkey", str(build["valkey"])]
    return words


def replay_command(artifact: Path | str, build: dict[str, Any] | None, replicas: bool = False) -> str:
    """`difftest replay ARTIFACT` with the build the artifact was found on (and --replicas, if on)."""
    words = ["replay", str(artifact), *build_flags(build or {})]
    if replicas:
        words.append("--replicas")
    return command(*words)


# -- replay of an artifact: its recorded build, unless the command line says otherwise ----------


def recorded_module(build: dict[str, Any], given: Path | None, warn: Callable[[str], None]) -> Path | None:
    """The module a replay loads: `given` (--module) if said, else the recorded one, which must still
    exist (one line, exit 2, naming --module) and is warned of when its digest changed."""
    if given is not None or not build.get("module"):
        return given
    path = Path(str(build["module"]))
    if not path.is_file():
        from executors.native.adapter import DEFAULT_MODULE

        ours = _here(DEFAULT_MODULE)
        raise SetupProblem(f"the artifact was found with the module {path}, which no longer exists: pass "
                           f"--module PATH to replay it on another build (this checkout's: {ours})")  # fmt: skip
    recorded, now = build.get("module_sha256"), sha256_file(path)
    if recorded and now != recorded:
        warn(f"difftest: warning: the module {path} changed since the artifact was found "
             f"(sha256 {str(recorded)[:12]}, now {str(now)[:12]}); replaying on it as it is now")  # fmt: skip
    return path


def recorded_scripts(build: dict[str, Any], given: Path | None, warn: Callable[[str], None]) -> Path | None:
    """The scripts a replay loads: `given` (--lua-scripts) if said, else the recorded directory,
    which must still exist (one line, exit 2, naming --lua-scripts); warned of when changed."""
    if given is not None or not build.get("lua_scripts_dir"):
        return given
    path = Path(str(build["lua_scripts_dir"]))
    if not path.is_dir():
        ours = _here(default_scripts())
        raise SetupProblem(f"the artifact was found with the Lua scripts in {path}, which no longer exists: pass "
                           f"--lua-scripts DIR to replay it on other scripts (this checkout's: {ours})")  # fmt: skip
    recorded = build.get("lua_scripts_sha256")
    try:
        now = sha256_scripts(path)
    except SetupProblem:
        now = None  # a script gone from the directory: the replay's own load says which, one line
    if recorded and now is not None and now != recorded:
        warn(f"difftest: warning: the Lua scripts in {path} changed since the artifact was found "
             f"(sha256 {str(recorded)[:12]}, now {now[:12]}); replaying on them as they are now")  # fmt: skip
    return None if build.get("lua_scripts") is None and path == default_scripts() else path
