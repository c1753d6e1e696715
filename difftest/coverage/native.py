"""Native code coverage of a campaign (`difftest run --native-coverage`): which lines, regions and
branches of the module's source (executors/native/src) the histories reached.

The module is built with `-C instrument-coverage` into its own target directory
(executors/native/target/coverage; the release build stays untouched). Every native server writes
its counts to `LLVM_PROFILE_FILE`, one file per server process (`%p`: restarts and workers never
share one), in the runtime's continuous mode (`%c`, with `-runtime-counter-relocation`): the
counters live in the mapped file itself, so a server killed by a crash step (SIGKILL), or by the end
of its worker, keeps what it counted. The files are summed with `llvm-profdata merge` into
`native-coverage.profdata` and read with `llvm-cov export`, from the toolchain's llvm-tools
component (the tools must be the compiler's LLVM version: Debian's llvm-cov is too old).

Branch counts need `-Z coverage-options=branch`, which only a nightly compiler takes: on stable,
lines and regions are reported and branches are marked unavailable (`RUSTUP_TOOLCHAIN=nightly`
builds with branches, with the nightly's own llvm-tools).

`difftest merge` sums the shards' profiles (`native-coverage.profdata`) and exports them again.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from difftest.base.environment import variable_set
from difftest.base.files import write_atomically
from difftest.base.problems import SetupProblem

CRATE_DIR = Path(__file__).resolve().parents[2] / "executors" / "native"
TARGET_DIR = CRATE_DIR / "target" / "coverage"
MODULE_NAME = "libemq_native.so"
PROFILE_VARIABLE = "LLVM_PROFILE_FILE"
JSON_FILE = "native-coverage.json"
PROFDATA_FILE = "native-coverage.profdata"
RAW_DIR = "native-profiles"  # in the run directory while the campaign runs; removed once merged
FORMAT = "difftest-native-coverage"
BUILD_TIMEOUT_S = 1800.0
INSTRUMENT = ("-C", "instrument-coverage", "-C", "llvm-args=-runtime-counter-relocation")
BRANCHES = ("-Z", "coverage-options=branch")
TOOLS_FIX = "run 'rustup component add llvm-tools' (the toolchain's llvm-profdata and llvm-cov) and try again"


# ---- the toolchain -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tools:
    profdata: Path
    cov: Path
    rustc: str  # `rustc --version`
    branches: bool  # a nightly compiler: -Z coverage-options=branch


def _rustc(*args: str) -> str:
    try:
        done = subprocess.run(["rustc", *args], capture_output=True, text=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as problem:
        raise SetupProblem(f"--native-coverage needs a Rust toolchain (rustc {' '.join(args)} failed: "
                           f"{problem}); install one with rustup") from None  # fmt: skip
    return done.stdout.strip()


def find_tools() -> Tools:
    """The compiler's own llvm-profdata and llvm-cov (rustup's llvm-tools component), else one line."""
    sysroot = Path(_rustc("--print", "sysroot"))
    verbose = _rustc("-vV")
    host = next((line.split(":", 1)[1].strip() for line in verbose.splitlines() if line.startswith("host:")), "")
    bin_dir = sysroot / "lib" / "rustlib" / host / "bin"
    profdata, cov = bin_dir / "llvm-profdata", bin_dir / "llvm-cov"
    if not (profdata.is_file() and cov.is_file()):
        raise SetupProblem(f"--native-coverage: no llvm-profdata/llvm-cov in {bin_dir}: {TOOLS_FIX}")
    version = verbose.splitlines()[0] if verbose else "rustc"
    return Tools(profdata, cov, version, branches="nightly" in version or "-dev" in version)


def build(tools: Tools, crate: Path = CRATE_DIR, name: str = "checkout", target: Path = TARGET_DIR) -> Path:
    """The crate's module built with coverage instrumentation (only the crate itself: its dependencies
    are plain) into `target`, copied to target/modules/<name>.so; cargo rebuilds only what changed.
    One build at a time per target directory (the copy's name keeps the builds of several crates apart)."""
    from difftest.base.filelock import file_lock
    from executors.native.adapter import seed_dependencies

    flags = [*INSTRUMENT, *(BRANCHES if tools.branches else ())]
    command = ["cargo", "rustc", "--release", "--lib", "--locked", "--quiet",
               "--manifest-path", str(crate / "Cargo.toml"), "--target-dir", str(target), "--", *flags]  # fmt: skip
    env = dict(os.environ)
    env.pop("RUSTFLAGS", None)  # the flags go to the crate alone, never to build scripts or dependencies
    env.pop(PROFILE_VARIABLE, None)
    module = target / "modules" / f"{name}.so"
    with file_lock(target / "build.lock"):
        seed_dependencies(target)  # a first build: the plain build's dependencies, compiled the same
        # a cdylib's file in target/ is not named by its crate's path: after another crate's build
        # (a planted copy, say), cargo could take this one as fresh and leave the other's .so there
        last = target / "last-crate"
        if not last.is_file() or last.read_text() != str(crate.resolve()):
            for fingerprint in (target / "release" / ".fingerprint").glob("emq-native-*"):
                shutil.rmtree(fingerprint, ignore_errors=True)
            last.unlink(missing_ok=True)
        print(f"native coverage: building the instrumented module ({' '.join(flags)}) in {target}",
              file=sys.stderr, flush=True)  # fmt: skip
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                                  check=False)  # fmt: skip
        except (OSError, subprocess.SubprocessError) as problem:
            raise SetupProblem(f"--native-coverage: the instrumented build could not run: {problem}") from None
        if done.returncode != 0:
            said = [line for line in done.stderr.splitlines() if line.strip()][-3:]
            raise SetupProblem(f"--native-coverage: the instrumented build failed (exit {done.returncode}): "
                               f"{' / '.join(said)[-400:]}")  # fmt: skip
        last.write_text(str(crate.resolve()))
        module.parent.mkdir(parents=True, exist_ok=True)
        scratch = module.with_suffix(".tmp")
        shutil.copy2(target / "release" / MODULE_NAME, scratch)
        os.replace(scratch, module)  # servers still running the older copy keep their inode
    return module


