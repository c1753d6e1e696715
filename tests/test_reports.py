"""A run's reports: report.html rendered in a real headless browser, junit.xml valid under a JUnit
schema, the time series in summary.json, `difftest report` re-rendering; and the page's pure parts."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from difftest.cli.main import EXIT_DIVERGENCE, EXIT_OK, EXIT_SETUP, main
from difftest.coverage import labels as coverage
from difftest.history import format as hist
from difftest.judge.contract import RULES, TABLE_ORDER
from difftest.judge.events import Event
from difftest.replay.artifacts import BRIEF_CHARS, BRIEF_KEYS, brief
from difftest.replay.replayer import Divergence
from difftest.report import html as html_report
from difftest.spec.snapshot import Entry
from tests.helpers import planted_scripts

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"run": ("servers",), "diverged": ("servers",)}

SEED = 424242
SCHEMA = Path(__file__).with_name("junit.xsd")
WINDOW = (1200, 2000)
# the rendered height of a fixed page (summary_with(): every required label, and a divergence at its
# brief's largest) at WINDOW's width: a default run's page was over 11,000 px (every one of the ~430
# labels a bar) before its long tables were folded. Measured on fixed pages, never on a run's own: the
# run's page grows with what the run happened to reach (a real run's divergence page measured 2,605 px
# once against a bound of 2,600 and passed on a rerun). A real run's page is held to its folds instead:
# folded, at most half its height with every fold open. Measured: the fixed pages 1,958 and 3,007 px
# (every fold open: past 7,800).
MAX_PAGE_PX = 2600
MAX_DIVERGENCE_PAGE_PX = MAX_PAGE_PX + 500


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One small real campaign (40 histories on a real server pair) shared by this module's tests."""
    reports = tmp_path_factory.mktemp("reports")
    argv = [
        "run",
        "--seed",
        str(SEED),
        "--examples",
        "40",
        "--workers",
        "1",
        "--no-database",
        "--reports",
        str(reports),
    ]
    assert main(argv) == EXIT_OK
    (directory,) = reports.iterdir()
    yield directory
    shutil.rmtree(reports)


