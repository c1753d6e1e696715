"""The fuzzing service's live dashboard: one page on a local port that reads the shared store every few seconds.

`GET /` is a self-contained page (no file or script from elsewhere); `GET /api/snapshot` is the
store's snapshot as JSON (the same figures `difftest fuzz status` prints). The page draws
throughput over time, the behaviour labels, native counters and Lua lines reached over time, every
finding with its minimal history and reproduce line, and every worker with what it does now, and
fetches the snapshot again every REFRESH_MS. It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from difftest.fuzz.records import SeriesPoint, Snapshot
from difftest.fuzz.store import STALE_S, Store
from difftest.fuzz.worker import local_artifact, reproduce_line

REFRESH_MS = 2000
MAX_POINTS = 720  # the series sent to the page at most (and printed nowhere else)
RECENT_S = 600.0  # stopped workers heard within this long are listed (older ones only counted)


def status_document(store: Store, reports: Path | None = None) -> Snapshot:
    """The snapshot with what a person reads off it: each finding's reproduce line on this machine,
    each worker's liveness, throughput per minute."""
    snapshot = store.snapshot()
    now = snapshot["at"]
    for finding in snapshot["findings"]:
        if reports is not None and "history" in finding:
            try:
                artifact = local_artifact(reports, finding)
            except OSError:
                artifact = Path(str(finding.get("artifact", "")))
            finding["local_artifact"] = str(artifact)
            finding["reproduce_here"] = reproduce_line(finding, artifact)
    for record in snapshot["workers"].values():
        age = now - float(record.get("beat", 0))
        record["age_s"] = round(age, 1)
        record["alive"] = record.get("state") != "stopped" and age < STALE_S
    series = snapshot["series"]
    recent = [p for p in series if p["t"] >= now - 60.0]
    if len(recent) >= 2 and recent[-1]["t"] > recent[0]["t"]:
        span = recent[-1]["t"] - recent[0]["t"]
        snapshot["histories_per_min"] = round(60.0 * (recent[-1]["histories"] - recent[0]["histories"]) / span, 1)
    else:
        snapshot["histories_per_min"] = 0.0
    snapshot["series"] = thinned(series, MAX_POINTS)
    return snapshot


def thinned(points: list[SeriesPoint], most: int) -> list[SeriesPoint]:
    """At most `most` points, evenly spaced over the series, its first and last kept (a day's series
    of a few services is tens of thousands of points; a chart 720 pixels wide shows fewer)."""
    if len(points) <= most:
        return points
    step = (len(points) - 1) / (most - 1)
    return [points[round(i * step)] for i in range(most)]


class _Handler(BaseHTTPRequestHandler):
    server: _DashboardServer

    def do_GET(self) -> None:
        if self.path in ("/", "/index.html"):
            page = PAGE.replace("REFRESH_MS", str(REFRESH_MS)).replace("RECENT_S", str(int(RECENT_S)))
            self._send(200, "text/html; charset=utf-8", page.encode())
        elif self.path.startswith("/api/snapshot"):
            with self.server.lock:
                document = self.server.snapshot()
            self._send(200, "application/json", json.dumps(document).encode())
        else:
            self._send(404, "text/plain", b"not found\n")

    def _send(self, code: int, kind: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # Any: BaseHTTPRequestHandler's own signature
        pass  # quiet: the service's own lines are what the terminal shows


class _DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, store: Store, reports: Path | None) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.store = store
        self.reports = reports
        self.lock = threading.Lock()
        self.away_since: float | None = None

    def snapshot(self) -> Snapshot | dict[str, object]:
        """The status document, or while the store does not answer, what the page says instead (its
        figures stay those it last showed)."""
        from redis.exceptions import RedisError

        try:
            document = status_document(self.store, self.reports)
        except (RedisError, OSError) as problem:
            self.away_since = self.away_since or time.time()
            detail = str(problem).splitlines()[0] if str(problem) else type(problem).__name__
            since = time.strftime("%H:%M:%S", time.localtime(self.away_since))
            return {"away": f"the store {self.store.spec_shown} is away since {since} ({detail}): the workers go on "
                            "fuzzing and keep what they must record until it is back", "at": time.time()}  # fmt: skip
        self.away_since = None
        return document