def prepare(args: Any) -> tuple[Path, Tools]:
    """`run --native-coverage`: the checks (one line, exit 2) and the instrumented build."""
    from executors.native.adapter import DEFAULT_MODULE

    if args.attach is not None or args.backend != "local":
        raise SetupProblem("--native-coverage runs embedded servers only: drop --attach and --backend docker")
    if Path(args.module) != DEFAULT_MODULE:
        raise SetupProblem("--native-coverage builds and loads this checkout's module, instrumented: drop --module")
    tools = find_tools()
    return build(tools), tools


# ---- profiling a campaign ----------------------------------------------------------------------------


@contextlib.contextmanager
def profiling(run_dir: Path) -> Iterator[Path]:
    """LLVM_PROFILE_FILE for the block: every server started in it (workers inherit the environment)
    writes its own file under run_dir/native-profiles/."""
    raw = (run_dir / RAW_DIR).absolute()  # absolute: a server runs in its own data directory
    raw.mkdir(parents=True, exist_ok=True)
    with variable_set(PROFILE_VARIABLE, str(raw / "native-%p%c.profraw")):
        yield raw


def _run(command: Sequence[str | Path], what: str) -> str:
    try:
        done = subprocess.run([str(part) for part in command], capture_output=True, text=True, check=False,
                              timeout=600)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as problem:
        raise RuntimeError(f"{what} could not run: {problem}") from None
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-600:]}")
    return done.stdout


def merge_profiles(tools: Tools, inputs: Sequence[Path], out: Path) -> None:
    listing = out.with_suffix(".inputs")
    listing.write_text("".join(f"{path}\n" for path in inputs))
    try:
        _run([tools.profdata, "merge", "-sparse", f"--input-files={listing}", "-o", out], "llvm-profdata merge")
    finally:
        listing.unlink()


def collect(run_dir: Path, module: Path, tools: Tools, crate: Path = CRATE_DIR) -> dict[str, Any]:
    """After the campaign: the servers' files summed into native-coverage.profdata (and removed),
    exported into native-coverage.json; returns that document."""
    raw = run_dir / RAW_DIR
    files = sorted(raw.glob("*.profraw")) if raw.is_dir() else []
    written = [path for path in files if path.stat().st_size > 0]
    profiles = {"written": len(written), "lost": len(files) - len(written)}
    profdata = run_dir / PROFDATA_FILE
    if written:
        merge_profiles(tools, written, profdata)
    shutil.rmtree(raw, ignore_errors=True)
    document = export(tools, profdata, module, crate) if written else empty(tools, module)
    document["profiles"] = profiles
    write_atomically(run_dir / JSON_FILE, json.dumps(document, indent=1) + "\n")
    return document


