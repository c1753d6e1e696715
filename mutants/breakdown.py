"""What a release manager reads in a run: where each mutant is (its files and lines), the scores per
transition, per source file and per defect class, each survivor's diff and exposure, and the
survivors as GitHub annotations. Works on any catalogue entry that has a transition, a class, an
executor and a patch (hand-written or generated)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mutants.catalogue import EXECUTOR_DIRS, REPO, TRANSITIONS, Mutant
from mutants.records import Place, Record, Score, ScoreEntry, Scores
from mutants.score import ERROR, MISSED, TIMEOUT, label_transitions

# the executors' sources as the report names them (relative to the repository), wherever they were read from
SOURCE_NAMES = {executor: str(directory.relative_to(REPO)) for executor, directory in EXECUTOR_DIRS.items()}
DIMENSIONS = ("transition", "file", "class")
NOT_CAUGHT = (MISSED, TIMEOUT, ERROR)  # viable and not caught: the survivors the score counts against

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Block:
    """One block of changed lines of a patch, in the original file: `start`..`end` (1-based); an
    addition alone is placed on the line it lands before."""

    path: str  # relative to the executor's directory, as the patch names it
    start: int
    end: int


def blocks(patch: str) -> list[Block]:
    """Every change block of every hunk of every file the patch touches, in the original's lines."""
    found: list[Block] = []
    path = ""
    old = old_left = new_left = 0
    first: int | None = None
    last: int | None = None

    def close() -> None:
        nonlocal first, last
        if first is not None and path:
            found.append(Block(path, first, last if last is not None else first))
        first = last = None

    for line in patch.splitlines():
        if old_left <= 0 and new_left <= 0:
            close()
            if line.startswith("+++ "):
                name = line[4:].split("\t")[0].strip()
                path = name[2:] if name.startswith("b/") else name
                continue
            match = _HUNK.match(line)
            if match:
                old = int(match.group(1))
                old_left, new_left = int(match.group(2) or 1), int(match.group(4) or 1)
                old = max(old, 1) if old_left else old + 1  # "-N,0": the addition lands after line N
            continue
        if line.startswith("-"):
            first = old if first is None else first
            last = old
            old, old_left = old + 1, old_left - 1
        elif line.startswith("+"):
            first = old if first is None else first
            new_left -= 1
        elif not line.startswith("\\"):  # context: a change block ends
            close()
            old, old_left, new_left = old + 1, old_left - 1, new_left - 1
    close()
    return found


def locations(mutant: Mutant) -> list[Place]:
    """Where the mutant is: each change block of each of its patches, files named as the report does."""
    found: list[Place] = []
    for executor in mutant.executors:
        for block in blocks(mutant.patch_for(executor)):
            found.append({"file": f"{SOURCE_NAMES[executor]}/{block.path}", "start": block.start, "end": block.end})
    return found


def diff(mutant: Mutant) -> str:
    """The mutant's patch as a unified diff with the report's file names (a shared mutant: both)."""
    texts = []
    for executor in mutant.executors:
        text = re.sub(r"^(---|\+\+\+) ([ab])/", rf"\1 \2/{SOURCE_NAMES[executor]}/", mutant.patch_for(executor),
                      flags=re.M)  # fmt: skip
        texts.append(text if text.endswith("\n") else text + "\n")
    return "".join(texts)


def exposure(labels: dict[str, int], transition: str) -> dict[str, int]:
    """The labels (of those a campaign reached that name a transition) that name one of the mutant's."""
    mine = _transitions(transition)
    return {label: count for label, count in sorted(labels.items()) if label_transitions(label) & mine}


def unreached(record: Record) -> list[str]:
    """The required coverage labels of the mutant's transitions that its campaign never reached."""
    from difftest.coverage.labels import REQUIRED

    mine = _transitions(str(record.get("transition", "")))
    reached = record.get("exposure") or {}
    return [label for label in REQUIRED if label_transitions(label) & mine and label not in reached]


def _transitions(transition: str) -> set[str]:
    if transition.strip() == "all":
        return set(TRANSITIONS)
    return {t.strip().upper() for t in transition.split(",") if t.strip()}


# ---- scores per transition, file and class -------------------------------------------------------------