def start_dashboard(database: str, port: int, reports: Path | None = None) -> _DashboardServer:
    """The dashboard served from a thread of this process (port 0: a free one); `.shutdown()` stops it."""
    server = _DashboardServer(port, Store(database), reports)
    threading.Thread(target=server.serve_forever, name="difftest-fuzz-dashboard", daemon=True).start()
    return server


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>difftest fuzz</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:18px 0 6px}
.figures{display:flex;gap:18px;flex-wrap:wrap}
.figure{background:#f3f6fa;border-radius:6px;padding:6px 12px;min-width:110px}
.figure b{display:block;font-size:20px}
table{border-collapse:collapse} td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
.num{text-align:right} .note{color:#666} .dead{color:#999}
pre{background:#f6f6f6;padding:6px;max-height:220px;overflow:auto;margin:4px 0}
code{background:#f0f0f0;padding:1px 3px}
.finding{border-left:4px solid #c62828;padding:4px 10px;margin:8px 0;background:#fff6f6}
svg{background:#fafafa;border:1px solid #eee}
.chart{display:inline-block;margin-right:12px}
.away{border-left:4px solid #ef6c00;background:#fff4e5;padding:6px 10px;margin:8px 0}
</style></head>
<body>
<h1>difftest fuzz</h1>
<div class="note" id="meta">loading…</div>
<div class="away" id="away" style="display:none"></div>
<div class="figures" id="figures"></div>
<h2>Throughput (histories per minute)</h2><div id="throughput"></div>
<h2>Reached over time</h2><div id="reached"></div>
<h2>Findings</h2><div id="findings"></div>
<h2>Workers</h2><div id="workers"></div>
<script>
"use strict";
let updates = 0;
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
const fmt = (n) => Number(n).toLocaleString("en-US");
function chart(points, name, colour, pick, width, height) {
  // one series on its own axes: its value at the left edge's top, the run's first and last time below
  if (points.length < 2) return '<p class="note">(not enough points yet)</p>';
  const t0 = points[0].t, t1 = Math.max(points[points.length - 1].t, t0 + 1);
  const values = points.map(pick);
  const top = Math.max(1, ...values);
  const path = points.map((p, i) => {
    const x = 60 + (width - 70) * (p.t - t0) / (t1 - t0);
    const y = height - 20 - (height - 30) * values[i] / top;
    return `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
  }).join(" ");
  const clock = (t) => new Date(t * 1000).toISOString().slice(11, 19);
  return `<div class="chart"><svg width="${width}" height="${height}" role="img" aria-label="${esc(name)}">
    <line x1="60" y1="10" x2="60" y2="${height - 20}" stroke="#bbb"/>
    <line x1="60" y1="${height - 20}" x2="${width - 10}" y2="${height - 20}" stroke="#bbb"/>
    <text x="55" y="16" font-size="11" text-anchor="end">${fmt(Math.round(top))}</text>
    <text x="55" y="${height - 20}" font-size="11" text-anchor="end">0</text>
    <text x="60" y="${height - 4}" font-size="11">${clock(t0)}</text>
    <text x="${width - 10}" y="${height - 4}" font-size="11" text-anchor="end">${clock(t1)} UTC</text>
    <path d="${path}" fill="none" stroke="${colour}" stroke-width="2"/></svg>
    <div class="note"><span style="color:${colour}">■</span> ${esc(name)}:
    now ${fmt(Math.round(values[values.length - 1]))}</div></div>`;
}
function rates(points) {
  const out = [];
  for (let i = 1; i < points.length; i++) {
    const dt = points[i].t - points[i - 1].t;
    if (dt > 0) out.push({t: points[i].t, rate: 60 * Math.max(0, points[i].histories - points[i - 1].histories) / dt});
  }
  return out;
}
function render(s) {
  updates += 1;
  const away = document.getElementById("away");
  away.textContent = s.away ? `${s.away}; the figures below are the last it gave` : "";
  away.style.display = s.away ? "block" : "none";
  if (s.away) return;
  const totals = s.totals || {}, cov = s.coverage || {};
  const live = Object.values(s.workers).filter((w) => w.alive).length;
  document.getElementById("meta").textContent =
    `${s.format}; database ${s.database}; updated ${new Date(s.at * 1000).toISOString()}; updates: ${updates}`;
  const native = cov.native_total ? `${fmt(cov.native)} of ${fmt(cov.native_total)}` : cov.native;
  const figures = [["histories", totals.histories || 0], ["steps", totals.steps || 0],
    ["histories/min", s.histories_per_min], ["findings", s.findings.length], ["met again", totals.met_again || 0],
    ["accepted met", totals.met_known || 0],
    ["labels", Object.keys(cov.labels || {}).length], ["native counters", native],
    ["Lua lines", cov.lua], ["corpus", s.corpus], ["pending", s.pending], ["live workers", live]];
  document.getElementById("figures").innerHTML = figures.map(([k, v]) =>
    `<div class="figure"><b data-figure="${esc(k)}">${typeof v === "string" ? esc(v) : fmt(v)}</b>${esc(k)}</div>`)
    .join("");
  document.getElementById("throughput").innerHTML = chart(rates(s.series), "histories/min", "#1f66c1",
    (p) => p.rate, 720, 140);
  document.getElementById("reached").innerHTML = [["behaviour labels", "#2e7d32", (p) => p.labels],
    ["native counters", "#1f66c1", (p) => p.native], ["Lua lines", "#00897b", (p) => p.lua]]
    .map(([name, colour, pick]) => chart(s.series, name, colour, pick, 360, 130)).join("");
  document.getElementById("findings").innerHTML = s.findings.length ? s.findings.map((f) => `<div class="finding">
    <b>${esc(f.signature)}</b> ${esc(f.described || "")}<br>${esc(f.reason || "")}<br>
    <span class="note">found ${f.found_at ? new Date(f.found_at * 1000).toISOString() : "?"}
    by ${esc(f.found_by || "?")};
    met ${fmt(f.seen || 1)} time(s); minimal history: ${fmt(f.steps || 0)} step(s)</span><br>
    reproduce: <code>${esc(f.reproduce_here || f.reproduce || "(being recorded)")}</code>
    <details><summary>minimal history</summary><pre>${esc(f.history || "")}</pre></details></div>`).join("")
    : '<p class="note">none yet</p>';
  // the live workers and those heard in the last RECENT_S; older stopped ones are counted only
  const shown = Object.entries(s.workers).filter(([, w]) => w.alive || w.age_s < RECENT_S);
  const older = Object.keys(s.workers).length - shown.length;
  const rows = shown.map(([id, w]) => `<tr class="${w.alive ? "" : "dead"}"><td>${esc(id)}</td>
    <td>${esc(w.alive ? w.state : (w.state === "stopped" ? "stopped" : "gone"))}</td>
    <td class="num">${fmt(w.histories)}</td>
    <td class="num">${fmt(w.steps)}</td><td class="num">${fmt(w.findings)}</td><td class="num">${fmt(w.met_again)}</td>
    <td class="num">${w.age_s} s</td></tr>`).join("");
  document.getElementById("workers").innerHTML = `<table><tr><th>worker</th><th>doing</th><th>histories</th>
    <th>steps</th><th>findings</th><th>met again</th><th>last heard</th></tr>${rows}</table>` +
    (older ? `<p class="note">and ${fmt(older)} worker(s) stopped more than ${RECENT_S / 60} minutes ago</p>` : "");
}
async function refresh() {
  try {
    const reply = await fetch("/api/snapshot", {cache: "no-store"});
    if (reply.ok) render(await reply.json());
  } catch (e) {
    document.getElementById("meta").textContent = `the service does not answer (${e}); trying again`;
  }
  setTimeout(refresh, REFRESH_MS);
}
refresh();
</script></body></html>
"""
