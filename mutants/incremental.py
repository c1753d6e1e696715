"""Incremental and diff-only runs: the digests an outcome depends on (its patched files, the instrument,
the budget), the earlier outcomes a run may reuse when none of them changed (`--incremental`), and the
mutants on lines changed against a git ref (`--in-diff REF`)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from difftest.base.problems import SetupProblem
from mutants import trend
from mutants.breakdown import blocks
from mutants.catalogue import EXECUTOR_DIRS, REPO, Mutant
from mutants.records import Document, Record, parse_document
from mutants.score import CAUGHT, MISSED, UNVIABLE, Budget
from mutants.workspace import source_files

# outcomes an unchanged mutant keeps; a timeout or an error (a loaded machine, a harness failure) is scored again
REUSABLE = (CAUGHT, MISSED, UNVIABLE)
# the runner's own code that decides an outcome (the report's code does not)
RUNNER_FILES = ("score.py", "child.py", "workspace.py")
INSTRUMENT_SUFFIXES = {".py", ".rs", ".toml", ".lock", ".lua"}
LOOKBACK = 30  # the reports of the score history's last runs that --incremental reads


def _sha(parts: list[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()[:24]


def _instrument_files() -> list[Path]:
    """difftest's own sources (its package, the history strategies, the executors' Python adapters, the
    runner's campaign code) and the project's pinned dependencies (pyproject.toml)."""
    found: list[Path] = []
    for top in (REPO / "difftest", REPO / "strategies"):
        found += [p for p in top.rglob("*") if p.is_file() and p.suffix in INSTRUMENT_SUFFIXES
                  and not {"target", "__pycache__"} & set(p.relative_to(REPO).parts)]  # fmt: skip
    found += [*(REPO / "executors").glob("*.py"), *(REPO / "executors").glob("*/*.py")]  # their Python hosts
    found += [REPO / "mutants" / name for name in RUNNER_FILES]
    found.append(REPO / "pyproject.toml")
    return sorted(p for p in found if p.is_file())


def _file_parts(files: list[Path], base: Path) -> list[bytes]:
    parts = []
    for path in files:
        try:
            name = str(path.relative_to(base))
        except ValueError:
            name = path.name
        parts += [name.encode(), path.read_bytes()]
    return parts


def instrument_digest() -> str:
    """difftest's own sources and the Valkey version the servers run (DIFFTEST_VALKEY_VERSION)."""
    parts = _file_parts(_instrument_files(), REPO)
    parts.append(os.environ.get("DIFFTEST_VALKEY_VERSION", "").encode())
    return _sha(parts)


def executor_digest(executor: str) -> str:
    """An executor's unmodified sources (every file a mutant of it could patch)."""
    source = EXECUTOR_DIRS[executor]
    return _sha([executor.encode(), *_file_parts(source_files(executor, source), source)])


def budget_digest(budget: Budget) -> str:
    return _sha([trend.budget_key(budget.as_json()).encode()])


@dataclass
class Digests:
    """The digests of one run, each executor's and the instrument's computed once."""

    budget: Budget
    _executors: dict[str, str] = field(default_factory=dict)
    _instrument: str = ""

    def _executor(self, executor: str) -> str:
        if executor not in self._executors:
            self._executors[executor] = executor_digest(executor)
        return self._executors[executor]

    def of(self, mutant: Mutant) -> dict[str, str]:
        """`patched`: the mutant's patches and the files they change, as they are now; `instrument`:
        difftest's sources and the executors the mutant leaves unmodified (its reference); `budget`."""
        if not self._instrument:
            self._instrument = instrument_digest()
        patched: list[bytes] = []
        for executor in mutant.executors:
            patch = mutant.patch_for(executor)
            patched += [executor.encode(), patch.encode()]
            for path in sorted({b.path for b in blocks(patch)}):
                source = EXECUTOR_DIRS[executor] / path
                patched += [path.encode(), source.read_bytes() if source.is_file() else b"(absent)"]
        reference = [self._executor(e).encode() for e in sorted(EXECUTOR_DIRS) if e not in mutant.executors]
        return {"patched": _sha(patched), "instrument": _sha([self._instrument.encode(), *reference]),
                "budget": budget_digest(self.budget)}  # fmt: skip


# ---- earlier outcomes ---------------------------------------------------------------------------------------

_WHY = {"patched": "its patch or a file it patches changed", "instrument": "the instrument changed (difftest's "
        "sources or the executor it is compared with)", "budget": "the budget changed"}  # fmt: skip