@pytest.fixture(scope="module")
def diverged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real campaign that stops at a divergence: COMPLETE's script counts two completions (a second
    or so: the first COMPLETE diverges)."""
    reports = tmp_path_factory.mktemp("diverged")
    scripts = planted_scripts(tmp_path_factory.mktemp("planted"), "complete.lua", "'count', 1)", "'count', 2)")
    argv = ["run", "--seed", "5", "--examples", "40", "--workers", "1", "--no-database", "--stop-at-first",
            "--lua-scripts", str(scripts), "--reports", str(reports)]  # fmt: skip
    assert main(argv) == EXIT_DIVERGENCE
    (directory,) = reports.iterdir()
    yield directory
    shutil.rmtree(reports)


def load(directory: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((directory / "summary.json").read_text())
    return document


def test_a_run_writes_its_four_reports(run: Path) -> None:
    assert sorted(p.name for p in run.iterdir() if p.is_file()) == [
        "coverage.txt", "junit.xml", "report.html", "summary.json"]  # fmt: skip
    summary = load(run)
    assert summary["verdict"] == "agree" and summary["seed"] == SEED and summary["shard"] is None


def test_the_summary_holds_the_time_series_and_the_batches(run: Path) -> None:
    summary = load(run)
    progress = summary["progress"]
    assert progress, "no point recorded"
    assert [p["batches"] for p in progress] == list(range(1, len(progress) + 1))
    assert all(a["t_s"] <= b["t_s"] and a["steps"] <= b["steps"] for a, b in pairwise(progress))
    assert (progress[-1]["histories"], progress[-1]["steps"]) == (summary["histories"], summary["steps"]) == (
        sum(b["histories"] for b in summary["batches"]), sum(b["steps"] for b in summary["batches"]))  # fmt: skip
    for label, count in summary["coverage"].items():
        assert count == sum(b["labels"].get(label, 0) for b in summary["batches"]), label


def test_the_page_is_self_contained(run: Path) -> None:
    page = (run / "report.html").read_text()
    assert "<script" not in page.lower() and "<link" not in page.lower() and "@import" not in page
    assert not re.search(r"""\bsrc\s*=|url\(""", page)
    # the only absolute address is SVG's namespace name, which nothing fetches
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}
    hrefs = re.findall(r'href="([^"]+)"', page)
    assert hrefs and all(not h.startswith(("/", "http", "file:")) for h in hrefs)
    assert page.count("<svg") == 2  # speed, coverage (the contract rows' bars are in their table)
    assert "<details" in page  # the long tables are folded, without a script


def test_report_renders_the_same_page_again(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = run / "report.html"
    before = page.read_bytes()
    page.unlink()
    assert main(["report", str(run)]) == EXIT_OK
    assert page.read_bytes() == before
    assert str(page) in capsys.readouterr().out
    empty = Path(tempfile.mkdtemp())
    try:
        assert main(["report", str(empty)]) == EXIT_SETUP
        assert "no summary.json" in capsys.readouterr().err
    finally:
        empty.rmdir()


def test_report_hands_a_mutation_run_to_its_own_page(tmp_path: Path) -> None:
    mutation_report = pytest.importorskip("mutants.report")
    document = {"verdict": "all caught", "budget": {"examples": 10}, "outcomes": [
        {"id": "null-run", "executor": "both", "status": "missed", "histories": 10, "steps": 90}]}  # fmt: skip
    (tmp_path / "outcomes.json").write_text(json.dumps(document))
    assert main(["report", str(tmp_path)]) == EXIT_OK
    page = (tmp_path / "report.html").read_text()
    assert "difftest mutation report" in page and page == mutation_report.html_page(document)
    assert not (tmp_path / "summary.json").exists()


def test_junit_xml_is_valid_junit(run: Path) -> None:
    import xmlschema

    schema = xmlschema.XMLSchema(str(SCHEMA))
    junit = run / "junit.xml"
    schema.validate(str(junit))
    tree = schema.to_dict(str(junit))
    (suite,) = tree["testsuite"]
    summary = load(run)
    names = [case["@name"] for case in suite["testcase"]]
    assert names == [f"batch-{b['batch']}" for b in summary["batches"]] + list(coverage.REQUIRED)
    assert suite["@skipped"] == len(summary["coverage_missing"]) and suite["@failures"] == 0
    # the schema is not a formality: a case without a name does not pass
    assert not schema.is_valid(junit.read_text().replace('name="batch-0" ', ""))


def browser() -> list[str]:
    """Debian's headless shell, or the full chromium in headless mode (scripts/setup.sh installs one)."""
    for name, flags in (("chromium-headless-shell", []), ("chromium", ["--headless"])):
        path = shutil.which(name)
        if path:
            return [path, *flags]
    pytest.fail("no chromium-headless-shell or chromium on PATH: run scripts/setup.sh (it installs it)")


def in_browser(page: Path, *args: str, window: tuple[int, int] = WINDOW) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="difftest-browser-") as profile:
        command = [*browser(), "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
                   f"--window-size={window[0]},{window[1]}", *args, page.resolve().as_uri()]  # fmt: skip
        # HOME too: chromium writes caches there when it can
        env = {**os.environ, "HOME": profile}
        return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, check=False)


@pytest.mark.browser
def test_a_real_browser_renders_the_report(run: Path) -> None:
    from PIL import Image

    summary = load(run)
    page = run / "report.html"
    dom = in_browser(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom.stdout))
    assert "verdict: agree" in text
    assert f"seed {SEED}" in text and str(SEED) in text
    for label in coverage.REQUIRED:  # every coverage label drawn, reached or not
        assert label in text, label
    for rule in RULES:  # every contract row in its table, with its count
        count = summary["coverage"][f"contract:{rule}"]
        assert re.search(rf"\b{rule} {count:,} ", text), rule
    # in the contract's order
    shown = re.findall(r"\b([DN]\d) [\d,]+ ", text)
    assert shown == [rule.id for rule in TABLE_ORDER], shown
    with tempfile.TemporaryDirectory(prefix="difftest-shot-") as shots:
        shot = Path(shots) / "report.png"
        done = in_browser(page, f"--screenshot={shot}")
        assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
        with Image.open(shot) as image:
            assert image.size == WINDOW
            pixels = image.convert("RGB")
            colours = pixels.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 16, "the screenshot is (nearly) blank"
    found = {colour for _, colour in colours}
    assert _rgb("#dcf2dc") in found, "the verdict's green box is not drawn"
    assert _rgb(html_report.BLUE) in found and _rgb(html_report.TEAL) in found, "the charts are not drawn"


