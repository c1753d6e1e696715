"""Lua script coverage of a campaign, counted: every replayer's counts of the instrumented scripts
(executors/lua/instrument.py) summed into `lua-coverage.json`, merged over shards, and shown as a
report.html section. The counts are of lines, as luacov counts them: a line such as
`if ghost then return {} end` is reached when its condition is evaluated.
"""

from __future__ import annotations

import html
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from difftest.base.files import write_atomically
from executors.lua.instrument import RAW_DIR, countable_lines

JSON_FILE = "lua-coverage.json"
FORMAT = "difftest-lua-coverage"


def _script_dir(lua_scripts: Path | None) -> Path:
    import executors.lua.adapter as adapter

    return lua_scripts or Path(adapter.__file__).parent


def collect(run_dir: Path, lua_scripts: Path | None = None) -> dict[str, Any]:
    """After the campaign: every replayer's counts summed, per script the lines reached of those that
    start a statement, and the text of every line no history reached; lua-coverage.json written."""
    raw = run_dir / RAW_DIR
    counts: Counter[tuple[str, int]] = Counter()
    files = sorted(raw.glob("*.json")) if raw.is_dir() else []
    for path in files:
        for verb, line, count in json.loads(path.read_text()):
            counts[(verb, int(line))] += int(count)
    shutil.rmtree(raw, ignore_errors=True)
    document = report(counts, _script_dir(lua_scripts))
    document["replayers"] = len(files)
    write_atomically(run_dir / JSON_FILE, json.dumps(document, indent=1) + "\n")
    return document


def report(counts: Counter[tuple[str, int]], scripts: Path) -> dict[str, Any]:
    """The document (pure but for reading the scripts' text)."""
    files, unreached = [], []
    reached_all = total_all = 0
    for path in sorted(scripts.glob("*.lua")):
        verb = path.stem
        text = path.read_text()
        lines = text.splitlines()
        countable = countable_lines(text)
        missed = [n for n in countable if counts[(verb, n)] == 0]
        reached = len(countable) - len(missed)
        calls = max((counts[(verb, n)] for n in countable), default=0)  # its first line runs at every call
        files.append({"file": path.name, "transition": verb.upper(),
                      "lines": {"reached": reached, "total": len(countable)}, "calls": calls})  # fmt: skip
        if missed:
            unreached.append({"file": path.name, "transition": verb.upper(),
                              "lines": [[n, lines[n - 1]] for n in missed]})  # fmt: skip
        reached_all += reached
        total_all += len(countable)
    rows = [[verb, line, count] for (verb, line), count in sorted(counts.items())]  # what a merge sums
    return {"format": FORMAT, "version": 1, "scripts": str(scripts), "totals": {"lines": {"reached": reached_all,
            "total": total_all}}, "files": files, "unreached": unreached, "counts": rows}  # fmt: skip


def merge_runs(dirs: list[Path], out: Path) -> dict[str, Any] | None:
    """`difftest merge`: the shards' counts summed into OUT/lua-coverage.json (with the scripts the
    first shard measured, if they are on this machine, else executors/lua); None when no shard
    measured Lua coverage."""
    measured = [json.loads((d / JSON_FILE).read_text()) for d in dirs if (d / JSON_FILE).is_file()]
    if not measured:
        return None
    counts: Counter[tuple[str, int]] = Counter()
    for document in measured:
        for verb, line, count in document.get("counts", []):
            counts[(str(verb), int(line))] += int(count)
    recorded = Path(measured[0].get("scripts", ""))
    merged = report(counts, recorded if recorded.is_dir() else _script_dir(None))
    merged["replayers"] = sum(int(document.get("replayers", 0)) for document in measured)
    if len(measured) < len(dirs):
        merged["note"] = f"{len(measured)} of {len(dirs)} shards measured Lua coverage"
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / JSON_FILE, json.dumps(merged, indent=1) + "\n")
    return merged


# ---- showing it -----------------------------------------------------------------------------------------


def _ratio(pair: dict[str, int]) -> str:
    total = pair["total"]
    return f"{pair['reached']}/{total} ({100.0 * pair['reached'] / total if total else 100.0:.1f}%)"


def summary_line(document: dict[str, Any]) -> str:
    lines = document["totals"]["lines"]
    return (f"Lua script coverage: lines {_ratio(lines)} of {len(document['files'])} scripts; "
            f"{sum(len(g['lines']) for g in document['unreached'])} line(s) no history ran ({JSON_FILE})")  # fmt: skip


def html_section(document: dict[str, Any]) -> list[str]:
    """The report's section (pure): per script the lines reached, then the lines no history ran."""
    esc = html.escape
    out = [f"<p>{esc(summary_line(document))}.</p>",
           '<p class="note">Counted by an instrumented copy of the scripts that logs the lines each call ran '
           "(executors/lua/instrument.py): what the scripts write is unchanged. A line is reached when it "
           "starts to run (a one-line <code>if ... then return ... end</code> when its condition is "
           "evaluated). The Lua host's refusals before sending run no script.</p>",
           "<table><tr><th>script</th><th>transition</th><th>lines</th><th>calls</th></tr>"]  # fmt: skip
    for entry in document["files"]:
        lines = entry["lines"]
        missing = ' class="missing"' if lines["reached"] < lines["total"] else ""
        out.append(f"<tr{missing}><td>{esc(entry['file'])}</td><td>{esc(entry['transition'])}</td>"
                   f'<td class="num">{_ratio(lines)}</td><td class="num">{entry["calls"]:,}</td></tr>')  # fmt: skip
    out.append("</table>")
    for group in document["unreached"]:
        text = "\n".join(f"{number:>4}  {line}" for number, line in group["lines"])
        out.append(f"<details open><summary><code>{esc(group['file'])}</code> <span class=\"note\">"
                   f"({len(group['lines'])} line(s) no history ran)</span></summary>"
                   f"<pre>{esc(text)}</pre></details>")  # fmt: skip
    return out