# ---- reading the counts ------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def empty(tools: Tools, module: Path) -> dict[str, Any]:
    return {"format": FORMAT, "version": 1, "module": str(module), "module_sha256": sha256(module),
            "rustc": tools.rustc, "branches_available": tools.branches, "totals": {}, "files": [],
            "unreached": [], "note": "no native server wrote a profile"}  # fmt: skip


def relative_source(path: str, crate: Path = CRATE_DIR) -> str | None:
    """src/... for a file of the crate's own source; None for others (a dependency's macros expanded
    into the crate, say). A module compiled in another checkout: any src/ outside cargo's registry."""
    own = f"{crate}/src/"
    if path.startswith(own):
        return "src/" + path[len(own) :]
    if "/src/" not in path or not path.endswith(".rs") or "/.cargo/" in path or "/registry/" in path:
        return None
    return "src/" + path.rsplit("/src/", 1)[1]


def _verbs_of(text: str, stem: str) -> set[str]:
    """The verbs a transition file handles: its own name's, and each `pub fn <verb>` (pause.rs: both)."""
    from difftest.spec.commands import Verb

    verbs = {verb.value for verb in Verb}
    names = {stem, *re.findall(r"\bpub fn (\w+)", text)}
    return {name.upper() for name in names if name.upper() in verbs}


def transition_of(relative: str, crate: Path = CRATE_DIR) -> str | None:
    """The transition(s) a source file belongs to: src/transitions/<verb>.rs is that verb's (pause.rs:
    PAUSE, RESUME); a helper there (fence.rs, metrics.rs) belongs to the transitions whose files use
    it (`use super::fence`); other files (mod.rs, and everything outside src/transitions/): none."""
    parts = Path(relative).parts
    if len(parts) != 3 or parts[1] != "transitions" or parts[2] == "mod.rs":
        return None
    stem = Path(parts[2]).stem
    folder = crate / "src" / "transitions"
    own = _verbs_of("\n".join(_source_lines(folder / parts[2])), stem)
    if not own:
        uses = re.compile(rf"\bsuper::(?:{stem}\b|\{{[^}}]*\b{stem}\b)")
        for path in sorted(folder.glob("*.rs")):
            text = "\n".join(_source_lines(path))
            if path.stem != stem and uses.search(text):
                own |= _verbs_of(text, path.stem)
    if not own:
        return stem.upper()  # a file of its own that no transition uses (yet): named by itself
    return ", ".join(sorted(own))


_ESCAPES = {"$LT$": "<", "$GT$": ">", "$RF$": "&", "$BP$": "*", "$C$": ",", "$SP$": "@", "$LP$": "(",
            "$RP$": ")", "$u20$": " ", "$u27$": "'", "$u5b$": "[", "$u5d$": "]", "$u7b$": "{", "$u7d$": "}",
            "$u7e$": "~", "$u3b$": ";", "$u2b$": "+", "$u22$": '"'}  # fmt: skip


def demangle(name: str) -> str:
    """A Rust symbol (legacy mangling) as a path without its hash; any other name unchanged."""
    start = name.find("_ZN")
    if start < 0 or not name.endswith("E"):
        return name
    rest, parts, at = name[start + 3 : -1], [], 0
    while at < len(rest) and rest[at].isdigit():
        digits = re.match(r"\d+", rest[at:])
        assert digits is not None
        at += len(digits.group())
        length = int(digits.group())
        parts.append(rest[at : at + length])
        at += length
    if at != len(rest) or not parts:
        return name
    if re.fullmatch(r"h[0-9a-f]{16}", parts[-1]):
        parts.pop()
    text = "::".join(part[1:] if part.startswith("_$") else part for part in parts)
    for escape, char in _ESCAPES.items():
        text = text.replace(escape, char)
    return text.replace("..", "::")