def page_height(page: Path) -> int:
    """The rendered page's height in px at WINDOW's width: the last row a tall screenshot is not blank in."""
    from PIL import Image, ImageChops

    with tempfile.TemporaryDirectory(prefix="difftest-shot-") as shots:
        shot = Path(shots) / "tall.png"
        done = in_browser(page, f"--screenshot={shot}", window=(WINDOW[0], 3 * MAX_PAGE_PX))
        assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
        with Image.open(shot) as image:
            drawn = ImageChops.difference(image.convert("RGB"), Image.new("RGB", image.size, "white")).getbbox()
    assert drawn is not None, "the page is blank"
    return int(drawn[3])


def unfolded_height(page: Path) -> int:
    """The page's height with every fold (<details>) open."""
    unfolded = page.with_name("unfolded.html")
    try:
        unfolded.write_text(page.read_text().replace("<details>", "<details open>"))
        return page_height(unfolded)
    finally:
        unfolded.unlink()


def test_the_page_of_a_run_is_folded(run: Path) -> None:
    height = page_height(run / "report.html")
    assert height > 600 and 2 * height < unfolded_height(run / "report.html"), height


@pytest.mark.parametrize("diverged", [False, True], ids=["agree", "divergence"])
def test_a_fixed_page_with_every_label_is_short(diverged: bool, tmp_path: Path) -> None:
    failure = {"batch": 3, "reason": "replies differ", "steps": 5, "artifact": "reports/run-1/failures/batch-3",
               "link": "failures/batch-3", "detail": brief(huge_divergence())}  # fmt: skip
    summary = summary_with(verdict="divergence", divergences=[failure]) if diverged else summary_with()
    page = tmp_path / "report.html"
    page.write_text(html_report.render(summary))
    height = page_height(page)
    assert 600 < height <= (MAX_DIVERGENCE_PAGE_PX if diverged else MAX_PAGE_PX), height
    # the measure can fail: the same page with its folds open passes the bound many times over
    assert unfolded_height(page) > 2 * MAX_PAGE_PX


@pytest.mark.browser
def test_a_divergence_is_shown_with_its_replies_and_keys_and_no_red(diverged: Path) -> None:
    from PIL import Image

    summary = load(diverged)
    (failure,) = summary["divergences"]
    detail = failure["detail"]
    # summary.json holds the failing step in brief, as report.json has it whole
    report = json.loads((diverged / failure["link"] / "report.json").read_text())
    assert detail["step"] == report["step"] and detail["lua_reply"] == report["lua_reply"]
    assert detail["keys"] == report["key_diff"] and detail["keys_differing"] == len(report["key_diff"])
    (completed,) = [k for k in detail["keys"] if k["key"] == "emq:{q}:metrics:completed"]
    assert "b'2'" in completed["lua"] and "b'1'" in completed["native"]
    page = diverged / "report.html"
    dom = in_browser(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom.stdout)))
    assert "verdict: divergence" in text and detail["call"] in text
    assert f"lua reply {detail['lua_reply']} native reply {detail['native_reply']}" in text
    assert f"emq:{{q}}:metrics:completed {completed['lua']} {completed['native']}" in text
    # the run stopped at the divergence: what it did not reach is not drawn as missing
    assert "MISSING" not in text and "never exercised" not in text
    assert "not reached: the run stopped first" in text and summary["coverage_missing"]
    assert 2 * page_height(page) < unfolded_height(page)  # its long tables folded
    with tempfile.TemporaryDirectory(prefix="difftest-shot-") as shots:
        shot = Path(shots) / "report.png"
        done = in_browser(page, f"--screenshot={shot}")
        assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
        with Image.open(shot) as image:
            found = {colour for _, colour in image.convert("RGB").getcolors(maxcolors=1 << 20) or []}
    assert _rgb("#fbd9d9") in found, "the verdict's red box is not drawn"
    assert _rgb(html_report.RED) not in found and _rgb("#fbe3e3") not in found, "an unreached label is drawn red"


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


