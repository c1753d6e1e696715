"""The docs stay true to the tree: the README a first page, every link and docs/ path real, the history
format's reference complete."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from difftest.history import format as hist

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "mutants" / "README.md"]
# where the tree names a docs/ file: code, tests, scripts, the workflow, the catalogue, the pages themselves
SOURCES = ("difftest", "strategies", "mutants", "tests", "executors", "bench", "scripts", ".github", "docs")
SUFFIXES = {".py", ".rs", ".md", ".toml", ".yml", ".sh", ".patch", ".c"}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_is_a_first_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for needed in ("make run", "make test", "reports/<run-id>/", "## Exit codes", "docs/usage.md"):
        assert needed in readme, needed


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{page.name} links to {target}, which is not a file"
        if anchor:
            headings = re.findall(r"^#+ (.*)$", linked.read_text(), re.MULTILINE)
            assert anchor in {_slug(h) for h in headings}, f"{page.name} links to {target}: no such heading"


def test_every_docs_path_named_in_the_tree_exists() -> None:
    named: dict[str, Path] = {}
    for top in SOURCES:
        for path in (ROOT / top).rglob("*"):
            if path.suffix in SUFFIXES and not {"target", ".cache"} & set(path.parts) and path.is_file():
                for name in re.findall(r"docs/[\w.-]+\.md", path.read_text(errors="replace")):
                    named.setdefault(name, path)
    named.update({n: ROOT / "README.md" for n in re.findall(r"docs/[\w.-]+\.md", (ROOT / "README.md").read_text())})
    assert "docs/contract-decisions.md" in named  # the check looks where the references are
    missing = {name: str(where.relative_to(ROOT)) for name, where in named.items() if not (ROOT / name).is_file()}
    assert not missing, f"named but not there (name: where): {missing}"


FORMAT = (ROOT / "docs" / "history-format.md").read_text()


def test_the_history_formats_example_loads_and_holds_every_op() -> None:
    example = re.search(r"```json\n(.*?)```", FORMAT, re.DOTALL)
    assert example is not None
    history = hist.loads(example.group(1), "docs/history-format.md")
    ops_in_example = {json.loads(line)["op"] for line in example.group(1).splitlines()[1:]}
    with pytest.raises(hist.HistoryError) as refused:
        hist.loads('{"format": "difftest-history", "version": 1}\n{"op": "no-such-op"}')
    known = set(re.search(r"\(([a-z, ]+)\)", str(refused.value)).group(1).split(", "))  # type: ignore[union-attr]
    reference = re.split(r"^## Reference: every step.*$", FORMAT, flags=re.MULTILINE)[1]
    table = reference.split("\n\n")[1].split("| --- |", 1)[1]  # the table's body, past its header row
    documented = set(re.findall(r"^\| `([a-z]+)` \|", table, re.MULTILINE))
    assert ops_in_example == known == documented
    # a line a step, a bulk's line its calls
    lines = [json.loads(line) for line in example.group(1).splitlines()[1:]]
    assert len(history.steps) == sum(line.get("count", 1) if line["op"] == "bulk" else 1 for line in lines)


def test_the_history_formats_reference_names_every_header_field() -> None:
    from difftest.replay.artifacts import EXPECT_FIELD
    from difftest.replay.build import BUILD_FIELD

    full = hist.History((), users={"u": ("~*",)}, seed=1, note="n", db=2)
    written = set(hist.header_json(full, {EXPECT_FIELD: {}, BUILD_FIELD: {}}))
    header = FORMAT.split("## Reference: the header", 1)[1].split("## Reference: every step", 1)[0]
    assert written == set(re.findall(r"^\| `(\w+)` \|", header.split("| --- |", 1)[1], re.MULTILINE))