def demangle_all(names: Sequence[str]) -> dict[str, str]:
    """Each symbol readable: v0 symbols (_R...) through binutils' c++filt when there is one (it knows
    Rust's v0 mangling), legacy ones here; crate disambiguators ([hash]) dropped."""
    readable = {name: demangle(name) for name in names}
    v0 = sorted({name for name in names if name.startswith("_R")})
    filt = shutil.which("c++filt")
    if v0 and filt:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run([filt], input="\n".join(v0) + "\n", capture_output=True, text=True, timeout=60,
                                  check=True)  # fmt: skip
            lines = done.stdout.splitlines()
            if len(lines) == len(v0):
                readable.update(zip(v0, lines, strict=True))
    # crate disambiguators ([hash]) and this crate's own name go: emq_native::a::b reads as a::b
    return {name: re.sub(r"\[[0-9a-f]{8,}\]", "", text).replace("emq_native::", "") for name, text in readable.items()}


def _pair(summary: dict[str, Any]) -> dict[str, int]:
    return {"reached": int(summary.get("covered", 0)), "total": int(summary.get("count", 0))}


def export(tools: Tools, profdata: Path, module: Path, crate: Path = CRATE_DIR) -> dict[str, Any]:
    """The counts of `profdata` against `module`: per file lines, regions, branches (reached/total) and
    functions, and every source line no history reached, grouped by function."""
    base: list[str | Path] = [tools.cov, "export", f"--instr-profile={profdata}", module]
    exported = json.loads(_run([*base, "--format=text"], "llvm-cov export"))
    lcov = _run([*base, "--format=lcov"], "llvm-cov export --format=lcov")
    data = exported["data"][0]
    files: list[dict[str, Any]] = []
    paths: dict[str, str] = {}  # relative -> the path as compiled
    for entry in data["files"]:
        relative = relative_source(entry["filename"], crate)
        if relative is None:
            continue
        paths[relative] = entry["filename"]
        summary = entry["summary"]
        branches = _pair(summary["branches"]) if tools.branches else None
        files.append({"file": relative, "transition": transition_of(relative, crate), "lines": _pair(summary["lines"]),
                      "regions": _pair(summary["regions"]), "branches": branches,
                      "functions": _pair(summary["functions"])})  # fmt: skip
    files.sort(key=lambda f: f["file"])
    totals: dict[str, Any] = {}
    for kind in ("lines", "regions", "functions", "branches"):
        if kind == "branches" and not tools.branches:
            totals[kind] = None
            continue
        reached, total = sum(f[kind]["reached"] for f in files), sum(f[kind]["total"] for f in files)
        totals[kind] = {"reached": reached, "total": total}
    spans = _function_spans(data["functions"], crate)
    unreached = _unreached(lcov, spans, crate)
    never = _never_entered(data["functions"], crate)
    return {"format": FORMAT, "version": 1, "module": str(module), "module_sha256": sha256(module),
            "rustc": tools.rustc, "branches_available": tools.branches, "totals": totals, "files": files,
            "unreached": unreached, "functions_never_entered": never}  # fmt: skip


def _never_entered(functions: list[dict[str, Any]], crate: Path) -> list[str]:
    """The crate's functions no history called (every instantiation counted 0), by name."""
    names = demangle_all([function["name"] for function in functions])
    counts: dict[str, int] = {}
    for function in functions:
        filenames = function.get("filenames") or []
        if filenames and relative_source(filenames[0], crate) is not None:
            name = names[function["name"]]
            counts[name] = counts.get(name, 0) + int(function.get("count", 0))
    return sorted(name for name, count in counts.items() if count == 0)


def _function_spans(functions: list[dict[str, Any]], crate: Path) -> dict[str, list[tuple[int, int, str]]]:
    """Per source file, each function's (first line, last line, name), instantiations as one."""
    names = demangle_all([function["name"] for function in functions])
    spans: dict[str, set[tuple[int, int, str]]] = {}
    for function in functions:
        filenames = function.get("filenames") or []
        if not filenames:
            continue
        relative = relative_source(filenames[0], crate)
        own = [region for region in function.get("regions", []) if region[5] == 0]
        if relative is None or not own:
            continue
        first, last = min(region[0] for region in own), max(region[2] for region in own)
        spans.setdefault(relative, set()).add((first, last, names[function["name"]]))
    return {file: sorted(found) for file, found in spans.items()}