# ---- the page's pure parts ------------------------------------------------------------------------------


def summary_with(**overrides: Any) -> dict[str, Any]:
    labels = {label: 3 for label in coverage.REQUIRED}
    labels["sweep:ghost"] = 0
    document: dict[str, Any] = {
        "verdict": "agree", "seed": 99, "budget": {"examples": 80, "seconds": None}, "shard": None,
        "restarts": True, "workers": 2, "module": "m.so", "lua_scripts": None, "histories": 80, "steps": 900,
        "elapsed_s": 3.0, "compared_steps_per_s": 300.0, "interrupted": False, "divergences": [],
        "coverage": labels, "coverage_missing": ["sweep:ghost"], "also_reached": {"reply:CLAIM:error:NOPERM": 4},
        "host": "h", "progress": [{"t_s": 1.0, "batches": 1, "histories": 40, "steps": 400},
                                  {"t_s": 3.0, "batches": 2, "histories": 80, "steps": 900}],
    }  # fmt: skip
    document.update(overrides)
    return document


def test_a_divergence_links_its_artifact_and_says_how_to_replay_it() -> None:
    failure = {"batch": 3, "reason": "FAIL replied <retry> vs <dead>", "steps": 4,
               "artifact": "reports/run-1/failures/batch-3", "link": "failures/batch-3"}  # fmt: skip
    page = html_report.render(summary_with(verdict="divergence", divergences=[failure]))
    assert "verdict: divergence" in page and 'class="verdict bad"' in page
    assert 'href="failures/batch-3/report.txt"' in page and 'href="failures/batch-3/history.jsonl"' in page
    assert "difftest replay reports/run-1/failures/batch-3" in page
    assert "FAIL replied &lt;retry&gt; vs &lt;dead&gt;" in page  # escaped, not markup


def test_unreached_labels_are_highlighted_and_named() -> None:
    page = html_report.render(summary_with())
    assert "not reached: sweep:ghost" in page
    assert page.count("MISSING") == 1 and f'fill="{html_report.RED}"' in page
    assert "difftest run --seed 99 --examples 80" in page


def two_workers(rate_of: tuple[float, float] = (1.2, 1.2), batches: int = 20, steps: int = 800) -> dict[str, Any]:
    """A two-worker run whose batches finish in near-simultaneous pairs (0.08 s apart), as they do."""
    entries = []
    for number in range(batches):
        for worker, every in enumerate(rate_of):
            entries.append({"batch": 2 * number + worker, "worker": worker, "histories": 40, "steps": steps,
                            "finished_s": round((number + 1) * every + 0.08 * worker, 3)})  # fmt: skip
    ordered = sorted(entries, key=lambda e: e["finished_s"])
    progress, done = [], 0
    for number, entry in enumerate(ordered, start=1):
        done += entry["steps"]
        progress.append({"t_s": entry["finished_s"], "batches": number, "histories": 40 * number, "steps": done})
    return summary_with(batches=entries, progress=progress, steps=done, elapsed_s=ordered[-1]["finished_s"])


