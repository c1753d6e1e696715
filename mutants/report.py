"""The report of a run (or of merged shards): outcomes.json, the Stryker mutation-testing-elements
JSON, JUnit XML and a self-contained HTML page, all from one outcomes document."""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from difftest.base.files import write_atomically
from mutants import breakdown
from mutants.catalogue import BOTH, EXECUTOR_DIRS, REPO, Mutant, load
from mutants.score import CAUGHT, EQUIVALENT, ERROR, MISSED, TIMEOUT, UNVIABLE

OUTCOMES = "outcomes.json"
STRYKER = "mutation-report.json"
JUNIT = "junit.xml"
HTML = "report.html"
NULL_RUN = "null-run"
# the null run's status when it found no divergence on the unmodified pair (its pass); reports before
# this name called it "missed", as a mutant's; they are read as "clean"
CLEAN = "clean"

# verdicts of a report
ALL_CAUGHT, SOME_NOT_CAUGHT, VOID = "all caught", "some not caught", "void"
RUNNING, INCOMPLETE = "running", "incomplete"  # a run under way; merged shards that miss some
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM stopped the run

STRYKER_STATUS = {CAUGHT: "Killed", MISSED: "Survived", TIMEOUT: "Timeout", UNVIABLE: "CompileError",
                  ERROR: "RuntimeError", EQUIVALENT: "Ignored"}  # fmt: skip
LANGUAGES = {"native": "rust", "lua": "lua"}


@dataclass(frozen=True)
class Thresholds:
    """Stryker's three: a score at or above `high` is drawn good, below `low` bad, between them a
    warning; below `breaking` (when set) the run fails (exit 1). Percentages of caught / viable."""

    high: float = 80.0
    low: float = 60.0
    breaking: float | None = None  # None: no score gate, every mutant must be caught

    def as_json(self) -> dict[str, float | None]:
        return {"high": self.high, "low": self.low, "break": self.breaking}

    @classmethod
    def from_json(cls, recorded: dict[str, Any] | None) -> Thresholds:
        recorded = recorded or {}
        return cls(float(recorded.get("high", cls.high)), float(recorded.get("low", cls.low)),
                   None if recorded.get("break") is None else float(recorded["break"]))  # fmt: skip


DEFAULT_THRESHOLDS = Thresholds()


def accepted(record: dict[str, Any]) -> bool:
    """A mutant record that does not fail the gate: caught, or triaged equivalent or unviable (a
    generated mutant, mutants/triage.py)."""
    return record["status"] == CAUGHT or (bool(record.get("triage")) and record["status"] in (EQUIVALENT, UNVIABLE))


def is_canary(record: dict[str, Any]) -> bool:
    return record.get("defect_class") == "canary"


def is_clean(record: dict[str, Any]) -> bool:
    """The null run found no divergence (its pass; "missed" in reports that predate CLEAN)."""
    return record["id"] == NULL_RUN and record["status"] in (CLEAN, MISSED)


def upgraded(document: dict[str, Any]) -> dict[str, Any]:
    """The document with an older report's names read as today's: the clean null run's "missed" as CLEAN."""
    for record in document.get("outcomes", []):
        if is_clean(record):
            record["status"] = CLEAN
    return document


