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


# ---- the repository stands alone: its contract on its own page, no path out of the checkout ----------


def _table(page: Path, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header line starts with `header`, as stripped cells."""
    text = page.read_text()
    lines = text[text.index(header) :].split("\n\n")[0].splitlines()[2:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_the_contract_page_states_every_transition_with_its_keys_and_arguments() -> None:
    from difftest.spec.commands import TRANSITIONS

    rows = {row[0]: row for row in _table(ROOT / "docs" / "contract.md", "| verb | keys | args |")}
    assert list(rows) == list(TRANSITIONS), "docs/contract.md's transitions, in the table's order"
    for verb, transition in TRANSITIONS.items():
        keys = ", ".join(key or "base" for key in transition.keys)
        args = ", ".join(arg.name for arg in transition.args) or "(none)"
        assert rows[verb][1:3] == [keys, args], f"docs/contract.md: {verb}'s keys or arguments"


def test_the_contract_page_states_every_row_the_judge_knows_in_the_reports_order() -> None:
    from difftest.judge.contract import TABLE_ORDER

    rows = _table(ROOT / "docs" / "contract.md", "| id | transition | precondition |")
    assert [row[0] for row in rows] == [rule.id for rule in TABLE_ORDER]
    for row, rule in zip(rows, TABLE_ORDER, strict=True):
        assert row[1] == (", ".join(rule.verbs) or "any"), f"docs/contract.md: {rule.id}'s transitions"
        assert len(row) == 5 and all(row), f"docs/contract.md: {rule.id} has an empty cell"


OUTSIDE = re.compile(r"\.\./shared|/work/shared|/work/main")


def test_nothing_in_the_repository_points_outside_it() -> None:
    """A clone on its own has its contract, its docs and every link: no page, source or setting names
    a path beside the checkout."""
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "Makefile", ROOT / "docker-compose.yml"]
    for top in SOURCES:
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    outside = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        if not {"target", ".cache"} & set(path.parts) and path.name != "test_docs.py"
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not outside, f"paths outside the repository: {outside}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_stays_inside_the_repository(page: Path) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if not re.match(r"[a-z]+:", target) and target.partition("#")[0]:
            assert (page.parent / target.partition("#")[0]).resolve().is_relative_to(ROOT), target
