"""A campaign's report.html: one self-contained page (inline CSS and SVG) rendered from summary.json.

Pure functions from plain data to text: no file is read or written here (reports.py and the
command line do that), so the same summary always renders the same page.
"""

from __future__ import annotations

import html
import math
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass

from difftest.findings.entries import Divergence, Nights
from difftest.judge.contract import TABLE_ORDER
from difftest.report.document import BatchEntry, Budget, ModelShare, Summary, build_fields

# the verdicts a summary can carry, and how the page shows each (class, headline)
VERDICTS = {
    "agree": ("ok", "the two executors agree under the parity contract"),
    "divergence": ("bad", "DIVERGENCE: the executors differ outside the contract"),
    "known": ("warn", "known: the only findings met are accepted in the known-findings file"),
    "interrupted": ("warn", "interrupted: the campaign did not finish"),
    "void": ("warn", "void: no history was compared, so nothing was tested (the budget ended first)"),
}

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em;
       color: #1d1d1f; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
.verdict { font-size: 1.25em; font-weight: 700; padding: .5em .8em; border-radius: .3em; display: inline-block; }
.ok { background: #dcf2dc; color: #14561a; } .bad { background: #fbd9d9; color: #9b1111; }
.warn { background: #fdecc8; color: #7a4b00; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: .15em 1.2em; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #d0d0d0; padding: .2em .55em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.missing td { background: #fbe3e3; } pre { background: #f6f6f6; padding: .6em .8em; overflow-x: auto; }
figure { margin: 1em 0; } figcaption { color: #555; font-size: .92em; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
.note { color: #555; }
details { margin: .6em 0; } summary { cursor: pointer; font-weight: 600; }
td.detail { background: #fafafa; } td.detail dl.facts { margin: .3em 0; }
td.detail code, td.keys { font: 12px/1.35 ui-monospace, monospace; word-break: break-all; }
tr.differ td { background: #fff4f4; } p.stopped { color: #555; background: #eef0f3; padding: .4em .7em; }
tr.stopped td { background: #f0f0f0; } span.bar { display: inline-block; height: .8em; }
td.bar { width: 230px; white-space: nowrap; }
"""

# chart colours: ordinary bars and lines, unreached labels, contract rows
BLUE, RED, GREY, TEAL = "#1f66c1", "#c62828", "#9e9e9e", "#00897b"
# how a bar chart marks a label not reached: as missing (the campaign ran its budget and the
# generator did not reach it), or in a neutral grey (the run stopped first: nothing follows from it)
MISSING, STOPPED = "missing", "stopped"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


# ---- charts ------------------------------------------------------------------------------------------


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `top` (1, 2 or 5 times a power of ten apart)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    ticks = [0.0]
    while ticks[-1] < top:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _number(value: float) -> str:
    # round ticks stay apart (0.05, 0.1, 0.15, not 0.1 three times)
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:.3g}"


@dataclass(frozen=True)
class _Plot:
    """A line chart's plotting area inside its SVG, and its axes' top values: where a point is drawn."""

    left: int  # px, as the SVG's attributes print them
    top: int
    width: int
    height: int
    x_max: float
    y_max: float

    def sx(self, x: float) -> float:
        return self.left + self.width * x / self.x_max

    def sy(self, y: float) -> float:
        return self.top + self.height * (1 - y / self.y_max)


def line_chart(
    points: Sequence[tuple[float, float]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    reference: float | None = None,
    reference_label: str = "",
    width: int = 720,
    height: int = 260,
) -> str:
    """An SVG line chart of (x, y) points from x = 0, with an optional dashed horizontal reference."""
    left, right, top, bottom = 64, 16, 14, 44
    if not points:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="60" '
                f'aria-label="{esc(title)}"><title>{esc(title)}</title>'
                '<text x="8" y="30">no time series recorded for this run</text></svg>')  # fmt: skip
    x_ticks = nice_ticks(max(x for x, _ in points))
    y_ticks = nice_ticks(max([y for _, y in points] + ([reference] if reference else [])))
    plot = _Plot(left, top, width - left - right, height - top - bottom, x_ticks[-1], y_ticks[-1])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" aria-label="{esc(title)}"><title>{esc(title)}</title>']  # fmt: skip
    parts += _axes(plot, x_ticks, y_ticks, x_label, y_label, height)
    if reference is not None:
        parts += _reference_line(plot, reference, reference_label)
    parts += _series(plot, points)
    parts.append("</svg>")
    return "".join(parts)


def _axes(plot: _Plot, x_ticks: list[float], y_ticks: list[float], x_label: str, y_label: str,
          height: int) -> list[str]:  # fmt: skip
    """The grid lines and tick values, both axes and their labels."""
    left, top, right, bottom = plot.left, plot.top, plot.left + plot.width, plot.top + plot.height
    parts = []
    for y in y_ticks:
        parts.append(f'<line x1="{left}" x2="{right}" y1="{plot.sy(y):.1f}" y2="{plot.sy(y):.1f}" stroke="#e4e4e4"/>')
        parts.append(f'<text x="{left - 6}" y="{plot.sy(y) + 4:.1f}" text-anchor="end">{_number(y)}</text>')
    for x in x_ticks:
        parts.append(f'<text x="{plot.sx(x):.1f}" y="{bottom + 16}" text-anchor="middle">{_number(x)}</text>')
    parts.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{bottom}" stroke="#777"/>')
    parts.append(f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#777"/>')
    parts.append(f'<text x="{left + plot.width / 2:.1f}" y="{height - 6}" text-anchor="middle">{esc(x_label)}</text>')
    parts.append(f'<text transform="translate(14 {top + plot.height / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">{esc(y_label)}</text>')  # fmt: skip
    return parts


def _reference_line(plot: _Plot, reference: float, label: str) -> list[str]:
    """The dashed horizontal line at `reference`, labelled at its right end."""
    right, y = plot.left + plot.width, plot.sy(reference)
    line = (f'<line x1="{plot.left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="{TEAL}" stroke-dasharray="6 4" stroke-width="1.5"/>')  # fmt: skip
    return [line, f'<text x="{right - 4}" y="{y - 5:.1f}" text-anchor="end" style="fill:{TEAL}">{esc(label)}</text>']


def _series(plot: _Plot, points: Sequence[tuple[float, float]]) -> list[str]:
    """The points joined by a line, each a dot with its values on hover."""
    path = " ".join(f"{plot.sx(x):.1f},{plot.sy(y):.1f}" for x, y in points)
    parts = [f'<polyline points="{path}" fill="none" stroke="{BLUE}" stroke-width="2"/>']
    for x, y in points:
        parts.append(f'<circle cx="{plot.sx(x):.1f}" cy="{plot.sy(y):.1f}" r="3" fill="{BLUE}"><title>'
                     f"{_number(x)} s: {_number(y)}</title></circle>")  # fmt: skip
    return parts


def bar_chart(rows: Sequence[tuple[str, int, bool]], *, title: str, colour: str = BLUE, width: int = 720,
              unreached: str = MISSING) -> str:  # fmt: skip
    """Horizontal bars, one per (label, count, highlighted) row, on a log scale so that a label
    reached twice still shows next to one reached thousands of times; highlighted rows are red and
    say MISSING, or (unreached=STOPPED) grey and say that the run stopped before them."""
    bar_h, gap, label_w, count_w = 16, 5, 260, 90
    plot_w = width - label_w - count_w
    top = max((count for _, count, _ in rows), default=0)
    height = len(rows) * (bar_h + gap) + gap
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" aria-label="{esc(title)}"><title>{esc(title)}</title>']  # fmt: skip
    for number, (label, count, highlighted) in enumerate(rows):
        y = gap + number * (bar_h + gap)
        length = plot_w * math.log1p(count) / math.log1p(top) if top > 0 and count > 0 else 0.0
        stopped = highlighted and unreached == STOPPED
        fill = (GREY if stopped else RED) if highlighted else colour
        parts.append(f'<text x="{label_w - 8}" y="{y + bar_h - 4}" text-anchor="end">{esc(label)}</text>')
        if highlighted:  # a faint full-width band so a missing label stands out even with no bar
            band = "#f0f0f0" if stopped else "#fbe3e3"
            parts.append(f'<rect x="{label_w}" y="{y}" width="{plot_w}" height="{bar_h}" fill="{band}"/>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{length:.1f}" height="{bar_h}" fill="{fill}">'
                     f"<title>{esc(label)}: {count}</title></rect>")  # fmt: skip
        text, style = f"{count:,}", ""
        if stopped:
            text, style = f"{text}  not reached: the run stopped first", ' style="fill:#666"'
        elif highlighted:
            text, style = f"{text}  MISSING", f' style="fill:{RED};font-weight:700"'
        parts.append(f'<text x="{label_w + length + 6:.1f}" y="{y + bar_h - 4}"{style}>{esc(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


# ---- the page ----------------------------------------------------------------------------------------


SPEED_WINDOWS = 40  # the speed chart's windows over the run ...
MIN_WINDOW_S = 1.0  # ... each at least this long


def batch_spans(summary: Summary) -> list[tuple[float, float, float]]:
    """When each finished batch's steps were compared, as (start s, end s, steps): from the end of
    its worker's previous batch (or the start) to its own end. Without the batches' workers (an
    older summary), from the previous point of the `progress` time series."""
    batches = summary.get("batches") or []
    if batches and all("worker" in b and "finished_s" in b for b in batches):
        count = len(summary.get("shards") or []) or 1  # merged shards: worker w of each shard is its own
        by_worker: dict[tuple[int, int], list[BatchEntry]] = {}
        for entry in batches:
            by_worker.setdefault((int(entry["batch"]) % count, int(entry["worker"])), []).append(entry)
        spans = []
        for entries in by_worker.values():
            last = 0.0
            for entry in sorted(entries, key=lambda e: (float(e["finished_s"]), int(e["batch"]))):
                end = float(entry["finished_s"])
                spans.append((last, end, float(entry["steps"])))
                last = end
        return spans
    spans, last_t, last_steps = [], 0.0, 0.0
    for point in summary.get("progress", []):
        t_s, steps = float(point["t_s"]), float(point["steps"])
        spans.append((last_t, max(t_s, last_t), steps - last_steps))
        last_t, last_steps = max(t_s, last_t), steps
    return spans


def speed_series(summary: Summary) -> tuple[float, list[tuple[float, float]]]:
    """Compared steps/s over fixed windows of wall time, from the start to the last finished batch:
    (the window's length, [(its middle, steps/s)]). Each batch's steps are spread evenly over the
    time its worker spent on it, so batches of several workers finishing close together do not
    draw a spike, whatever the number of workers; the windows' steps add up to the run's."""
    spans = batch_spans(summary)
    duration = max((end for _, end, _ in spans), default=0.0)
    if duration <= 0:
        return 0.0, []
    count = max(1, min(SPEED_WINDOWS, int(duration // MIN_WINDOW_S)))
    width = duration / count
    totals = [0.0] * count
    for start, end, steps in spans:
        if end <= start:  # finished the instant the last one did: all in that window
            totals[min(count - 1, int(end / width))] += steps
            continue
        per_s = steps / (end - start)
        for index in range(min(count - 1, int(start / width)), count):
            low, high = max(start, index * width), min(end, (index + 1) * width)
            if low >= end:
                break
            totals[index] += per_s * max(0.0, high - low)
    return width, [(round((index + 0.5) * width, 3), total / width) for index, total in enumerate(totals)]


def budget_text(budget: Budget) -> str:
    if budget.get("examples") is not None:
        return f"{budget['examples']:,} histories"
    if budget.get("seconds") is not None:
        return f"{budget['seconds']:g} s"
    return "unknown"


def _typed(value: float) -> str:
    """A budget as typed back: 20, not 20.0; 1234567.5, not :g's 1.23457e+06."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def reproduce_command(summary: Summary) -> str:
    """The command line that runs this campaign again: every option that changes the histories (seed,
    budget, shard, restarts, the example database, which replays its stored failures first) or which
    divergence is found first (workers; with --seconds also how many batches finish in time). The
    `difftest run` line printed at the end of a run is this one."""
    budget = summary.get("budget", {})
    # the program as the run found it could be started from where it ran (difftest/replay/build.py)
    program = summary.get("program") or ["difftest"]
    words = [*program, "run", "--seed", str(summary.get("seed"))]
    examples, seconds = budget.get("examples"), budget.get("seconds")
    if examples is not None:
        words += ["--examples", _typed(examples)]
    if seconds is not None:
        words += ["--seconds", _typed(seconds)]
    # a merge stands for the unsharded one-worker run it equals (docs/ci.md, "Sharding a campaign over machines")
    workers = 1 if summary.get("shards") else summary.get("workers")
    if workers:
        words += ["--workers", str(workers)]
    shard = summary.get("shard")
    if shard:
        words += ["--shard", f"{shard['index']}/{shard['count']}"]
    if summary.get("restarts") is False:
        words.append("--no-restarts")
    if summary.get("sizes") is False:
        words.append("--no-production-size")
    if summary.get("stop_at_first") is True and "findings" in summary:  # runs before it stopped at the first
        words.append("--stop-at-first")
    if "known_findings" in summary and not summary.get("known_findings_default"):
        # what it accepts decides which findings are shrunk, and so the histories (a default file is
        # found again from where the line runs, as every printed command runs from where it was printed)
        known = summary["known_findings"]
        words += ["--known-findings", str(known)] if known else ["--no-known-findings"]
    if "database" in summary:  # summaries from before it was recorded say nothing of it
        words += ["--database", str(summary["database"])] if summary["database"] else ["--no-database"]
    if summary.get("module_given") and summary.get("module"):  # the build under test, when not the default
        words += ["--module", str(summary["module"])]
    if summary.get("lua_scripts"):
        words += ["--lua-scripts", str(summary["lua_scripts"])]
    if summary.get("valkey_requested") and summary.get("valkey"):
        words += ["--valkey", str(summary["valkey"])]
    if summary.get("replicas") is not None:  # said either way: the default depends on the backend
        words.append("--replicas" if summary["replicas"] else "--no-replicas")
    return shlex.join(words)


def replay_line(summary: Summary, failure: Divergence) -> str:
    """The replay command of one divergence's artifact: as recorded when the run printed it, else
    rebuilt from the summary's build fields."""
    if failure.get("reproduce"):
        return str(failure["reproduce"])
    from difftest.replay.build import build_flags

    words = [*(summary.get("program") or ["difftest"]), "replay", str(failure.get("artifact", failure.get("link")))]
    words += build_flags(build_fields(summary))
    if summary.get("replicas"):
        words.append("--replicas")
    return shlex.join(words)


def verdict_of(summary: Summary) -> str:
    """The summary's verdict (older summaries have none: derived as the run command decides)."""
    if summary.get("verdict"):
        return str(summary["verdict"])
    if summary.get("interrupted"):
        return "interrupted"
    return "divergence" if summary.get("divergences") else "agree"


def _model_text(share: ModelShare | None) -> str:
    """The share of steps the spec's model judged (summary.json's `model`), in words."""
    if not share or not share.get("steps"):
        return "not recorded" if not share else "no step"
    unjudged = ", ".join(f"{kind} {count:,}" for kind, count in (share.get("unjudged") or {}).items())
    text = f"{share['judged_steps'] / share['steps']:.2%} ({share['judged_steps']:,} of {share['steps']:,} steps)"
    return text + (f"; not predicted: {unjudged}" if unjudged else "")


def _facts(summary: Summary) -> list[tuple[str, str]]:
    shard = summary.get("shard")
    facts = [
        ("seed", esc(summary.get("seed"))),
        ("budget", esc(budget_text(summary.get("budget", {})))),
        ("histories compared", esc(f"{summary.get('histories', 0):,}")),
        ("steps compared", esc(f"{summary.get('steps', 0):,}")),
        ("wall time", esc(f"{summary.get('elapsed_s', 0)} s")),
        ("compared steps/s", esc(f"{summary.get('compared_steps_per_s', 0)}")),
        ("judged by the spec's model", esc(_model_text(summary.get("model")))),
        ("workers", esc(summary.get("workers", 1))),
        ("restarts and crashes", "on" if summary.get("restarts", True) else "off"),
    ]
    if summary.get("sizes") is False:  # on, the default, goes without saying
        facts.append(("production's size", "off (--no-production-size)"))
    if summary.get("replicas") is not None:
        facts.append(("replicas", "on: each server's replica compared with it after every segment"
                      if summary["replicas"] else "off"))  # fmt: skip
    if shard:
        facts.append(("shard", esc(f"{shard['index']}/{shard['count']}")))
    if summary.get("shards"):
        facts.append(("merged from", "<br>".join(esc(s) for s in summary["shards"])))
    facts += [("native module", esc(summary.get("module", ""))),
              ("Lua scripts", esc(summary.get("lua_scripts") or "executors/lua (the reference)")),
              ("Valkey", esc(summary.get("valkey") or "unknown")),
              ("host", esc(summary.get("host", "")))]  # fmt: skip
    return facts


def stopped_early(summary: Summary) -> str | None:
    """Why the run ended before its budget, if it did: then a label it did not reach says nothing of
    whether the generator can reach it (the run stops at the first divergence: docs/usage.md, "What
    `run` does and prints")."""
    return {"divergence": "the run stopped at the first divergence",
            "interrupted": "the run was interrupted",
            "void": "no history was compared"}.get(verdict_of(summary))  # fmt: skip


def _detail(failure: Divergence) -> str:
    """The failing step in brief (summary.json's `detail`, artifacts.brief): its call, both replies and
    the keys that differ with both sides' values. Older summaries have none: report.txt has it all."""
    detail = failure.get("detail")
    link = str(failure.get("link") or failure.get("artifact", ""))
    whole = f'<a href="{esc(link)}/report.txt">report.txt</a>'
    if not isinstance(detail, dict) or not detail:
        return f'<p class="note">The failing step, its replies and keys: see {whole}.</p>'
    replies_differ = detail.get("lua_reply") != detail.get("native_reply")
    facts = [("step", f"{esc(detail.get('step'))} <code>{esc(detail.get('call', ''))}</code>"),
             ("replies", "they differ" if replies_differ else "equal"),
             ("lua reply", f"<code>{esc(detail.get('lua_reply'))}</code>"),
             ("native reply", f"<code>{esc(detail.get('native_reply'))}</code>")]  # fmt: skip
    out = ['<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"]
    events = detail.get("events")
    if isinstance(events, dict):  # an events divergence: each server's notifications at the step, in order
        out += _events_table(events, detail.get("events_fired") or {}, whole)
    replica = detail.get("replica")
    if isinstance(replica, dict):
        out += _keys_table(replica.get("keys", []), int(replica.get("keys_differing", 0)), "primary", "replica",
                           f"keys that differ between the {replica.get('side')} server and its replica",
                           whole)  # fmt: skip
    out += _keys_table(detail.get("keys", []), int(detail.get("keys_differing", 0)), "lua", "native",
                       "keys that differ after the step (lease_epoch set aside)", whole)  # fmt: skip
    spec = detail.get("model")
    if isinstance(spec, dict):  # what the spec's model expected of each side, and where each departs from it
        for side in ("lua", "native"):
            view = spec.get(side) or {}
            expects = esc(view.get("expects", ""))
            out.append(f"<p>the spec's model expects of the {side} side: <code>{expects}</code></p>")
            rows = view.get("keys") or []
            if rows:
                out += _keys_table(rows, len(rows), "spec", side, f"keys where the {side} side departs from the spec",
                                   whole)  # fmt: skip
    return "".join(out)


def _keys_table(rows: list[dict[str, str]], total: int, left: str, right: str, what: str, whole: str) -> list[str]:
    """The keys that differ, each with both sides' values (`total`: how many; report.txt, `whole`, has the rest)."""
    if not total:
        return [f"<p>{esc(what)}: none.</p>"]
    out = [f"<table><caption>{esc(what)} ({total:,})</caption>"
           f"<tr><th>key</th><th>{left}</th><th>{right}</th></tr>"]  # fmt: skip
    for row in rows:
        cells = "".join(f'<td class="keys">{esc(row.get(name))}</td>' for name in ("key", left, right))
        out.append(f'<tr class="differ">{cells}</tr>')
    out.append("</table>")
    if total > len(rows):
        out.append(f'<p class="note">{total - len(rows):,} more: see {whole}.</p>')
    return out


def _events_table(events: dict[str, list[str]], fired: dict[str, int], whole: str) -> list[str]:
    """Each server's keyspace notifications at the step, side by side in order (`fired`: how many each sent)."""
    lua, native = events.get("lua", []), events.get("native", [])
    counts = f"<th>lua ({fired.get('lua', len(lua))})</th><th>native ({fired.get('native', len(native))})</th>"
    out = [f"<table><caption>keyspace events fired at the step</caption><tr><th>#</th>{counts}</tr>"]
    for number in range(max(len(lua), len(native))):
        pair = [side[number] if number < len(side) else "" for side in (lua, native)]
        css = ' class="differ"' if pair[0] != pair[1] else ""
        cells = "".join(f'<td class="keys">{esc(e)}</td>' for e in pair)
        out.append(f'<tr{css}><td class="num">{number + 1}</td>{cells}</tr>')
    out.append("</table>")
    if max(fired.values(), default=0) > max(len(lua), len(native)):
        out.append(f'<p class="note">more: see {whole}.</p>')
    return out


def _divergences(summary: Summary) -> list[str]:
    found = summary.get("divergences", [])
    if not found:
        return ["<p>None: every compared step matched exactly or under a contract row.</p>"]
    out = ["<table><tr><th>batch</th><th>minimal steps</th><th>reason</th><th>artifact</th><th>reproduce</th></tr>"]
    for failure in found:
        link = str(failure.get("link") or failure.get("artifact", ""))
        files = " · ".join(f'<a href="{esc(link)}/{name}">{name}</a>'
                           for name in ("report.txt", "history.jsonl", "report.json"))  # fmt: skip
        out.append(
            f'<tr><td class="num">{esc(failure.get("batch"))}</td><td class="num">{esc(failure.get("steps"))}</td>'
            f"<td>{esc(failure.get('reason', ''))}</td>"
            f'<td><a href="{esc(link)}/">{esc(link)}</a><br>{files}</td>'
            f"<td><code>{esc(replay_line(summary, failure))}</code></td></tr>"
        )
        out.append(f'<tr><td class="detail" colspan="5">{_detail(failure)}</td></tr>')
    out.append("</table>")
    return out


def _findings(summary: Summary) -> list[str]:
    """Every distinct finding (difftest/findings/tally.py): new, expired, known, stale, not met."""
    found = summary.get("findings", [])
    if not found:
        return [] if "findings" not in summary else ["<p>None met.</p>"]
    out = ["<table><tr><th>signature</th><th>status</th><th>met</th><th>first and last meeting</th>"
           "<th>what</th><th>known because</th></tr>"]  # fmt: skip
    history: dict[str, Nights] = summary.get("findings_history") or {}
    for entry in found:
        when = ""
        if entry.get("count"):
            first, last = (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(at)))
                           for at in (entry.get("first_at", 0), entry.get("last_at", 0)))  # fmt: skip
            when = f"{first} (batch {entry.get('first_batch')}) to {last} (batch {entry.get('last_batch')})"
        nights = history.get(entry["signature"])
        if nights:  # a merge that keeps the findings history: across nights too
            since = time.strftime("%Y-%m-%d", time.gmtime(float(nights["first_night"])))
            when += f"; met on {nights['nights']} night(s) since {since}"
        what = entry.get("described") or entry.get("reason", "")
        if entry.get("link"):
            what = f'{esc(what)}<br><a href="{esc(entry["link"])}/">{esc(entry["link"])}</a>'
        else:
            what = esc(what)
        because = ""
        if entry.get("known_reason"):
            because = f"{entry['known_reason']} (accepted by {entry.get('accepted_by')} until {entry.get('expires')})"
        css = "bad" if entry["status"] in ("new", "expired") else "warn" if entry["status"] == "stale" else ""
        out.append(f'<tr><td><code>divergence:{esc(entry["signature"])}</code></td>'
                   f'<td class="{css}">{esc(entry["status"])}</td><td class="num">{esc(entry.get("count", 0))}</td>'
                   f"<td>{esc(when)}</td><td>{what}</td><td>{esc(because)}</td></tr>")  # fmt: skip
    out.append("</table>")
    return out


CONTRACT_BAR_W = 220  # px: the longest bar of the contract table (log scale)


def _contract(summary: Summary) -> list[str]:
    """The contract's rows in its own order (the spec's table, then the project's rows), each with the
    steps it judged as a bar on a log scale: one table, so the page stays short."""
    coverage: dict[str, int] = summary.get("coverage", {})
    stopped = stopped_early(summary)
    rows = [(rule, int(coverage.get(f"contract:{rule.id}", 0))) for rule in TABLE_ORDER]
    top = max((count for _, count in rows), default=0)
    table = ['<table><tr><th>row</th><th colspan="2">steps judged by it (bar: log scale)</th><th>transitions</th>'
             "<th>when</th></tr>"]  # fmt: skip
    for rule, count in rows:
        if count:
            width = CONTRACT_BAR_W * math.log1p(count) / math.log1p(top)
            bar = f'<span class="bar" style="width:{width:.0f}px;background:{TEAL}"></span>'
            css = ""
        elif stopped:  # not hit because the run ended early: nothing follows from it
            bar, css = '<span class="note">not reached: the run stopped first</span>', ' class="stopped"'
        else:
            bar, css = "<strong>never exercised</strong>", ' class="missing"'
        table.append(f'<tr{css}><td>{esc(rule.id)}</td><td class="num">{count:,}</td><td class="bar">{bar}</td>'
                     f"<td>{esc(rule.transitions)}</td><td>{esc(rule.precondition)}</td></tr>")  # fmt: skip
    table.append("</table>")
    unhit = (f"grey: a row not hit before the run ended early ({esc(stopped)}): nothing follows from it"
             if stopped else "red: a row this campaign never exercised")  # fmt: skip
    return [*table, f'<p class="note">Steps whose difference each contract row allowed, in the contract\'s '
            f"order (the spec's rows, then the project's own); {unhit}.</p>"]  # fmt: skip


def _coverage(summary: Summary) -> list[str]:
    coverage: dict[str, int] = summary.get("coverage", {})
    missing = set(summary.get("coverage_missing", [label for label, count in coverage.items() if count == 0]))
    rows = [(label, int(count), label in missing) for label, count in coverage.items()]
    stopped = stopped_early(summary)
    unreached = STOPPED if stopped else MISSING
    reached = f"{len(rows) - len(missing):,} of {len(rows):,} behaviour labels reached"
    out: list[str] = []
    if not missing:
        out.append(f"<p>{reached}.</p>")
    elif stopped:  # the labels were not reached because the run stopped, not because they cannot be
        out.append(f'<p class="stopped">{reached}: {esc(stopped)}, so the other {len(missing):,} were not '
                   "reached for that reason alone; this says nothing of whether the generator reaches them "
                   "(a run to its budget does).</p>")  # fmt: skip
        out.append(f"<details><summary>{len(missing):,} labels not reached before the run stopped</summary>"
                   f"<p>{esc(', '.join(sorted(missing)))}</p></details>")  # fmt: skip
    else:
        out.append(f'<p class="bad">{reached}; <strong>not reached: {esc(", ".join(sorted(missing)))}</strong>.</p>')
    colours = "grey: not reached before the run stopped" if stopped else "red: not reached by this campaign"
    out.append(f"<details><summary>all {len(rows):,} behaviour labels, by count</summary>"
               f"<figure>{bar_chart(rows, title='behaviour coverage', unreached=unreached)}<figcaption>Histories' "
               f"behaviours by label (log scale); {colours}.</figcaption></figure></details>")  # fmt: skip
    also: dict[str, int] = summary.get("also_reached", {})
    if also:
        out.append(f"<details><summary>{len(also):,} more labels reached (outside the required set)</summary><table>"
                   "<tr><th>label</th><th>count</th></tr>"
                   + "".join(f'<tr><td>{esc(k)}</td><td class="num">{v:,}</td></tr>' for k, v in also.items())
                   + "</table></details>")  # fmt: skip
    return out


def _lua_coverage(summary: Summary) -> list[str]:
    """`run --lua-coverage`: the lines of each retired script the histories ran (difftest/coverage/lua.py)."""
    if not summary.get("lua_coverage"):
        return []
    from difftest.coverage.lua import html_section

    return ["<h2>Lua script coverage</h2>", *html_section(summary["lua_coverage"])]


def _native_coverage(summary: Summary) -> list[str]:
    """`run --native-coverage`: the module's own lines, regions and branches reached (difftest/coverage/native.py)."""
    if not summary.get("native_coverage"):
        return []
    from difftest.coverage.native import html_section

    return ["<h2>Native code coverage</h2>", *html_section(summary["native_coverage"])]


def _speed(summary: Summary) -> list[str]:
    width, points = speed_series(summary)
    average = summary.get("compared_steps_per_s")
    chart = line_chart(points, title="compared steps per second over the run", x_label="seconds since the start",
                       y_label="compared steps/s", reference=float(average) if average else None,
                       reference_label=f"whole run: {average} steps/s")  # fmt: skip
    caption = (f"Steps compared per second in windows of {width:.3g} s of wall time, up to the last finished "
               "batch (each batch's steps spread over the time its worker spent on it); dashed: the whole "
               "run's average, start-up and shrinking included.")  # fmt: skip
    if summary.get("shards"):
        caption += " Merged shards are drawn as if they all started at once."
    return [f"<figure>{chart}<figcaption>{caption}</figcaption></figure>"]


def render(summary: Summary) -> str:
    """The whole page for one summary (a run's or a merge's); links are relative to its directory."""
    verdict = verdict_of(summary)
    css_class, headline = VERDICTS.get(verdict, ("warn", verdict))
    missing = summary.get("coverage_missing", [])
    stopped = stopped_early(summary)
    if not missing:
        coverage_line = "complete"
    elif stopped:
        coverage_line = f"{len(missing)} label(s) not reached before the run stopped ({stopped})"
    else:
        coverage_line = f"{len(missing)} label(s) not reached"
    title = f"difftest campaign, seed {summary.get('seed')}: {verdict}"
    reproduce = [str(summary.get("reproduce") or reproduce_command(summary))]
    reproduce += [replay_line(summary, f) for f in summary.get("divergences", [])]
    if summary.get("shards"):
        merge = shlex.join([*(summary.get("program") or ["difftest"]), "merge", "OUT"])
        reproduce.insert(0, f"# each shard again on its machine, then: {merge} SHARD_DIR ...")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{esc(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
        "<h1>difftest campaign report</h1>",
        f'<p class="verdict {css_class}" id="verdict">verdict: {esc(verdict)} — {esc(headline)}</p>',
        f"<p>coverage: {esc(coverage_line)}</p>",
        '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in _facts(summary)) + "</dl>",
        "<h2>How to reproduce</h2>", f"<pre>{esc(chr(10).join(reproduce))}</pre>",
        "<h2>Divergences</h2>", *_divergences(summary),
        *(["<h2>Distinct findings</h2>", *_findings(summary)] if "findings" in summary else []),
        "<h2>Speed</h2>", *_speed(summary),
        "<h2>Contract rows hit</h2>", *_contract(summary),
        "<h2>Behaviour coverage</h2>", *_coverage(summary),
        *_native_coverage(summary),
        *_lua_coverage(summary),
        "<h2>Files</h2>",
        '<p><a href="summary.json">summary.json</a> · <a href="coverage.txt">coverage.txt</a> · '
        '<a href="junit.xml">junit.xml</a></p>',
        "</body>", "</html>", "",
    ])  # fmt: skip
