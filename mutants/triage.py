"""The reviewed triage of generated mutants (mutants/triage.toml): equivalent or unviable, each with its reason.

A triaged mutant is still built and run (so a triage that no longer holds shows): a triaged
`equivalent` one that survives is scored `equivalent`, a triaged `unviable` one that does not build
or errs is `unviable`; neither counts in the score nor fails the gate, and the record's `triage` says
why. A triaged mutant that is caught keeps `caught`, and its `triage` says the triage is stale.
The file is checked before anything runs: an id that is not in the generated set, a verdict other
than the two, an empty reason or an id twice is one line on stderr and exit 2.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from difftest.base.problems import SetupProblem
from mutants.catalogue import HERE
from mutants.records import Record
from mutants.score import CAUGHT, EQUIVALENT, ERROR, MISSED, TIMEOUT, UNVIABLE

TRIAGE_FILE = HERE / "triage.toml"
VERDICTS = (EQUIVALENT, UNVIABLE)


@dataclass(frozen=True)
class Triage:
    id: str
    verdict: str  # equivalent or unviable
    reason: str


def read(path: Path = TRIAGE_FILE) -> dict[str, Triage]:
    """The entries by id; SetupProblem (one line) on a malformed file or entry."""
    if not path.is_file():
        return {}
    try:
        entries = tomllib.loads(path.read_text()).get("mutant", [])
    except tomllib.TOMLDecodeError as exc:
        raise SetupProblem(f"{path}: not TOML: {exc}") from None
    found: dict[str, Triage] = {}
    twice = [i for i, n in Counter(str(e.get("id", "")) for e in entries).items() if n > 1]
    if twice:
        raise SetupProblem(f"{path}: triaged twice: {', '.join(sorted(twice))}")
    for entry in entries:
        ident, verdict, reason = (str(entry.get(k, "")).strip() for k in ("id", "verdict", "reason"))
        if not ident:
            raise SetupProblem(f"{path}: an entry without an id")
        if verdict not in VERDICTS:
            raise SetupProblem(f"{path}: {ident}: verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
        if not reason:
            raise SetupProblem(f"{path}: {ident}: no reason (each triage says why)")
        found[ident] = Triage(ident, verdict, reason)
    return found


def check(triage: dict[str, Triage], ids: Iterable[str], path: Path = TRIAGE_FILE) -> None:
    """SetupProblem (one line) when the triage names ids that are not in the generated set."""
    unknown = sorted(set(triage) - set(ids))
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise SetupProblem(f"{path}: unknown generated mutant ids: {', '.join(unknown[:5])}{more} (the ids of "
                           "today's set: python -m mutants --generated --list)")  # fmt: skip


def load(ids: Iterable[str], path: Path = TRIAGE_FILE) -> dict[str, Triage]:
    triage = read(path)
    check(triage, ids, path)
    return triage


def apply(record: Record, triage: dict[str, Triage]) -> Record:
    """The record as its triage reads it (in place; idempotent): see the module's docstring."""
    entry = triage.get(record["id"])
    if entry is None:
        return record
    status = record["status"]
    if status == CAUGHT:
        record["triage"] = f"stale: triaged {entry.verdict} ({entry.reason}) but caught"
        return record
    record["triage"] = f"{entry.verdict}: {entry.reason}"
    if entry.verdict == EQUIVALENT and status in (MISSED, EQUIVALENT):
        record["status"] = EQUIVALENT
    elif entry.verdict == UNVIABLE and status in (UNVIABLE, ERROR, MISSED, TIMEOUT):
        record["status"] = UNVIABLE
    return record
