"""The score history across runs: each finished run (or merge) appends one record (its score per
transition, file and class, verdict, gate and thresholds) to a JSON-lines file, and the report shows
the change since the last run of the same scope and budget."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import cast

from difftest.base.filelock import file_lock
from difftest.base.files import write_atomically
from mutants.breakdown import DIMENSIONS, percent_text
from mutants.catalogue import REPO
from mutants.records import BudgetRecord, Change, Document, FlatScores, HistoryEntry, LastRun, Score, Scores, Since

VERSION = 1
FILE_NAME = "mutants-scores.jsonl"  # beside the report's directory, by default
# budget fields that only limit wall time: a campaign they cut short is a timeout, never reused nor compared
TIME_LIMITS = ("timeout_s", "grace_s")


def default_file(reports: Path) -> Path:
    """reports/mutants-<time>/ -> reports/mutants-scores.jsonl: one file for the runs side by side."""
    return reports.parent / FILE_NAME


def budget_key(budget: BudgetRecord | None) -> str:
    """The budget as compared between runs (the wall-time limits left out)."""
    kept = {k: v for k, v in (budget or {}).items() if k not in TIME_LIMITS}
    if kept.get("sizes") is True:  # the default, which budgets recorded before the switch existed drew too
        del kept["sizes"]
    return json.dumps(kept, sort_keys=True)


def scope(document: Document) -> str:
    """What the run scored: the whole catalogue, or how its subset was chosen (--only, --shard, --in-diff);
    a run of the generated mutants (--generated) says so, and is compared only with such runs."""
    part = document.get("subset")
    generated = document.get("catalogue") == "generated"
    if not part:
        return "all generated mutants" if generated else "whole catalogue"
    if generated:
        return "generated: " + scope({**document, "catalogue": None})
    how = []
    only = part.get("only")
    if only:
        how.append("--only " + " ".join(sorted(only)))
    if part.get("shard"):
        how.append(f"--shard {part['shard']}")
    if part.get("in_diff"):
        how.append(f"--in-diff {part['in_diff']}")
    return ", ".join(how) or "shards missing from the merge"


def _commit() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                               timeout=10, check=False)  # fmt: skip
        if found.returncode == 0:
            return found.stdout.strip() or None
    return None


def _flat(breakdown: Scores) -> FlatScores:
    return {dimension: {key: {"caught": entry["caught"], "viable": entry["viable"], "percent": entry["percent"]}
                        for key, entry in entries.items()}
            for dimension, entries in breakdown.items()}  # fmt: skip


def entry(document: Document, reports: Path, history: Path) -> HistoryEntry:
    """The record a run appends: when, where its report is (relative to the history file), what it scored."""
    part = document.get("subset")
    return {
        "version": VERSION, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": _commit(),
        "report": os.path.relpath(reports.resolve(), history.resolve().parent),
        "verdict": document.get("verdict"), "passed": document.get("passed"),
        "thresholds": document.get("thresholds"), "budget": document.get("budget"), "scope": scope(document),
        "subset": None if not part else {"ran": part.get("ran"), "of": part.get("of")},
        "score": document.get("score"), "summary": document.get("summary"),
        "scores": _flat(document.get("scores") or {}),
        "reused": sum(1 for r in document.get("outcomes", []) if r.get("reused_from")),
    }  # fmt: skip


def read(history: Path) -> list[HistoryEntry]:
    """Every record, oldest first (a line that does not parse, as a hand edit may leave, is skipped)."""
    if not history.is_file():
        return []
    found: list[HistoryEntry] = []
    for line in history.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "score" in record:
                found.append(cast(HistoryEntry, record))  # the file's JSON, read as the entries this module wrote
    return found


def report_dir(record: HistoryEntry, history: Path) -> Path:
    return (history.parent / str(record.get("report", ""))).resolve()


def previous(history: Path, document: Document) -> HistoryEntry | None:
    """The last run of the same scope and budget: the one whose scores this run's are compared with."""
    key, mine = budget_key(document.get("budget")), scope(document)
    for record in reversed(read(history)):
        if budget_key(record.get("budget")) == key and record.get("scope") == mine:
            return record.copy()
    return None


def _change(before: float | None, now: float | None) -> float | None:
    return None if before is None or now is None else round(now - before, 1)


def _percent(points: Score | None) -> float | None:
    return points.get("percent") if points else None


def _moved_keys(before_entries: dict[str, Score], now_entries: dict[str, Score]) -> dict[str, Change]:
    """The keys of one dimension whose score moved, came or went."""
    moved: dict[str, Change] = {}
    for key in [*now_entries, *(k for k in before_entries if k not in now_entries)]:
        b = _percent(before_entries.get(key))
        n = _percent(now_entries.get(key))
        if key not in before_entries or key not in now_entries or b != n:
            moved[key] = {"before": b, "now": n, "change": _change(b, n)}
    return moved


def since(last: HistoryEntry | None, document: Document, history: Path) -> Since:
    """The change since `last` (outcomes.json's `since`): the score, and each transition, file and
    class whose score moved, came or went; with the last run's verdict, gate and thresholds."""
    if last is None:
        return {"history": str(history), "last": None}
    current = _flat(document.get("scores") or {})
    earlier = last.get("scores") or {}
    changes = {
        dimension: _moved_keys(earlier.get(dimension, {}), current.get(dimension, {})) for dimension in DIMENSIONS
    }
    before, now = _percent(last.get("score")), _percent(document.get("score"))
    kept: LastRun = {"at": last.get("at"), "commit": last.get("commit"), "report": last.get("report"),
                     "verdict": last.get("verdict"), "passed": last.get("passed"), "thresholds": last.get("thresholds"),
                     "scope": last.get("scope")}  # fmt: skip
    return {
        "history": str(history),
        "last": kept,
        "score": {"before": before, "now": now, "change": _change(before, now)},
        "changes": changes,
    }


def _signed(change: float | None) -> str:
    return "n/a" if change is None else f"{change:+.1f}"


def _moved(key: str, change: Change) -> str:
    before = "new" if change["before"] is None else percent_text(change["before"])
    now = "gone" if change["now"] is None else percent_text(change["now"])
    return f"{key} {before} -> {now}"


def since_lines(delta: Since | None) -> list[str]:
    """The console's lines: the score's change since the last run, then what moved per dimension."""
    if not delta:
        return []
    last = delta.get("last")
    if last is None:
        return [f"since the last run: none of this scope and budget in {delta.get('history')} (this is the first)"]
    score = delta["score"]
    gate = "passed" if last.get("passed") else "FAILED"
    breaking = (last.get("thresholds") or {}).get("break")
    lines = [f"since the last run ({last.get('at')}, {last.get('report')}: {gate}, break "
             f"{'none' if breaking is None else f'{breaking:g} %'}): score {percent_text(score['before'])} -> "
             f"{percent_text(score['now'])} ({_signed(score['change'])})"]  # fmt: skip
    for dimension, moved in (delta.get("changes") or {}).items():
        if moved:
            lines.append(f"  moved by {dimension}: " + ", ".join(_moved(key, m) for key, m in moved.items()))
    return lines


def append(history: Path, record: HistoryEntry) -> None:
    """Adds the record as the file's last line: the whole file rewritten atomically, under a lock (two
    runs finishing at once both land)."""
    history.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(history.parent / f".{history.name}.lock"):
        text = history.read_text(encoding="utf-8") if history.is_file() else ""
        if text and not text.endswith("\n"):
            text += "\n"
        write_atomically(history, text + json.dumps(record, sort_keys=True) + "\n")
