"""docs/extending.md's worked checklists run as written: each block marked `python test`, against the real modules."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from strategies import machine

GUIDE = Path(__file__).parents[1] / "docs" / "extending.md"
BLOCK = re.compile(r"^```python test\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks() -> dict[str, str]:
    """Each marked block by the checklist it belongs to (the `## ` heading above it)."""
    text = GUIDE.read_text()
    found: dict[str, str] = {}
    for match in BLOCK.finditer(text):
        heading = re.findall(r"^## (.*)$", text[: match.start()], re.MULTILINE)[-1]
        found[heading] = match.group(1)
    return found


def test_each_checklist_has_its_block() -> None:
    assert set(blocks()) == {"Checklist 1: a fault step (a rule of the state machine)", "Checklist 2: a verb",
                             "Checklist 3: a contract row"}  # fmt: skip


@pytest.mark.parametrize("checklist", sorted(blocks()))
def test_the_checklists_code_runs_as_written(checklist: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # a worked rule registers its weight and its place in the machine's tables: in copies, so the
    # machine the rest of the suite draws from keeps its own
    monkeypatch.setattr(machine, "RULE_ORDER", dict(machine.RULE_ORDER))
    monkeypatch.setattr(machine, "RULE_WEIGHTS", dict(machine.RULE_WEIGHTS))
    namespace: dict[str, Any] = {"__name__": f"docs_extending_{checklist[:11].replace(' ', '_')}"}
    exec(compile(blocks()[checklist], f"{GUIDE}:{checklist}", "exec"), namespace)  # its asserts are the test


def test_a_broken_block_fails() -> None:
    """The blocks' own asserts are what the test checks: one that fails is not swallowed."""
    code = blocks()["Checklist 3: a contract row"].replace("<= 1000", "<= 10_000")  # X1 no longer applies at 5000
    with pytest.raises(AssertionError):
        exec(compile(code, "broken", "exec"), {"__name__": "docs_extending_broken"})
