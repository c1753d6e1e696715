"""Generated mutants as catalogue entries: the native crate's from cargo-mutants, the scripts' from lua_operators.

`python -m mutants --generated` scores these with the differential oracle (the same runner as the
hand-written catalogue: patch, build, a campaign at the default budget), not with `cargo test`.

- Native: `cargo mutants --list --json --diff` in executors/native (cargo-mutants CARGO_MUTANTS_VERSION,
  installed on first use into a cache outside the checkout, `tool_root()`; the one on PATH when it is
  that version). Each listed mutant becomes an entry: its diff the patch, its genre the defect class,
  its transition from its file (transitions/<verb>.rs) or else from the transitions that call its
  function (`transition_of`), "all" when none names it.
- Lua: `lua_operators.generate` over executors/lua, the script naming the transition.

Ids are stable under edits elsewhere in a file: `rs-<file>-<function>-<what>-<k>` and
`lua-<script>-<what>-<k>`, k counting the same change in the same function (script) in source order.
A run writes the set it scored to `generated.json` in its report directory, so `merge` and the
report need neither the tool nor the sources as they were.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

from difftest.base.filelock import file_lock
from difftest.base.problems import SetupProblem
from mutants.catalogue import EXECUTOR_DIRS, TRANSITIONS, Mutant

CARGO_MUTANTS_VERSION = "27.1.0"
SAVED = "generated.json"  # the generated set a run scored, in its report directory
NATIVE_PREFIX, LUA_PREFIX = "rs-", "lua-"
INSTALL_TIMEOUT_S = 3600.0
LIST_TIMEOUT_S = 600.0


class ToolMissing(SetupProblem):
    """cargo-mutants is not there and could not be installed: one line says how (exit 2, bad set-up)."""


# one entry of `cargo mutants --list --json`: cargo-mutants' own format, read with .get and str()
CargoMutantsEntry = dict[str, Any]


class SavedMutant(TypedDict):
    """A generated mutant as generated.json keeps it."""

    id: str
    executor: str
    transition: str
    defect_class: str
    why: str
    exposure: str
    generator: str
    location: str
    patch: str


@dataclass(frozen=True)
class GeneratedMutant(Mutant):
    """A catalogue entry whose patch is held in memory (no file under mutants/catalogue/)."""

    patch_text: str = ""
    generator: str = ""  # cargo-mutants or lua-operators
    location: str = ""  # file:line:column of the change, relative to the executor's directory

    def patch_for(self, executor: str) -> str:
        return self.patch_text

    def as_json(self) -> SavedMutant:
        return {"id": self.id, "executor": self.executor, "transition": self.transition,
                "defect_class": self.defect_class, "why": self.why, "exposure": self.exposure,
                "generator": self.generator, "location": self.location, "patch": self.patch_text}  # fmt: skip

    @classmethod
    def from_json(cls, entry: SavedMutant) -> GeneratedMutant:
        return cls(id=entry["id"], executor=entry["executor"], transition=entry["transition"],
                   defect_class=entry["defect_class"], contract_rows=(), why=entry["why"],
                   exposure=entry["exposure"], needs=(), generator=entry["generator"],
                   location=entry["location"], patch_text=entry["patch"])  # fmt: skip


# ---- cargo-mutants: found, or installed once into a cache outside the checkout ----------------------


def tool_root() -> Path:
    """Where cargo-mutants is installed (`cargo install --root`): $DIFFTEST_TOOLS, else the user's cache."""
    if os.environ.get("DIFFTEST_TOOLS"):
        return Path(os.environ["DIFFTEST_TOOLS"]) / "cargo-mutants"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "difftest" / "cargo-mutants"


def _version(binary: Path | str) -> str:
    try:
        result = subprocess.run([str(binary), "mutants", "--version"], capture_output=True, text=True,
                                timeout=60, check=False)  # fmt: skip
    except OSError:
        return ""
    return result.stdout.strip().rsplit(" ", 1)[-1] if result.returncode == 0 else ""


def install_command(root: Path) -> list[str]:
    return ["cargo", "install", "cargo-mutants", "--locked", "--version", CARGO_MUTANTS_VERSION, "--root", str(root)]


def cargo_mutants(say: Callable[[str], None] = print, install: bool = True) -> Path:
    """The cargo-mutants binary of CARGO_MUTANTS_VERSION: on PATH, in the cache, or installed into the
    cache now (once, a few minutes of compiling). ToolMissing (one line: how) when none can be had."""
    on_path = shutil.which("cargo-mutants")
    if on_path and _version(on_path) == CARGO_MUTANTS_VERSION:
        return Path(on_path)
    root = tool_root()
    cached = root / "bin" / "cargo-mutants"
    if cached.is_file() and _version(cached) == CARGO_MUTANTS_VERSION:
        return cached
    how = " ".join(install_command(root))
    if not install or shutil.which("cargo") is None:
        raise ToolMissing(f"--generated needs cargo-mutants {CARGO_MUTANTS_VERSION}; install it with: {how}")
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / "install.lock"):  # one install at a time (test workers, concurrent runs)
        if cached.is_file() and _version(cached) == CARGO_MUTANTS_VERSION:
            return cached  # another process installed it while this one waited
        return _install(root, cached, how, say)