@pytest.mark.parametrize("workers_known", [True, False])
def test_the_speed_chart_has_no_spikes_when_two_workers_finish_together(workers_known: bool) -> None:
    summary = two_workers()
    if not workers_known:  # an older summary: only the time series
        summary["batches"] = [{k: v for k, v in b.items() if k != "worker"} for b in summary["batches"]]
    width, points = html_report.speed_series(summary)
    mean = summary["steps"] / summary["elapsed_s"]
    assert 1.0 <= width <= 1.1 and len(points) == 24  # windows of at least 1 s over the 24.08 s
    assert abs(sum(rate * width for _, rate in points) - summary["steps"]) < 1e-6  # every step counted once
    rates = [rate for _, rate in points]
    # the old chart (steps between consecutive batch ends) drew 800 / 0.08 s = 10,000 steps/s here
    assert max(rates) <= (1.2 if workers_known else 2.5) * mean, rates
    assert min(rates) >= (0.8 if workers_known else 0.4) * mean, rates


def test_the_speed_windows_are_fixed_wall_time() -> None:
    width, points = html_report.speed_series(two_workers(batches=100))  # 120 s: 40 windows of 3 s
    assert len(points) == html_report.SPEED_WINDOWS and abs(width - 120.08 / 40) < 1e-9
    assert [t for t, _ in points] == [round((i + 0.5) * width, 3) for i in range(40)]
    slow_and_fast = two_workers(rate_of=(1.0, 2.0))  # one worker twice the other's speed: both counted
    _, points = html_report.speed_series(slow_and_fast)
    assert all(abs(rate - 1200) < 130 for _, rate in points[:19]), points  # 800/s + 400/s while both run
    assert html_report.speed_series(summary_with(progress=[], batches=[])) == (0.0, [])
    chart = html_report.line_chart([(1.0, 400.0), (3.0, 250.0)], title="t", x_label="x", y_label="y")
    assert chart.count("<circle") == 2 and "<polyline" in chart
    assert "no time series" in html_report.line_chart([], title="t", x_label="x", y_label="y")


def test_an_old_summary_still_renders() -> None:
    old = summary_with()
    for key in ("verdict", "progress", "shard", "restarts"):
        del old[key]
    page = html_report.render(old)
    assert "verdict: agree" in page and "no time series recorded" in page


@pytest.mark.parametrize(
    ("top", "expected"), [(0, [0.0, 1.0]), (7, [0, 2, 4, 6, 8]), (950, [0, 200, 400, 600, 800, 1000])]
)
def test_ticks_are_round_and_cover_the_top(top: float, expected: list[float]) -> None:
    assert html_report.nice_ticks(top) == expected


# ---- the contract's order, a divergence in brief, coverage of a run that stopped ------------------------


def contract_table() -> list[str]:
    """The rows of the parity contract's table as docs/contract.md lists them."""
    text = (Path(__file__).parents[1] / "docs" / "contract.md").read_text()
    table = text[text.index("| id | transition | precondition |") :]
    return re.findall(r"^\| ([DN]\d+) \|", table.split("\n\n")[0], re.MULTILINE)


def test_the_contract_rows_are_shown_in_the_contracts_order() -> None:
    order = [rule.id for rule in TABLE_ORDER]
    assert order == ["D1", "D2", "D3", "D4", "D5", "D6", "N1", "D7", "D8", "D9", "N2", "N3", "N4", "N5"]
    assert sorted(order) == sorted(RULES)  # every row, once
    # the spec's own rows in its order (as the contract's page states them), then the project's own
    assert order == contract_table() and [rule.spec_row for rule in TABLE_ORDER[:10]] == list(range(1, 11))
    assert all(rule.spec_row == 0 for rule in TABLE_ORDER[10:])
    page = html_report.render(summary_with())
    assert re.findall(r"<tr[^>]*><td>([DN]\d)</td>", page) == order
    # N1 holds always: its "when" says so instead of a dash
    assert "always" in RULES["N1"].precondition and "<td>-</td>" not in page


def huge_divergence() -> Divergence:
    """A divergence with more keys than a summary keeps, and values longer than it shows."""
    many = {f"emq:{{q}}:job:j{n}".encode(): Entry("hash", {b"payload": b"<" * 1000}, -1) for n in range(20)}
    return Divergence(index=4, step=hist.call_step("CLAIM", "q", 100), reason="replies differ",
                      lua_reply=[b"j1", b"x" * 2000, 1], native_reply=[], before={}, lua_after=many,
                      native_after={}, native_epochs={})  # fmt: skip


