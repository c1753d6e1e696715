"""The findings history: one JSON line a night (each finding met, its status and count), read and appended.

`difftest merge` appends the merged run's line to `findings-history.jsonl` beside its OUT (the
nightly carries the file from night to night, as it carries the mutation scores), and the summary's
`findings_history` says, for each finding, on how many nights it was met and since when
(difftest/findings/tally.py, `across_nights`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

from difftest.base.files import write_atomically
from difftest.base.problems import SetupProblem
from difftest.findings.entries import Night

FILE_NAME = "findings-history.jsonl"


def default_file(out: Path) -> Path:
    """reports/campaign/ -> reports/findings-history.jsonl: one file for the runs side by side."""
    return out.parent / FILE_NAME


def read(path: Path) -> list[Night]:
    """The nights recorded so far (none when the file is not there); a line that is not a night's
    record is one line naming it (exit 2): the file is data that every later night builds on."""
    if not path.is_file():
        return []
    nights = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            night = json.loads(line)
        except ValueError:
            night = None
        if not isinstance(night, dict) or "at" not in night or not isinstance(night.get("findings"), list):
            raise SetupProblem(f"{path}:{number}: not a night of the findings history ({{\"at\": ..., \"findings\": "
                               "[...]}}): mend or remove the line, or pass --findings-history none")  # fmt: skip
        nights.append(cast(Night, night))  # checked above: a night's "at" and "findings"
    return nights


def append(path: Path, night: Night) -> None:
    """The file with `night` added as its last line, whole or (OSError) as it was."""
    before = path.read_text() if path.is_file() else ""
    if before and not before.endswith("\n"):
        before += "\n"
    write_atomically(path, before + json.dumps(night, sort_keys=True) + "\n")
