"""The self-contained HTML page of an outcomes document (inline CSS and SVG, no scripts)."""

from __future__ import annotations

import html
import math

from mutants import breakdown
from mutants.records import Change, Document, Record, Score, Subset
from mutants.report_document import (
    CLEAN,
    NULL_RUN,
    Thresholds,
    budget_text,
    is_canary,
    is_clean,
    passes,
    score,
    scored,
    subset_text,
    upgraded,
)
from mutants.score import CAUGHT, ERROR, MISSED, TIMEOUT, UNVIABLE

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


def _null_and_canary(document: Document) -> tuple[str, str]:
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


def _score_bar(records: list[Record]) -> str:
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


def _kill_chart(records: list[Record], budget: int) -> str:
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


def _score_html(document: Document, points: Score) -> str:
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


def _thresholds_text(document: Document) -> str:
    thresholds = Thresholds.from_json(document.get("thresholds"))
    text = f"high {thresholds.high:g} %, low {thresholds.low:g} %, "
    if thresholds.breaking is None:
        text += "break none (the run passes only when every mutant is caught)"
    else:
        text += f"break {thresholds.breaking:g} % (a score below it fails the run, exit 1)"
    return text + f": {'passed' if document.get('passed', passes(document)) else 'FAILED'}"


def _change_html(change: Change | None) -> str:
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


def _since_html(document: Document) -> str:
    delta = document.get("since")
    if not delta:
        return ""
    last = delta.get("last")
    if last is None:
        return _esc(f"the first run of this scope and budget in {delta.get('history')}")
    score_change = delta.get("score")
    before = score_change.get("before") if score_change else None
    now = score_change.get("now") if score_change else None
    breaking = (last.get("thresholds") or {}).get("break")
    return (f"score {_esc(breakdown.percent_text(before))} &rarr; "
            f"{_esc(breakdown.percent_text(now))} ({_change_html(score_change) or 'n/a'}) since "
            f"{_esc(last.get('at'))} ({_esc(last.get('report'))}, commit {_esc(str(last.get('commit') or '?')[:12])}: "
            f"{'passed' if last.get('passed') else 'FAILED'}, break "
            f"{'none' if breaking is None else _esc(f'{breaking:g} %')})")  # fmt: skip


def _scores_html(document: Document) -> str:
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


def _survivors_html(document: Document) -> str:
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


def _head(document: Document) -> list[tuple[str, str]]:
    """The page's heading list (name, HTML): verdict, score, thresholds, the self-checks, the budget, and
    what the run was (a subset, incremental, a shard, a merge)."""
    budget = document.get("budget") or {}
    restarts = "on" if budget.get("restarts", True) else "off (no restarts, no crashes)"
    points = document.get("score") or score(scored(document))
    null_text, canary_text = _null_and_canary(document)
    part = document.get("subset")
    passed = document.get("passed", passes(document))
    head = [
        ("verdict", f'<span class="verdict {"ok" if passed else "bad"}">{_esc(str(document.get("verdict")))}</span>'),
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
        head.insert(1, ("subset", _subset_html(part)))
    if document.get("since"):
        head.insert(3, ("since the last run", _since_html(document)))
    return head + _provenance(document)


def _subset_html(part: Subset) -> str:
    """The subset line, with the left-out ids folded beneath it."""
    left_out = "".join(f"<code>{_esc(i)}</code>" for i in part.get("left_out", []))
    return (f'<span class="subset">{_esc(subset_text(part))}</span>'
            f'<details class="left-out"><summary>left out: {len(part.get("left_out", []))} mutants'
            f"</summary>{left_out}</details>")  # fmt: skip


def _provenance(document: Document) -> list[tuple[str, str]]:
    """The heading's last rows: how many mutants were reused, the shard, the shards merged."""
    rows = []
    reused = sum(1 for r in scored(document) if r.get("reused_from"))
    if document.get("incremental") or reused:
        rows.append(("incremental", _esc(f"{reused} of {len(scored(document))} mutants reused (nothing they depend "
                                         "on changed since their recorded outcome), the rest scored")))  # fmt: skip
    shard = document.get("shard")
    if shard:
        rows.append(("shard", _esc(f"{shard['index']}/{shard['count']}")))
    shards = document.get("shards")
    if shards:
        rows.append(("merged from", _esc(", ".join(shards))))
    return rows


_HEADERS = ["id", "executor", "transition", "class", "needs", "restarts", "outcome", "time to kill (s)",
            "histories to kill", "steps to kill", "minimal steps", "killing history", "reason"]  # fmt: skip


def _shown(record: Record) -> tuple[str, str]:
    """The outcome cell's text and class: for the null run, no divergence is the pass."""
    status = record["status"]
    shown, shown_class = status, status
    if record["id"] == NULL_RUN:
        shown, shown_class = (CLEAN, CAUGHT) if status == CLEAN else (f"FAILED ({status})", MISSED)
    elif status == CAUGHT and record.get("caught_by"):  # which voters: a shared mutant's is never the pair
        shown = f"caught ({record['caught_by']})"
    if record.get("reused_from"):
        shown += " reused"
    return shown, shown_class


def _outcome_row(record: Record) -> str:
    """One record's row of the Mutants table."""
    caught = record["status"] == CAUGHT
    shown, shown_class = _shown(record)
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
    return "<tr>" + "".join(cells) + "</tr>"


def html_page(document: Document) -> str:
    """The self-contained page (inline CSS, no scripts, no external assets); links are relative."""
    document = upgraded(document)
    budget = document.get("budget") or {}
    rows = [_outcome_row(record) for record in document["outcomes"]]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        "<title>difftest mutation report</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
        "<h1>difftest mutation report</h1>",
        "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in _head(document)) + "</dl>",
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
        "<table>", "<tr>" + "".join(f"<th>{_esc(h)}</th>" for h in _HEADERS) + "</tr>", *rows, "</table>",
        "</body>", "</html>", "",
    ])  # fmt: skip