def _innermost(spans: list[tuple[int, int, str]], line: int) -> str:
    holding = [span for span in spans if span[0] <= line <= span[1]]
    if not holding:
        return "(outside any function)"
    return min(holding, key=lambda span: (span[1] - span[0], span[2]))[2]


def _unreached(lcov: str, spans: dict[str, list[tuple[int, int, str]]], crate: Path) -> list[dict[str, Any]]:
    """From lcov's DA records: the lines counted 0, per (file, function), with their text."""
    zero: dict[str, list[int]] = {}
    current: str | None = None
    for line in lcov.splitlines():
        if line.startswith("SF:"):
            current = relative_source(line[3:], crate)
        elif line.startswith("DA:") and current is not None:
            at, count = line[3:].split(",")[:2]
            if int(count) == 0:
                zero.setdefault(current, []).append(int(at))
    groups: list[dict[str, Any]] = []
    for relative in sorted(zero):
        source = _source_lines(crate / relative)
        by_function: dict[str, list[int]] = {}
        for number in sorted(set(zero[relative])):
            by_function.setdefault(_innermost(spans.get(relative, []), number), []).append(number)
        for function, numbers in sorted(by_function.items(), key=lambda item: item[1][0]):
            lines = [[n, source[n - 1] if 0 < n <= len(source) else ""] for n in numbers]
            groups.append({"file": relative, "transition": transition_of(relative, crate), "function": function,
                           "lines": lines})  # fmt: skip
    return groups


def _source_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


# ---- merging shards ----------------------------------------------------------------------------------


def merge_runs(dirs: Sequence[Path], out: Path) -> dict[str, Any] | None:
    """`difftest merge`: the shards' profiles summed into OUT/native-coverage.profdata and exported
    again (with the module the shards recorded, or this checkout's instrumented build); None when no
    shard measured native coverage."""
    measured = [(d, json.loads((d / JSON_FILE).read_text())) for d in dirs if (d / JSON_FILE).is_file()]
    if not measured:
        return None
    tools = find_tools()
    profiles = [d / PROFDATA_FILE for d, _ in measured if (d / PROFDATA_FILE).is_file()]
    recorded = Path(measured[0][1].get("module", ""))
    shas = {doc.get("module_sha256") for _, doc in measured}
    module = recorded if recorded.is_file() and shas == {sha256(recorded)} else build(tools)
    out.mkdir(parents=True, exist_ok=True)
    profdata = out / PROFDATA_FILE
    if profiles:
        merge_profiles(tools, profiles, profdata)
        document = export(tools, profdata, module)
    else:
        document = empty(tools, module)
    document["profiles"] = {key: sum(int(doc.get("profiles", {}).get(key, 0)) for _, doc in measured)
                            for key in ("written", "lost")}  # fmt: skip
    notes = []
    if len(measured) < len(dirs):
        notes.append(f"{len(measured)} of {len(dirs)} shards measured native coverage")
    if len(shas) > 1 or module != recorded:
        notes.append(f"exported with {module} (the shards' own build is not here, or they differ)")
    if notes:
        document["note"] = "; ".join(notes)
    write_atomically(out / JSON_FILE, json.dumps(document, indent=1) + "\n")
    return document


# ---- showing it --------------------------------------------------------------------------------------


def _ratio(pair: dict[str, int] | None) -> str:
    if not pair:
        return "unavailable"
    total = pair["total"]
    percent = 100.0 * pair["reached"] / total if total else 100.0
    return f"{pair['reached']}/{total} ({percent:.1f}%)"


def summary_line(document: dict[str, Any]) -> str:
    totals = document.get("totals") or {}
    if not totals:
        return f"native coverage: {document.get('note', 'nothing measured')}"
    branches = _ratio(totals.get("branches")) if document.get("branches_available") else "unavailable (stable rustc)"
    return (f"native coverage: lines {_ratio(totals.get('lines'))}, regions {_ratio(totals.get('regions'))}, "
            f"branches {branches}; {len(document.get('unreached', []))} function(s) with unreached lines "
            f"({JSON_FILE})")  # fmt: skip