def _install(root: Path, cached: Path, how: str, say: Callable[[str], None]) -> Path:
    say(f"installing cargo-mutants {CARGO_MUTANTS_VERSION} into {root} (once; compiling takes a few minutes)")
    log = root / "install.log"
    with log.open("w") as out:
        try:
            result = subprocess.run(install_command(root), stdout=out, stderr=subprocess.STDOUT,
                                    timeout=INSTALL_TIMEOUT_S, check=False)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ToolMissing(f"could not install cargo-mutants ({exc}); install it with: {how}") from None
    if result.returncode != 0 or _version(cached) != CARGO_MUTANTS_VERSION:
        raise ToolMissing(f"could not install cargo-mutants (cargo install exited {result.returncode}, "
                          f"its output in {log}); install it with: {how}")  # fmt: skip
    return cached


def list_native(crate: Path | None = None, binary: Path | None = None) -> list[CargoMutantsEntry]:
    """`cargo mutants --list --json --diff` in the crate: every mutant cargo-mutants would test."""
    crate = crate or EXECUTOR_DIRS["native"]
    binary = binary or cargo_mutants()
    result = subprocess.run([str(binary), "mutants", "--list", "--json", "--diff", "--dir", str(crate)],
                            capture_output=True, text=True, timeout=LIST_TIMEOUT_S, check=False)  # fmt: skip
    if result.returncode != 0:
        raise SetupProblem(f"cargo mutants --list failed (exit {result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()[:300]}")  # fmt: skip
    listing = json.loads(result.stdout)
    if not isinstance(listing, list):
        raise SetupProblem("cargo mutants --list --json did not print a list")
    return listing


# ---- the listing -> catalogue entries ---------------------------------------------------------------

_OPERATOR_NAMES = {
    "==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "&&": "and", "||": "or",
    "+": "add", "-": "sub", "*": "mul", "/": "div", "%": "rem", "&": "bitand", "|": "bitor", "^": "xor",
    "<<": "shl", ">>": "shr", "+=": "add_assign", "-=": "sub_assign", "*=": "mul_assign", "/=": "div_assign",
    "%=": "rem_assign", "&=": "bitand_assign", "|=": "bitor_assign", "^=": "xor_assign", "<<=": "shl_assign",
    ">>=": "shr_assign", "!": "not",
}  # fmt: skip


def _slug(text: str, limit: int = 24) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:limit].strip("_") or "x"


def _what(entry: CargoMutantsEntry) -> str:
    """The change, short, from the mutant's name: eq-ne, del-not, val-ok_0, del-arm-none, guard-true."""
    name = str(entry.get("name") or "")
    text = name.split(": ", 1)[-1] if ": " in name else name
    genre = str(entry.get("genre", ""))
    replacement = str(entry.get("replacement", ""))
    if genre == "BinaryOperator":
        m = re.match(r"replace (\S+) with (\S+)", text)
        if m:
            a, b = m.groups()
            return f"{_OPERATOR_NAMES.get(a, _slug(a))}-{_OPERATOR_NAMES.get(b, _slug(b))}"
    if genre == "UnaryOperator":
        m = re.match(r"delete (\S+)", text)
        if m:
            return f"del-{_OPERATOR_NAMES.get(m.group(1), _slug(m.group(1)))}"
    if genre == "FnValue":
        return f"val-{_slug(replacement)}"
    if genre == "MatchArmGuard":
        return f"guard-{_slug(replacement)}"
    if genre == "MatchArm":
        m = re.match(r"delete match arm (.*?)(?: in .*)?$", text)
        return f"del-arm-{_slug(m.group(1) if m else text)}"
    if genre == "StructField":
        m = re.match(r"delete field (\S+)", text)
        return f"del-field-{_slug(m.group(1) if m else text)}"
    return _slug(text, 30)


def _function(entry: CargoMutantsEntry) -> str:
    function = entry.get("function") or {}
    return str(function.get("function_name", "")) if isinstance(function, dict) else ""


def _callers(short: str, crate: Path, own: str, depth: int = 2) -> set[str]:
    """The transitions whose files under src/transitions call `short` (through a helper file there,
    fence.rs or metrics.rs, up to `depth` steps)."""
    verbs = {v.lower(): v for v in TRANSITIONS}
    found: set[str] = set()
    pattern = re.compile(rf"\b{re.escape(short)}\s*(::<[^>]*>)?\(")
    for path in sorted((crate / "src" / "transitions").glob("*.rs")):
        text = path.read_text().split("#[cfg(test)]", 1)[0]
        if path.stem == own or not pattern.search(text):
            continue
        if path.stem == "pause":
            found.update(("PAUSE", "RESUME"))
        elif path.stem in verbs:
            found.add(verbs[path.stem])
        elif depth > 0:  # a helper: the transitions that call its functions
            for helper in set(re.findall(r"\bfn\s+(\w+)", text)):
                found |= _callers(helper, crate, path.stem, depth - 1)
    return found