@dataclass
class Earlier:
    """The outcomes of earlier runs, newest first: the report being rewritten (when the run goes into
    a directory that holds one) and the reports the score history names."""

    reports: list[tuple[Path, Document]]

    @classmethod
    def load(cls, reports: Path, history: Path | None) -> Earlier:
        found: list[tuple[Path, Document]] = []
        directories = [reports.resolve()]
        if history is not None:  # the newest reports only: an older outcome is reused through a newer one
            directories += [trend.report_dir(r, history) for r in reversed(trend.read(history))][:LOOKBACK]
        for directory in dict.fromkeys(directories):
            path = directory / "outcomes.json"
            try:
                found.append((directory, parse_document(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError):
                continue  # a report since removed, or never finished: nothing to reuse from it
        return cls(found)

    def latest(self, mutant_id: str) -> Record | None:
        for _, document in self.reports:
            for record in document.get("outcomes", []):
                if record.get("id") == mutant_id:
                    return record.copy()
        return None

    def reusable(self, mutant_id: str, digests: dict[str, str]) -> tuple[Path, Record] | None:
        """The newest record of the mutant scored with these very digests and a conclusive status."""
        for directory, document in self.reports:
            for record in document.get("outcomes", []):
                if record.get("id") == mutant_id and record.get("digests") == digests and record["status"] in REUSABLE:
                    return directory, record
        return None

    def why(self, mutant_id: str, digests: dict[str, str]) -> str:
        """Why the mutant is scored again: new, one of its digests changed, or last time inconclusive."""
        record = self.latest(mutant_id)
        if record is None:
            return "new: no earlier outcome"
        recorded = record.get("digests") or {}
        changed = [text for key, text in _WHY.items() if recorded.get(key) != digests.get(key)]
        if changed:
            return "; ".join(changed)
        return f"last time {record['status']}"


# ---- --in-diff ------------------------------------------------------------------------------------------------

_NEW_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def _git(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=120,
                              check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise SetupProblem(f"--in-diff: git could not run ({exc}); install git or leave --in-diff out") from None


def changed_lines(ref: str, directory: Path) -> dict[Path, frozenset[int]]:
    """The lines (of the files as they are now) that `git diff REF` adds or changes under `directory`:
    like cargo-mutants' --in-diff, a line only deleted selects nothing. A ref git does not know is
    one line (SetupProblem: exit 2)."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise SetupProblem(f"--in-diff {ref}: {directory} is not in a git repository ({top.stderr.strip()[:200]})")
    known = _git(directory, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if known.returncode != 0:
        raise SetupProblem(f"--in-diff {ref}: not a commit git knows in {top.stdout.strip()} (give a branch, tag "
                           "or commit, e.g. --in-diff origin/main)")  # fmt: skip
    diff = _git(directory, "diff", "--unified=0", "--no-color", "--no-ext-diff", "--no-renames",
                known.stdout.strip(), "--", ".")  # fmt: skip
    if diff.returncode != 0:
        raise SetupProblem(f"--in-diff {ref}: git diff failed: {diff.stderr.strip()[:200]}")
    root = Path(top.stdout.strip())
    found: dict[Path, set[int]] = {}
    path: Path | None = None
    for line in diff.stdout.splitlines():
        if line.startswith("+++ "):
            name = line[4:].strip()
            path = None if name == "/dev/null" else (root / (name[2:] if name.startswith("b/") else name)).resolve()
            continue
        match = _NEW_HUNK.match(line)
        if match and path is not None:
            start, count = int(match.group(1)), int(match.group(2) or 1)
            found.setdefault(path, set()).update(range(start, start + count))
    return {p: frozenset(lines) for p, lines in found.items()}


def select_in_diff(mutants: list[Mutant], ref: str) -> list[Mutant]:
    """The mutants with a change block on a line changed against `ref` (in catalogue order). A bad ref
    is one line (SetupProblem), raised before anything runs."""
    changed = {executor: changed_lines(ref, source.resolve()) for executor, source in EXECUTOR_DIRS.items()}

    def touched(mutant: Mutant) -> bool:
        for executor in mutant.executors:
            source = EXECUTOR_DIRS[executor]
            for block in blocks(mutant.patch_for(executor)):
                lines = changed[executor].get((source / block.path).resolve(), frozenset())
                if any(line in lines for line in range(block.start, block.end + 1)):
                    return True
        return False

    return [m for m in mutants if touched(m)]
