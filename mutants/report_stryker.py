"""The Stryker mutation-testing-elements JSON of an outcomes document, and where each mutant's patch lands."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

from mutants import breakdown
from mutants.catalogue import BOTH, EXECUTOR_DIRS, REPO, Mutant, load
from mutants.records import BudgetRecord, Document, Record
from mutants.report_document import Thresholds, scored
from mutants.score import CAUGHT, EQUIVALENT, ERROR, MISSED, TIMEOUT, UNVIABLE

STRYKER_STATUS = {CAUGHT: "Killed", MISSED: "Survived", TIMEOUT: "Timeout", UNVIABLE: "CompileError",
                  ERROR: "RuntimeError", EQUIVALENT: "Ignored"}  # fmt: skip
LANGUAGES = {"native": "rust", "lua": "lua"}


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Location:
    path: str  # the patched file, relative to the executor's directory
    start_line: int
    start_column: int
    end_line: int
    end_column: int

    def as_stryker(self) -> dict[str, dict[str, int]]:
        return {"start": {"line": self.start_line, "column": self.start_column},
                "end": {"line": self.end_line, "column": self.end_column}}  # fmt: skip


def patch_location(patch: str, original: dict[str, str] | None = None) -> Location | None:
    """The lines of the original file the first hunk of the patch changes (1-based, columns too):
    from the first removed line to the last removed line of that hunk, or, for a hunk that only
    adds, the line the addition lands before. `original` (path -> text) gives the end column."""
    path = ""
    lines = patch.splitlines()
    for at, line in enumerate(lines):
        if line.startswith("+++ "):
            path = line[4:].split("\t")[0].strip()
            path = path[2:] if path.startswith("b/") else path
            continue
        match = _HUNK.match(line)
        if not match or not path:
            continue
        old = int(match.group(1))
        old_left = int(match.group(2) or 1)
        new_left = int(match.group(4) or 1)
        first: int | None = None
        last: int | None = None
        first_text = last_text = ""
        for body in lines[at + 1 :]:
            if old_left <= 0 and new_left <= 0:
                break  # the hunk's counted lines are read (a removed "-- x" reads "--- x")
            if body.startswith("-"):
                if first is None:
                    first, first_text = old, body[1:]
                last, last_text = old, body[1:]
                old, old_left = old + 1, old_left - 1
            elif body.startswith("+"):
                first = old if first is None else first  # an addition lands before the old line `old`
                new_left -= 1
            elif not body.startswith("\\"):  # a context line: the first change block is over
                if first is not None:
                    break
                old, old_left, new_left = old + 1, old_left - 1, new_left - 1
        if first is None:
            return None
        if last is None:  # only added lines: the line they land before (or the last line)
            text = (original or {}).get(path, "")
            source_lines = text.splitlines()
            first = max(1, min(first, len(source_lines))) if source_lines else first
            last_text = source_lines[first - 1] if source_lines else ""
            last = first
        start_column = len(first_text) - len(first_text.lstrip()) + 1 if first_text else 1
        return Location(path, first, start_column, last, len(last_text) + 1)
    return None


class StrykerMutant(TypedDict):
    id: str
    mutatorName: str
    location: dict[str, dict[str, int]]
    status: str
    statusReason: str
    description: str
    duration: int
    testsCompleted: int


class StrykerFile(TypedDict):
    language: str
    source: str
    mutants: list[StrykerMutant]


class StrykerReport(TypedDict):
    """The parts of mutation-testing-elements' schema version 2 this report fills."""

    schemaVersion: str
    thresholds: dict[str, int]
    projectRoot: str
    framework: dict[str, str]
    config: dict[str, BudgetRecord | None]
    files: dict[str, StrykerFile]


def stryker(document: Document, catalogue: list[Mutant] | None = None) -> StrykerReport:
    """The mutation-testing-elements report (schema version 2): one file per patched source file,
    with its original text and its mutants (the canary and the null run are not mutants here)."""
    by_id = {m.id: m for m in (catalogue if catalogue is not None else load())}
    files: dict[str, StrykerFile] = {}
    for record in scored(document):
        mutant = by_id.get(record["id"])
        if mutant is None:
            continue
        # a shared mutant is one entry in each patched file (ids "<id>:lua", "<id>:native")
        for executor in mutant.executors:
            _stryker_entry(files, record, mutant, executor)
    thresholds = Thresholds.from_json(document.get("thresholds"))
    return {"schemaVersion": "2", "thresholds": {"high": round(thresholds.high), "low": round(thresholds.low)},
            "projectRoot": str(REPO),
            "framework": {"name": "difftest mutants"}, "config": {"budget": document.get("budget", BudgetRecord())},
            "files": files}  # fmt: skip


def _stryker_entry(files: dict[str, StrykerFile], record: Record, mutant: Mutant, executor: str) -> None:
    """One mutant's entry under the file its patch for `executor` changes first."""
    source = EXECUTOR_DIRS[executor]
    patch = mutant.patch_for(executor)
    texts: dict[str, str] = {}
    location = patch_location(patch)
    if location is not None and (source / location.path).is_file():
        texts[location.path] = (source / location.path).read_text(encoding="utf-8")
        location = patch_location(patch, texts)
    if location is None:
        return
    name = f"{breakdown.SOURCE_NAMES[executor]}/{location.path}"  # wherever the sources were read from
    entry = files.setdefault(name, {"language": LANGUAGES[executor], "source": texts.get(location.path, ""),
                                    "mutants": []})  # fmt: skip
    status = STRYKER_STATUS.get(record["status"], "RuntimeError")
    reason = str(record.get("reason", ""))[:2000]
    if record["status"] == CAUGHT and record.get("artifact"):
        reason += f" (the killing history: {record['artifact']}/report.txt)"
    shared = mutant.executor == BOTH
    entry["mutants"].append({
        "id": f"{mutant.id}:{executor}" if shared else mutant.id, "mutatorName": mutant.defect_class,
        "location": location.as_stryker(),
        "status": status, "statusReason": reason, "description": f"{mutant.why} Exposed by: {mutant.exposure}",
        "duration": round(1000 * float(record.get("campaign_s", 0.0))),
        "testsCompleted": int(record.get("histories", 0)),
    })  # fmt: skip