def test_a_divergence_in_brief_is_cut_to_a_sane_size() -> None:
    detail = brief(huge_divergence())
    assert detail["step"] == 4 and detail["kind"] == "divergence" and '"verb": "CLAIM"' in detail["call"]
    assert len(detail["keys"]) == BRIEF_KEYS and detail["keys_differing"] == 20
    assert detail["keys"][0]["native"] == "None" and detail["native_reply"] == "[]"
    for text in (detail["lua_reply"], detail["keys"][0]["lua"]):
        assert text.endswith("more characters)") and len(text) < BRIEF_CHARS + 40
    assert len(json.dumps(detail)) < 20 * BRIEF_CHARS * 3  # whatever the history's payloads


def test_a_divergence_shows_its_step_replies_and_keys_inline() -> None:
    failure = {"batch": 3, "reason": "replies differ", "steps": 5, "artifact": "reports/run-1/failures/batch-3",
               "link": "failures/batch-3", "detail": brief(huge_divergence())}  # fmt: skip
    page = html_report.render(summary_with(verdict="divergence", divergences=[failure]))
    assert "they differ" in page and html.escape(failure["detail"]["lua_reply"]) in page
    assert page.count('<tr class="differ">') == BRIEF_KEYS and "emq:{q}:job:j0" in page
    assert "&lt;&lt;&lt;" in page and "<<<" not in page  # values escaped, not markup
    assert '8 more: see <a href="failures/batch-3/report.txt">' in page
    # a propagation divergence: the replica's keys beside its primary's
    failure["detail"] = {**failure["detail"], "replica": {"side": "native", "keys_differing": 1,
                         "keys": [{"key": "emq:{q}:done", "primary": "Entry(zset)", "replica": "None"}]}}  # fmt: skip
    page = html_report.render(summary_with(verdict="divergence", divergences=[failure]))
    assert "between the native server and its replica" in page and "<th>primary</th><th>replica</th>" in page
    # an events divergence: each server's keyspace notifications side by side
    events = replace(huge_divergence(), kind="events", lua_events=(Event("keyevent", 0, b"hset", b"emq:{q}:job:j1"),),
                     native_events=tuple(Event("keyevent", 0, b"hset", b"k%d" % n) for n in range(15)))  # fmt: skip
    detail = brief(events)
    assert detail["events_fired"] == {"lua": 1, "native": 15} and len(detail["events"]["native"]) == BRIEF_KEYS
    failure["detail"] = detail
    page = html_report.render(summary_with(verdict="divergence", divergences=[failure]))
    assert "keyspace events fired at the step" in page and "<th>native (15)</th>" in page
    assert html.escape(detail["events"]["lua"][0]) in page and "more: see" in page
    # a summary from before the brief was recorded points to report.txt
    del failure["detail"]
    page = html_report.render(summary_with(verdict="divergence", divergences=[failure]))
    assert 'see <a href="failures/batch-3/report.txt">report.txt</a>' in page


@pytest.mark.parametrize("verdict", ["divergence", "interrupted"])
def test_labels_a_stopped_run_did_not_reach_are_not_drawn_missing(verdict: str) -> None:
    labels = {label: 0 for label in coverage.REQUIRED}
    labels["contract:D6"] = 5
    stopped = summary_with(verdict=verdict, coverage=labels, coverage_missing=[k for k, v in labels.items() if not v])
    page = html_report.render(stopped)
    assert "MISSING" not in page and RED_FILL not in page and "never exercised" not in page
    assert f'fill="{html_report.GREY}"' in page and "not reached: the run stopped first" in page
    assert "not reached before the run stopped" in page and "says nothing of whether the generator" in page
    # the same counts from a run that ran its budget: missing, in red
    page = html_report.render({**stopped, "verdict": "agree"})
    assert page.count("MISSING") == len(labels) - 1 and RED_FILL in page and "never exercised" in page


RED_FILL = f'fill="{html_report.RED}"'