def scored(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The mutant records that count: not the null run, not the canary."""
    return [r for r in document["outcomes"] if r["id"] != NULL_RUN and not is_canary(r)]


def score(records: list[dict[str, Any]]) -> dict[str, Any]:
    """caught / viable (viable: the patch applied and built; a timeout or error is viable, not caught;
    a generated mutant triaged equivalent is not viable: mutants/triage.py)."""
    caught = sum(r["status"] == CAUGHT for r in records)
    viable = sum(r["status"] not in (UNVIABLE, EQUIVALENT) for r in records)
    return {"caught": caught, "viable": viable, "percent": round(100.0 * caught / viable, 1) if viable else None}


def passes(document: dict[str, Any]) -> bool:
    """The gate: a finished, non-void report whose every mutant was caught or, with a break threshold,
    whose score is at or above it (whatever survived). Exit 0 when it passes, else 1 (or 4 when void)."""
    verdict = str(document.get("verdict"))
    if verdict not in (ALL_CAUGHT, SOME_NOT_CAUGHT):
        return False
    breaking = Thresholds.from_json(document.get("thresholds")).breaking
    if breaking is None:
        return verdict == ALL_CAUGHT
    percent = (document.get("score") or score(scored(document)))["percent"]
    return percent is not None and float(percent) >= breaking


def summarise(document: dict[str, Any]) -> dict[str, Any]:
    """Fills the document's summary (counts by status), score, scores per transition, file and class,
    and gate (`passed`) from its records."""
    records = scored(document)
    document["summary"] = dict(Counter(r["status"] for r in records))
    document["score"] = score(records)
    document["scores"] = breakdown.scores(records, score)
    document["passed"] = passes(document)
    return document


def subset(universe: list[str], chosen: list[str], only: list[str] | None,
           shard: tuple[int, int] | None, in_diff: str | None = None) -> dict[str, Any] | None:  # fmt: skip
    """What a run that scores part of the catalogue records (None for the whole of it): how many of
    how many, chosen how (--only, --shard, --in-diff REF), and the ids left out (in catalogue order)."""
    ran = set(chosen)
    left_out = [i for i in universe if i not in ran]
    if not left_out:
        return None
    return {"ran": len(chosen), "of": len(universe), "only": sorted(only) if only else None,
            "shard": None if shard is None else f"{shard[0]}/{shard[1]}", "in_diff": in_diff,
            "left_out": left_out}  # fmt: skip


def subset_text(part: dict[str, Any]) -> str:
    """ "subset: 3 of 61 mutants (--only a b c)": one line for the console and the page."""
    how = []
    if part.get("only"):
        only = list(part["only"])
        more = f" and {len(only) - 6} more" if len(only) > 6 else ""
        how.append("--only " + " ".join(only[:6]) + more)
    if part.get("shard"):
        how.append(f"--shard {part['shard']}")
    if part.get("in_diff"):
        how.append(f"--in-diff {part['in_diff']}: the mutants on lines changed against it")
    if not how:
        how.append("shards missing from the merge")
    return f"subset: {part['ran']} of {part['of']} mutants ({', '.join(how)})"


def budget_text(budget: dict[str, Any]) -> str:
    """The budget in words (the page's line; outcomes.json keeps the fields)."""
    known = {"seed", "examples", "max_steps", "timeout_s", "grace_s", "shrink_s", "restarts", "replicas", "sizes"}
    parts = []
    if "seed" in budget:
        parts.append(f"seed {budget['seed']}")
    if "examples" in budget:
        steps = f", at most {budget['max_steps']} steps each" if "max_steps" in budget else ""
        parts.append(f"{int(budget['examples']):,} histories per campaign{steps}")
    if "timeout_s" in budget:
        killed = f" (killed at {budget['timeout_s'] + budget['grace_s']:g} s)" if "grace_s" in budget else ""
        parts.append(f"{budget['timeout_s']:g} s per campaign{killed}")
    if "shrink_s" in budget:
        parts.append(f"shrinking up to {budget['shrink_s']:g} s")
    if "restarts" in budget:
        parts.append(f"restarts and crashes {'on' if budget['restarts'] else 'off'}")
    if "replicas" in budget:
        parts.append(f"replicas {'on' if budget['replicas'] else 'off'}")
    if budget.get("sizes") is False:  # on is the default, and what a budget from before it was recorded did
        parts.append("production's size off")
    parts += [f"{k.replace('_', ' ')} {v}" for k, v in budget.items() if k not in known]
    return "; ".join(parts)


# ---- where a mutant is: its patch's first hunk, in the original file ----------------------------------

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


def stryker(document: dict[str, Any], catalogue: list[Mutant] | None = None) -> dict[str, Any]:
    """The mutation-testing-elements report (schema version 2): one file per patched source file,
    with its original text and its mutants (the canary and the null run are not mutants here)."""
    by_id = {m.id: m for m in (catalogue if catalogue is not None else load())}
    files: dict[str, dict[str, Any]] = {}
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
            "framework": {"name": "difftest mutants"}, "config": {"budget": document.get("budget", {})},
            "files": files}  # fmt: skip


def _stryker_entry(files: dict[str, dict[str, Any]], record: dict[str, Any], mutant: Mutant, executor: str) -> None:
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


# ---- JUnit ---------------------------------------------------------------------------------------------


def junit(document: dict[str, Any]) -> str:
    """One test case per record: the null run passes with no divergence, the canary and every
    mutant pass when caught; a missed or timed-out mutant is a failure, unviable or error an error."""
    cases = []
    document = upgraded(document)
    for record in document["outcomes"]:
        rid, status = record["id"], record["status"]
        classname = "mutants.null-run" if rid == NULL_RUN else f"mutants.{record['executor']}"
        case = TestCase(rid, classname=classname, elapsed_sec=float(record.get("campaign_s", 0.0)),
                        stdout=_describe(record))  # fmt: skip
        reason = record.get("reason", "")
        if rid == NULL_RUN:
            if status != CLEAN:
                case.add_failure_info(f"the null run was {status}: the report is void", reason or None)
        elif status == EQUIVALENT or (status == UNVIABLE and record.get("triage")):
            case.add_skipped_info(f"{status}: triage: {record.get('triage', '')}")
        elif status in (UNVIABLE, ERROR):
            case.add_error_info(f"{status}: {reason[:200]}", reason or None)
        elif status != CAUGHT:
            what = "the canary was not caught: the report is void" if is_canary(record) else f"mutant {status}"
            case.add_failure_info(what, reason or f"no divergence in {record.get('histories', 0)} histories")
        cases.append(case)
    suite = TestSuite("mutants", cases, properties=_properties(document))
    return str(to_xml_report_string([suite]))


def _properties(document: dict[str, Any]) -> dict[str, str]:
    found = {f"budget.{k}": str(v) for k, v in document.get("budget", {}).items()}
    found["verdict"] = str(document.get("verdict"))
    found["passed"] = str(document.get("passed"))
    found.update({f"threshold.{k}": str(v) for k, v in (document.get("thresholds") or {}).items()})
    if document.get("subset"):
        found["subset"] = subset_text(document["subset"])
    return found


def _describe(record: dict[str, Any]) -> str:
    parts = [f"status: {record['status']}", f"restarts: {'on' if record.get('restarts', True) else 'off'}",
             f"histories: {record.get('histories', 0)}", f"steps: {record.get('steps', 0)}"]  # fmt: skip
    if record.get("caught_by"):
        parts.append(f"caught by: {record['caught_by']}")
    if record.get("artifact"):
        parts.append(f"artifact: {record['artifact']}")
    return "\n".join(parts)


# ---- the human page --------------------------------------------------------------------------------------

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
td { overflow-wrap: break-word; }
td.reason { min-width: 18em; overflow-wrap: anywhere; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.caught { background: #dff5dd; } .missed { background: #fbdcdc; } .timeout { background: #fdecc8; }
.unviable { background: #e8e8e8; } .error { background: #f6d0f0; }
.verdict { font-size: 1.2em; font-weight: bold; } .ok { color: #16621a; } .bad { color: #a11; }
.warn { color: #9a5b00; } .subset { font-weight: bold; color: #9a5b00; }
details.left-out { max-width: 70em; } details.left-out code { margin-right: .6em; display: inline-block; }
dl { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; } dt { font-weight: bold; }
.scores { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
.scores table { width: auto; max-width: 100%; } .scores td.key { overflow-wrap: anywhere; max-width: 26em; }
.up { color: #16621a; } .down { color: #a11; }
.survivor { border: 1px solid #ddd; border-left: 4px solid #c9302c; padding: .2em .8em; margin: .8em 0; }
.survivor h3 { font-size: 1em; margin: .4em 0; } .survivor p { margin: .3em 0; overflow-wrap: anywhere; }
pre.diff { background: #f7f7f7; padding: .5em; overflow-x: auto; max-width: 100%; font-size: 12px; }
pre.diff span { display: inline-block; width: 100%; } pre.diff .add { background: #dff5dd; }
pre.diff .del { background: #fbdcdc; } pre.diff .hunk { color: #6a5acd; }
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _null_and_canary(document: dict[str, Any]) -> tuple[str, str]:
    null = next((r for r in document["outcomes"] if r["id"] == NULL_RUN), None)
    canary = next((r for r in document["outcomes"] if is_canary(r)), None)
    if null is None:
        null_text = "not run"
    elif is_clean(null):
        null_text = (
            f"clean: no divergence on the unmodified pair in {null['histories']} histories ({null['steps']} steps)"
        )
    else:
        null_text = f"FAILED ({null['status']}): {null.get('reason', '')}"
    if canary is None:
        canary_text = "not run"
    elif canary["status"] == CAUGHT:
        canary_text = f"caught ({canary['id']}, {canary['histories']} histories, {canary['steps']} steps)"
    else:
        canary_text = f"NOT caught ({canary['status']}): {canary.get('reason', '')}"
    return null_text, canary_text


_STATUS_COLOURS = {CAUGHT: "#3c9a3f", MISSED: "#c9302c", TIMEOUT: "#e39b1b", UNVIABLE: "#9a9a9a", ERROR: "#b04aa0"}


def _score_bar(records: list[dict[str, Any]]) -> str:
    """One stacked bar: the scored mutants by outcome, each status its colour and count."""
    width, height = 720, 34
    total = len(records) or 1
    counts = [(status, sum(1 for r in records if r["status"] == status)) for status in _STATUS_COLOURS]
    parts, x = [], 0.0
    for status, count in counts:
        if not count:
            continue
        w = width * count / total
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{_STATUS_COLOURS[status]}">'
                     f"<title>{status}: {count}</title></rect>")  # fmt: skip
        if w > 60:
            parts.append(f'<text x="{x + 6:.1f}" y="22" fill="#fff" font-size="13">{status} {count}</text>')
        x += w
    return (f'<svg class="chart" role="img" aria-label="outcomes" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg>')  # fmt: skip


def _kill_chart(records: list[dict[str, Any]], budget: int) -> str:
    """Histories each mutant took to be caught, on a log scale up to the example budget (the dashed
    line): how much margin each kill has. A mutant not caught reaches the line in its colour."""
    if not records:
        return ""
    label_w, plot_w, row_h = 300, 420, 16
    height = row_h * len(records) + 30
    top = max(2, budget)
    scale = math.log10(top + 1)

    def x_of(histories: int) -> float:
        return label_w + plot_w * math.log10(max(1, histories) + 1) / scale

    parts = []
    ordered = sorted(records, key=lambda r: (r["status"] != CAUGHT, r.get("histories", 0) if r["status"] == CAUGHT
                                             else top, r["id"]))  # fmt: skip
    for row, record in enumerate(ordered):
        y = row * row_h
        caught = record["status"] == CAUGHT
        histories = int(record.get("histories", 0)) if caught else top
        colour = _STATUS_COLOURS.get(record["status"], "#666")
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end" font-size="11">{_esc(record["id"])}</text>'
        )
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{x_of(histories) - label_w:.1f}" height="{row_h - 5}" '
                     f'fill="{colour}"><title>{_esc(record["id"])}: {_esc(record["status"])}'
                     f"{f', {histories} histories' if caught else ''}</title></rect>")  # fmt: skip
    axis_y = row_h * len(records) + 4
    for tick in (1, 10, 100, 1000, 10000):
        if tick <= top:
            parts.append(f'<line x1="{x_of(tick):.1f}" y1="0" x2="{x_of(tick):.1f}" y2="{axis_y}" stroke="#ddd"/>'
                         f'<text x="{x_of(tick):.1f}" y="{axis_y + 14}" font-size="10" text-anchor="middle">{tick}'
                         "</text>")  # fmt: skip
    parts.append(f'<line x1="{x_of(top):.1f}" y1="0" x2="{x_of(top):.1f}" y2="{axis_y}" stroke="#222" '
                 f'stroke-dasharray="4 3"><title>the budget: {top} histories</title></line>')  # fmt: skip
    width = label_w + plot_w + 20
    return (f'<svg class="chart" role="img" aria-label="histories to kill" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg>')  # fmt: skip


def _score_html(document: dict[str, Any], points: dict[str, Any]) -> str:
    """The score coloured by the thresholds (good at or above high, bad below low), and the gate."""
    thresholds = Thresholds.from_json(document.get("thresholds"))
    percent = points["percent"]
    shown = "n/a" if percent is None else f"{percent} %"
    colour = "bad" if percent is None or percent < thresholds.low else "ok" if percent >= thresholds.high else "warn"
    text = f'<span class="{colour}">{points["caught"]} / {points["viable"]} ({_esc(shown)})</span>'
    part = document.get("subset")
    if part:
        text += f' <span class="subset">a subset score: {part["ran"]} of {part["of"]} mutants ran</span>'
    return text


def _thresholds_text(document: dict[str, Any]) -> str:
    thresholds = Thresholds.from_json(document.get("thresholds"))
    text = f"high {thresholds.high:g} %, low {thresholds.low:g} %, "
    if thresholds.breaking is None:
        text += "break none (the run passes only when every mutant is caught)"
    else:
        text += f"break {thresholds.breaking:g} % (a score below it fails the run, exit 1)"
    return text + f": {'passed' if document.get('passed', passes(document)) else 'FAILED'}"


def _change_html(change: dict[str, Any] | None) -> str:
    """A score's change since the last run: +2.5 in green, -10.0 in red, new or gone in words."""
    if not change:
        return ""
    if change.get("before") is None and change.get("now") is not None:
        return "new"
    if change.get("now") is None:
        return "gone" if change.get("before") is not None else ""
    value = change.get("change")
    if value is None:
        return ""
    return f'<span class="{"up" if value > 0 else "down" if value < 0 else ""}">{value:+.1f}</span>'


def _since_html(document: dict[str, Any]) -> str:
    delta = document.get("since")
    if not delta:
        return ""
    last = delta.get("last")
    if last is None:
        return _esc(f"the first run of this scope and budget in {delta.get('history')}")
    score_change = delta.get("score") or {}
    breaking = (last.get("thresholds") or {}).get("break")
    return (f"score {_esc(breakdown.percent_text(score_change.get('before')))} &rarr; "
            f"{_esc(breakdown.percent_text(score_change.get('now')))} ({_change_html(score_change) or 'n/a'}) since "
            f"{_esc(last.get('at'))} ({_esc(last.get('report'))}, commit {_esc(str(last.get('commit') or '?')[:12])}: "
            f"{'passed' if last.get('passed') else 'FAILED'}, break "
            f"{'none' if breaking is None else _esc(f'{breaking:g} %')})")  # fmt: skip


def _scores_html(document: dict[str, Any]) -> str:
    """A table per dimension (transition, source file, defect class): caught / viable, the score
    coloured by the thresholds, its change since the last run, the mutants not caught."""
    thresholds = Thresholds.from_json(document.get("thresholds"))
    since = document.get("since") or {}
    changes = since.get("changes") or {}
    unchanged = "=" if since.get("last") else ""  # compared with a last run, and the same score
    tables = []
    for dimension, entries in (document.get("scores") or breakdown.scores(scored(document), score)).items():
        rows = []
        for key, entry in entries.items():
            percent = entry.get("percent")
            colour = "bad" if percent is None or percent < thresholds.low else "ok" if percent >= thresholds.high \
                else "warn"  # fmt: skip
            missing = ", ".join(entry.get("not_caught", []))
            rows.append(f'<tr><td class="key">{_esc(key)}</td><td class="num">{entry["caught"]} / {entry["viable"]}'
                        f'</td><td class="num {colour}">{_esc(breakdown.percent_text(percent))}</td>'
                        f'<td class="num">{_change_html((changes.get(dimension) or {}).get(key)) or unchanged}</td>'
                        f'<td class="key">{_esc(missing)}</td></tr>')  # fmt: skip
        for key, change in (changes.get(dimension) or {}).items():
            if key not in entries:
                rows.append(f'<tr><td class="key">{_esc(key)}</td><td></td><td></td><td class="num">'
                            f"{_change_html(change)}</td><td></td></tr>")  # fmt: skip
        header = (f'<table class="by-{_esc(dimension)}"><tr><th>{_esc(dimension)}</th><th>caught / viable</th>'
                  "<th>score</th><th>since last</th><th>not caught</th></tr>")  # fmt: skip
        tables.append(header + "".join(rows) + "</table>")
    return '<div class="scores">' + "".join(tables) + "</div>"


def _diff_html(text: str) -> str:
    lines = []
    for line in text.splitlines():
        kind = ("hunk" if line.startswith("@@") else "" if line.startswith(("+++", "---")) else "add"
                if line.startswith("+") else "del" if line.startswith("-") else "")  # fmt: skip
        lines.append(f'<span class="{kind}">{_esc(line)}</span>' if kind else _esc(line))
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def _survivors_html(document: dict[str, Any]) -> str:
    """Each mutant not caught: where it is, how far its campaign went and what of its transition it
    reached (its exposure), and its patch as a unified diff."""
    found = breakdown.survivors(scored(document))
    if not found:
        return "<p>None: every viable mutant was caught.</p>"
    parts = []
    for record in found:
        reached = record.get("exposure") or {}
        missing = breakdown.unreached(record)
        reused = f" &middot; reused from {_esc(record['reused_from'])}" if record.get("reused_from") else ""
        labels = ", ".join(f"{_esc(k)} ({v})" for k, v in reached.items()) or "none"
        parts.append(
            f'<div class="survivor" id="survivor-{_esc(record["id"])}"><h3>{_esc(record["id"])} &middot; '
            f'{_esc(record["status"])}{reused}</h3>'
            f"<p>{_esc(record.get('executor', ''))}, {_esc(record.get('transition', ''))}, "
            f"{_esc(record.get('defect_class', ''))}; at {_esc(breakdown.where_text(record))}</p>"
            f"<p>exposure: {_esc(record.get('histories', 0))} histories, {_esc(record.get('steps', 0))} steps; "
            f"labels of {_esc(record.get('transition', ''))} reached: {labels}</p>"
            + (f"<p>not reached: {_esc(', '.join(missing))}</p>" if missing else "")
            + (f"<p>{_esc(str(record.get('reason', ''))[:500])}</p>" if record.get("reason") else "")
            + (_diff_html(str(record["diff"])) if record.get("diff") else "<p>(no diff recorded)</p>")
            + "</div>"
        )  # fmt: skip
    return "".join(parts)


def html_page(document: dict[str, Any]) -> str:
    """The self-contained page (inline CSS, no scripts, no external assets); links are relative."""
    document = upgraded(document)
    budget = document.get("budget", {})
    restarts = "on" if budget.get("restarts", True) else "off (no restarts, no crashes)"
    points = document.get("score") or score(scored(document))
    verdict = str(document.get("verdict"))
    null_text, canary_text = _null_and_canary(document)
    shard = document.get("shard")
    shards = document.get("shards")
    part = document.get("subset")
    passed = document.get("passed", passes(document))
    head = [
        ("verdict", f'<span class="verdict {"ok" if passed else "bad"}">{_esc(verdict)}</span>'),
        ("subset score (caught / viable)" if part else "score (caught / viable)", _score_html(document, points)),
        ("thresholds", _esc(_thresholds_text(document))),
        ("null run", _esc(null_text)),
        ("canary", _esc(canary_text)),
        ("restarts and crashes", _esc(restarts)),
        ("budget", _esc(budget_text(budget))),
        ("statuses", _esc(", ".join(f"{k} {v}" for k, v in sorted(document.get("summary", {}).items())))),
        ("wall time", _esc(f"{document.get('wall_s', 0)} s with {document.get('jobs', 1)} jobs")),
    ]
    if part:
        left_out = "".join(f"<code>{_esc(i)}</code>" for i in part.get("left_out", []))
        head.insert(1, ("subset", f'<span class="subset">{_esc(subset_text(part))}</span>'
                        f'<details class="left-out"><summary>left out: {len(part.get("left_out", []))} mutants'
                        f"</summary>{left_out}</details>"))  # fmt: skip
    if document.get("since"):
        head.insert(3, ("since the last run", _since_html(document)))
    reused = sum(1 for r in scored(document) if r.get("reused_from"))
    if document.get("incremental") or reused:
        head.append(("incremental", _esc(f"{reused} of {len(scored(document))} mutants reused (nothing they depend "
                                         "on changed since their recorded outcome), the rest scored")))  # fmt: skip
    if shard:
        head.append(("shard", _esc(f"{shard['index']}/{shard['count']}")))
    if shards:
        head.append(("merged from", _esc(", ".join(shards))))
    rows = []
    for record in document["outcomes"]:
        status = record["status"]
        caught = status == CAUGHT
        shown, shown_class = status, status
        if record["id"] == NULL_RUN:  # for the null run, no divergence is the pass
            shown, shown_class = (CLEAN, CAUGHT) if status == CLEAN else (f"FAILED ({status})", MISSED)
        elif caught and record.get("caught_by"):  # which voters: a shared mutant's is never the pair
            shown = f"caught ({record['caught_by']})"
        if record.get("reused_from"):
            shown += " reused"
        link = ""
        if caught and record.get("artifact"):
            target = f"{record['artifact'].rstrip('/')}/report.txt"
            link = f'<a href="{_esc(target)}">report.txt</a>'
        minimal = record.get("minimal_steps")
        reason = str(record.get("reason", ""))
        if record.get("triage"):  # a generated mutant's reviewed triage (mutants/triage.toml)
            reason = f"triage: {record['triage']}" + (f"; {reason}" if reason else "")
        cells = [
            f"<td>{_esc(record['id'])}</td>", f"<td>{_esc(record['executor'])}</td>",
            f"<td>{_esc(record.get('transition', ''))}</td>", f"<td>{_esc(record.get('defect_class', ''))}</td>",
            f"<td>{_esc(', '.join(record.get('needs', [])))}</td>",
            f"<td>{'on' if record.get('restarts', True) else 'off'}</td>",
            f'<td class="{_esc(shown_class)}">{_esc(shown)}</td>',
            f'<td class="num">{float(record.get("campaign_s", 0.0)):.1f}</td>' if caught else "<td></td>",
            f'<td class="num">{record.get("histories", 0)}</td>' if caught else "<td></td>",
            f'<td class="num">{record.get("steps", 0)}</td>' if caught else "<td></td>",
            f'<td class="num">{"" if minimal is None else minimal}</td>',
            f"<td>{link}</td>", f'<td class="reason" title="{_esc(reason)}">{_esc(reason[:120])}</td>',
        ]  # fmt: skip
        rows.append("<tr>" + "".join(cells) + "</tr>")
    headers = ["id", "executor", "transition", "class", "needs", "restarts", "outcome", "time to kill (s)",
               "histories to kill", "steps to kill", "minimal steps", "killing history", "reason"]  # fmt: skip
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        "<title>difftest mutation report</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
        "<h1>difftest mutation report</h1>",
        "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in head) + "</dl>",
        "<h2>Outcomes</h2>", _score_bar(scored(document)),
        "<h2>Scores by transition, source file and defect class</h2>",
        "<p>A mutant counts under each transition it names and each file its patches change; the change is "
        "since the last run of the same scope and budget in the score history.</p>",
        _scores_html(document),
        "<h2>Not caught</h2>", _survivors_html(document),
        "<h2>Histories to kill</h2>",
        f"<p>Log scale; the dashed line is the budget ({_esc(budget.get('examples', ''))} histories). "
        "A mutant that was not caught reaches the line in its outcome's colour.</p>",
        _kill_chart(scored(document), int(budget.get("examples") or 1000)),
        "<h2>Mutants</h2>",
        "<p>The null run (unmodified executors) must find nothing; the canary must be caught; neither counts "
        "in the score. Time to kill is the campaign's wall time including shrinking.</p>",
        "<table>", "<tr>" + "".join(f"<th>{_esc(h)}</th>" for h in headers) + "</tr>", *rows, "</table>",
        "</body>", "</html>", "",
    ])  # fmt: skip


# ---- writing, reading, merging ---------------------------------------------------------------------------


def write_outcomes(directory: Path, document: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / OUTCOMES, json.dumps(summarise(document), indent=2) + "\n")


def write_all(directory: Path, document: dict[str, Any], catalogue: list[Mutant] | None = None) -> None:
    """outcomes.json, mutation-report.json, junit.xml and report.html under `directory`."""
    write_outcomes(directory, document)
    write_atomically(directory / STRYKER, json.dumps(stryker(document, catalogue), indent=2) + "\n")
    write_atomically(directory / JUNIT, junit(document))
    write_atomically(directory / HTML, html_page(document))


class MergeProblem(ValueError):
    """Shards that cannot be merged: different budgets, a mutant in two shards, a missing file."""


def merge(out: Path, shard_dirs: list[Path]) -> dict[str, Any]:
    """One document from the shards' outcomes (artifact paths made relative to `out`): the null run
    and canary of the first shard (each shard ran its own; any void shard voids the merge), every
    mutant once, in catalogue order. The verdict is "incomplete" when shards of the split are missing."""
    documents = []
    for directory in shard_dirs:
        path = directory / OUTCOMES
        if not path.is_file():
            raise MergeProblem(f"no {OUTCOMES} in {directory}")
        documents.append((directory, upgraded(json.loads(path.read_text()))))
    budgets = {json.dumps(d.get("budget"), sort_keys=True) for _, d in documents}
    if len(budgets) != 1:
        raise MergeProblem("the shards ran with different budgets: " + "; ".join(sorted(budgets)))
    order = {m.id: i for i, m in enumerate(load())}
    records: dict[str, dict[str, Any]] = {}
    owner: dict[str, Path] = {}
    void = False
    for directory, document in documents:
        void = void or document.get("verdict") == VOID
        for record in document["outcomes"]:
            record = dict(record)
            if record.get("artifact"):
                record["artifact"] = os.path.relpath((directory / record["artifact"]).resolve(), out.resolve())
            rid = record["id"]
            if rid == NULL_RUN or is_canary(record):
                if rid in records and records[rid]["status"] != record["status"]:
                    void = True  # the shards disagree on the self-checks
                records.setdefault(rid, record)
                continue
            if rid in owner:
                raise MergeProblem(f"{rid} is in two shards: {owner[rid]} and {directory}")
            owner[rid] = directory
            records[rid] = record
    outcomes = sorted(records.values(), key=lambda r: (r["id"] != NULL_RUN, not is_canary(r),
                                                       order.get(r["id"], len(order)), r["id"]))  # fmt: skip
    split = {(d.get("shard") or {}).get("count") for _, d in documents}
    indices = sorted((d.get("shard") or {}).get("index", 0) for _, d in documents)
    # complete: unsharded runs only, or every shard k/n of one split n, each once
    complete = split == {None} or (len(split) == 1 and indices == list(range(1, int(next(iter(split)) or 0) + 1)))
    finished = all(d.get("verdict") not in (RUNNING, INTERRUPTED) for _, d in documents)
    merged: dict[str, Any] = {
        "verdict": "", "budget": documents[0][1].get("budget"),
        "wall_s": max(float(d.get("wall_s", 0.0)) for _, d in documents),
        "jobs": sum(int(d.get("jobs", 1)) for _, d in documents), "shard": None,
        "shards": [str(d) for d, _ in documents],
        "chosen": sorted({i for _, d in documents for i in d.get("chosen", [])}, key=lambda i: order.get(i, 0)),
        "thresholds": documents[0][1].get("thresholds") or DEFAULT_THRESHOLDS.as_json(),
        "outcomes": outcomes,
    }  # fmt: skip
    # a subset when, all shards together, mutants of the shards' catalogue were left out (an --only
    # run's, or those of a shard not given)
    universe = {i for _, d in documents for i in [*d.get("chosen", []), *((d.get("subset") or {}).get("left_out", []))]}
    only = sorted({i for _, d in documents for i in (d.get("subset") or {}).get("only") or []})
    in_diff = next(((d.get("subset") or {}).get("in_diff") for _, d in documents if d.get("subset")), None)
    merged["subset"] = subset(sorted(universe, key=lambda i: (order.get(i, len(order)), i)), merged["chosen"],
                              only or None, None, in_diff)  # fmt: skip
    summarise(merged)
    if void:
        merged["verdict"] = VOID
    elif not (complete and finished):
        merged["verdict"] = INCOMPLETE
    else:
        merged["verdict"] = ALL_CAUGHT if all(accepted(r) for r in scored(merged)) else SOME_NOT_CAUGHT
    merged["passed"] = passes(merged)
    return merged