def _bar(pair: dict[str, int] | None, width: int = 110) -> str:
    if not pair or not pair["total"]:
        return ""
    share = pair["reached"] / pair["total"]
    colour = "#1f66c1" if share >= 0.999 else ("#c62828" if share < 0.5 else "#e08a00")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="12" role="img" '
            f'aria-label="{share:.0%}"><rect width="{width}" height="12" fill="#eee"/>'
            f'<rect width="{width * share:.1f}" height="12" fill="{colour}"/></svg>')  # fmt: skip


def html_section(document: dict[str, Any]) -> list[str]:
    """The report's section (pure): totals, per-file bars, the unreached lines by function."""
    esc = html.escape
    totals = document.get("totals") or {}
    profiles = document.get("profiles", {})
    out = [f"<p>{esc(summary_line(document))}.</p>"]
    lost = int(profiles.get("lost", 0))
    out.append(
        f'<p class="note">Counted from {profiles.get("written", 0):,} native server process(es) (each start of a '
        "server, restarts and crash steps included, and Hypothesis's shrinking replays). Counters live in each "
        "profile's mapped file (LLVM's continuous mode), so a server killed by a crash step keeps its counts"
        + (f"; <strong>{lost:,} process(es) lost theirs</strong> (nothing written: killed before the profile "
           "was set up)" if lost else "; no process lost its counts")
        + ". "
        + ("Branches counted (nightly compiler, -Z coverage-options=branch)." if document.get("branches_available")
           else "Branches unavailable: a stable compiler cannot count them (-Z coverage-options=branch is "
           "nightly-only; run with RUSTUP_TOOLCHAIN=nightly for them).")
        + "</p>"
    )  # fmt: skip
    if document.get("note"):
        out.append(f'<p class="note">{esc(str(document["note"]))}</p>')
    if not totals:
        return out
    out.append(_files_table(document))
    out += _unreached_section(document)
    return out


def _files_table(document: dict[str, Any]) -> str:
    """Each source file's lines, regions, branches and functions reached, with its transition."""
    esc = html.escape
    rows = ["<table><tr><th>file</th><th>transition</th><th>lines</th><th></th><th>regions</th><th></th>"
            "<th>branches</th><th>functions</th></tr>"]  # fmt: skip
    nowrap = "white-space:nowrap"
    for entry in document.get("files", []):
        lines, regions = entry.get("lines"), entry.get("regions")
        missing = ' class="missing"' if lines and lines["reached"] < lines["total"] else ""
        rows.append(f"<tr{missing}><td>{esc(entry['file'])}</td><td>{esc(entry.get('transition') or '')}</td>"
                    f'<td class="num" style="{nowrap}">{_ratio(lines)}</td><td>{_bar(lines)}</td>'
                    f'<td class="num" style="{nowrap}">{_ratio(regions)}</td><td>{_bar(regions)}</td>'
                    f'<td class="num" style="{nowrap}">{_ratio(entry.get("branches"))}</td>'
                    f'<td class="num" style="{nowrap}">{_ratio(entry.get("functions"))}</td></tr>')  # fmt: skip
    rows.append("</table>")
    return "".join(rows)


def _unreached_section(document: dict[str, Any]) -> list[str]:
    """The functions no history entered, and the source lines none reached, by function."""
    esc = html.escape
    out = []
    unreached = document.get("unreached", [])
    count = sum(len(group["lines"]) for group in unreached)
    never = document.get("functions_never_entered", [])
    if never:
        out.append(f"<p>Functions no history entered: <code>{esc(', '.join(never))}</code>.</p>")
    out.append(f"<h3>Source lines no history reached ({count}, in {len(unreached)} function(s))</h3>")
    if not unreached:
        out.append("<p>none: every line of executors/native/src was reached.</p>")
    for group in unreached:
        transition = group.get("transition")
        where = f"{group['file']}" + (f", {'transitions' if ',' in transition else 'transition'} {transition}"
                                      if transition else ", shared by the transitions")  # fmt: skip
        text = "\n".join(f"{number:>4}  {line}" for number, line in group["lines"])
        out.append(f'<details open><summary><code>{esc(group["function"])}</code> <span class="note">'
                   f"({esc(where)}; {len(group['lines'])} line(s))</span></summary>"
                   f"<pre>{esc(text)}</pre></details>")  # fmt: skip
    return out