def transition_of(file: str, function: str, crate: Path | None = None) -> str:
    """The transition a mutant of `function` in `file` (relative to the crate) can change: its
    file's verb (src/transitions/claim.rs), else the verbs whose files call the function (through
    fence.rs or metrics.rs too), else all."""
    crate = crate or EXECUTOR_DIRS["native"]
    verbs = {v.lower(): v for v in TRANSITIONS}
    stem = Path(file).stem
    short = function.rsplit("::", 1)[-1]
    in_transitions = Path(file).parent.name == "transitions"
    if in_transitions and stem == "pause":  # pause.rs: pause, resume, and the helpers of both
        return verbs.get(short.lower(), "PAUSE, RESUME")
    if in_transitions and stem in verbs:
        return verbs[stem]
    callers = _callers(short, crate, stem)
    if not callers or len(callers) == len(TRANSITIONS):
        return "all"
    return ", ".join(v for v in TRANSITIONS if v in callers)


def _patch(diff: str, file: str) -> str:
    """cargo-mutants' diff (`--- src/x.rs` / `+++ replace ...`) with headers `patch -p1` takes."""
    lines = diff.splitlines(keepends=True)
    out: list[str] = []
    for line in lines:
        if line.startswith("--- ") and not out:
            out.append(f"--- a/{file}\n")
        elif line.startswith("+++ ") and len(out) == 1:
            out.append(f"+++ b/{file}\n")
        else:
            out.append(line)
    text = "".join(out)
    return text if text.endswith("\n") else text + "\n"


def native_entries(listing: list[CargoMutantsEntry], crate: Path | None = None) -> list[GeneratedMutant]:
    """Each listed mutant as a catalogue entry, in the listing's order; ids unique and stable."""
    crate = crate or EXECUTOR_DIRS["native"]
    seen: Counter[str] = Counter()
    entries = []
    for entry in listing:
        file = str(entry["file"])
        function = _function(entry)
        span = (entry.get("span") or {}).get("start") or {}
        location = f"{file}:{span.get('line', 0)}:{span.get('column', 0)}"
        base = f"{NATIVE_PREFIX}{_slug(Path(file).stem, 16)}-{_slug(function or 'item', 32)}-{_what(entry)}"
        seen[base] += 1
        name = str(entry.get("name") or f"{location}: {entry.get('replacement', '')}")
        transition = transition_of(file, function, crate)
        entries.append(GeneratedMutant(
            id=f"{base}-{seen[base]}", executor="native", transition=transition,
            defect_class=str(entry.get("genre", "cargo-mutants")), contract_rows=(),
            why=f"cargo-mutants: {name}",
            exposure=f"a history whose {transition if transition != 'all' else 'transitions'} run "
                     f"{function or file} and reach the change",
            needs=(), patch_text=_patch(str(entry["diff"]), file), generator="cargo-mutants", location=location,
        ))  # fmt: skip
    return entries


def lua_entries(scripts: Path | None = None) -> list[GeneratedMutant]:
    """The scripts' generated mutants (lua_operators) as catalogue entries."""
    from mutants import lua_operators

    scripts = scripts or EXECUTOR_DIRS["lua"]
    sources = {path.name: path.read_text() for path in scripts.glob("*.lua")}
    verbs = {v.lower(): v for v in TRANSITIONS}
    entries = []
    for m in lua_operators.generate(scripts):
        transition = verbs.get(m.script.removesuffix(".lua"), "all")
        entries.append(GeneratedMutant(
            id=m.id, executor="lua", transition=transition, defect_class=m.operator, contract_rows=(),
            why=f"lua-operators: {m.description}",
            exposure=f"a {transition} that reaches {m.script}:{m.line}",
            needs=(), patch_text=m.patch(sources[m.script]), generator="lua-operators",
            location=f"{m.script}:{m.line}:{m.column}",
        ))  # fmt: skip
    return entries


def generate(say: Callable[[str], None] = print, install: bool = True) -> list[GeneratedMutant]:
    """Every generated mutant: the crate's (cargo-mutants), then the scripts'."""
    binary = cargo_mutants(say=say, install=install)
    return [*native_entries(list_native(binary=binary)), *lua_entries()]


def save(directory: Path, mutants: list[GeneratedMutant]) -> None:
    from difftest.base.files import write_atomically

    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / SAVED, json.dumps([m.as_json() for m in mutants], indent=1) + "\n")


def load_saved(directory: Path) -> list[GeneratedMutant] | None:
    """The generated set a run recorded in its report directory (None: not a generated run)."""
    path = directory / SAVED
    if not path.is_file():
        return None
    saved = cast(list[SavedMutant], json.loads(path.read_text()))  # the file save() wrote: read as its type once
    return [GeneratedMutant.from_json(e) for e in saved]
