"""The first page's example is real: docs/example/README.md's commands, run as written, print what the
page shows (a real replay on real servers, the defect planted as the page plants it)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from difftest.base.exits import EXIT_DIVERGENCE
from difftest.cli.main import main

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "example" / "README.md"
HISTORY = ROOT / "docs" / "example" / "complete-counts-twice.jsonl"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```$", PAGE.read_text(), re.MULTILINE | re.DOTALL)


def _timeless(lines: list[str]) -> list[str]:
    return [re.sub(r" in \d+ ms;", " in N ms;", line) for line in lines]


def test_the_page_shows_the_history_file_as_it_is() -> None:
    assert _blocks("json") == [HISTORY.read_text()]


@pytest.mark.servers
def test_the_examples_commands_print_what_the_page_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planted = tmp_path / "planted"
    shutil.copytree(ROOT / "executors" / "lua", planted, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    # the page's own sed line, applied as it says
    old, new = re.findall(r"""sed -i "s/(.*?)/(.*?)/" /tmp/planted/(\S+)""", _blocks("sh")[0])[0][:2]
    script = planted / re.findall(r"/tmp/planted/(\S+\.lua)", _blocks("sh")[0])[0]
    assert old in script.read_text()
    script.write_text(script.read_text().replace(old, new))

    code = main(["replay", str(HISTORY), "--lua-scripts", str(planted), "--reports", str(tmp_path / "reports")])
    printed = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("artifact: ")]
    assert code == EXIT_DIVERGENCE
    shown, report_head = _blocks("text")
    assert _timeless(printed) == _timeless(shown.splitlines())
    (report,) = (tmp_path / "reports").glob("*/divergence/report.txt")
    assert report.read_text().startswith(report_head)


def test_the_first_pages_excerpt_and_picture_come_from_their_sources() -> None:
    readme = (ROOT / "README.md").read_text()
    (picture,) = re.findall(r"^```mermaid\n(.*?)^```$", readme, re.MULTILINE | re.DOTALL)
    assert picture == (ROOT / "docs" / "pipeline.mmd").read_text()
    excerpt = readme[readme.index("A real one:") :]
    excerpt = excerpt[excerpt.index("```text\n") + 8 : excerpt.index("\n```")]
    shown = set(HISTORY.read_text().splitlines()) | set("\n".join(_blocks("text")).splitlines()) | {""}
    assert set(excerpt.splitlines()) <= shown