def keys(record: Record, dimension: str) -> list[str]:
    """Where a record counts in a dimension: each transition it names ("all" is its own), each file
    its patches change, its defect class."""
    if dimension == "transition":
        names = [t.strip() for t in str(record.get("transition", "")).split(",") if t.strip()]
        return names or ["(none)"]
    if dimension == "class":
        return [str(record.get("defect_class") or "(none)")]
    files = sorted({str(loc["file"]) for loc in record.get("locations") or []})
    return files or ["(unknown)"]


def _order(dimension: str, key: str) -> tuple[int, str]:
    if dimension == "transition" and key in TRANSITIONS:
        return TRANSITIONS.index(key), key
    return len(TRANSITIONS), key


def scores(records: Iterable[Record], score: Callable[[list[Record]], Score]) -> Scores:
    """Per dimension, per key: the `score` of its records (report.score: caught, viable, percent, the
    run's own definition of viable), the mutants counted, and those not caught."""
    groups: dict[str, dict[str, list[Record]]] = {d: {} for d in DIMENSIONS}
    for record in records:
        for dimension in DIMENSIONS:
            for key in keys(record, dimension):
                groups[dimension].setdefault(key, []).append(record)
    return {
        dimension: {
            key: _entry(score(found), found)
            for key, found in sorted(entries.items(), key=lambda item: _order(dimension, item[0]))
        }
        for dimension, entries in groups.items()
    }


def _entry(points: Score, found: list[Record]) -> ScoreEntry:
    return {**points, "mutants": len(found), "not_caught": [r["id"] for r in survivors(found)]}


def percent_text(percent: float | None) -> str:
    return "n/a" if percent is None else f"{percent:.1f} %"


def score_lines(breakdown: Scores) -> list[str]:
    """One console line per dimension: `by transition: CLAIM 5/5 (100.0 %), ...`."""
    return [
        f"by {dimension}: "
        + ", ".join(f"{key} {e['caught']}/{e['viable']} ({percent_text(e['percent'])})" for key, e in entries.items())
        for dimension, entries in breakdown.items()
        if entries
    ]


# ---- survivors ---------------------------------------------------------------------------------------------


def survivors(records: Iterable[Record]) -> list[Record]:
    """The viable mutants not caught (missed, timed out, errored), in report order."""
    return [r for r in records if r["status"] in NOT_CAUGHT]


def where_text(record: Record) -> str:
    """`executors/lua/sweep.lua:6` (each file's first change block; `-8` when it spans lines)."""
    firsts: dict[str, Place] = {}
    for loc in record.get("locations") or []:
        firsts.setdefault(str(loc["file"]), loc)
    return ", ".join(f"{f}:{loc['start']}" + (f"-{loc['end']}" if loc["end"] != loc["start"] else "")
                     for f, loc in firsts.items()) or "(unknown)"  # fmt: skip


def exposure_text(record: Record) -> str:
    """How far the campaign went and what of the mutant's transition it reached."""
    reached = record.get("exposure") or {}
    missing = unreached(record)
    text = f"{record.get('histories', 0)} histories, {record.get('steps', 0)} steps; "
    text += f"{len(reached)} labels of {record.get('transition', '?')} reached"
    if missing:
        text += f", {len(missing)} not ({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''})"
    return text


def survivor_line(record: Record) -> str:
    reused = " (reused)" if record.get("reused_from") else ""
    return f"not caught: {record['id']} ({record['status']}{reused}; {where_text(record)}; {exposure_text(record)})"


# ---- GitHub annotations --------------------------------------------------------------------------------------


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(records: Iterable[Record]) -> list[str]:
    """A workflow command per survivor and file it changes (`::error file=...,line=...::`), on its first
    change block there: a missed mutant an error, one that timed out or errored a warning."""
    lines = []
    for record in survivors(records):
        level = "error" if record["status"] == MISSED else "warning"
        title = f"mutant {'survived' if record['status'] == MISSED else record['status']}: {record['id']}"
        message = (f"{record.get('transition', '')} / {record.get('defect_class', '')}: not caught in "
                   f"{exposure_text(record)}. {str(record.get('reason', ''))[:300]}").strip()  # fmt: skip
        firsts: dict[str, Place] = {}
        for loc in record.get("locations") or []:
            firsts.setdefault(str(loc["file"]), loc)
        for file, loc in firsts.items():
            properties = ",".join([f"file={_escape_property(file)}", f"line={loc['start']}",
                                   f"endLine={loc['end']}", f"title={_escape_property(title)}"])  # fmt: skip
            lines.append(f"::{level} {properties}::{_escape_data(message)}")
    return lines
