"""The mutation gate read through the known-findings file: survivors accepted while their fix is open.

A mutant that survives (missed) and that known-findings.toml accepts as `survivor:<id>`, in force,
does not fail the gate as an unknown survivor does: when every survivor is accepted, the run or the
merge exits 6 (EXIT_KNOWN) and says which, instead of 1. An expired entry accepts nothing; an
accepted mutant that is caught now is stale ("remove the entry"). The scores themselves are
unchanged: an accepted survivor is still missed in every report.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path

from difftest.base.exits import EXIT_KNOWN
from difftest.base.files import write_atomically
from difftest.findings.known import SURVIVOR, KnownFindings
from mutants.records import Document, parse_document
from mutants.report import accepted, scored
from mutants.score import CAUGHT, MISSED


def read_through(document: Document, known: KnownFindings, today: datetime.date) -> dict[str, list[str]]:
    """The scored mutants' ids by what the file makes of them: `known` (survived, accepted), `survivors`
    (not caught, not accepted: they fail the gate), `expired` (survived, accepted until a day past),
    `stale` (accepted, and caught)."""
    entries = known.of_kind(SURVIVOR)
    found: dict[str, list[str]] = {"known": [], "survivors": [], "expired": [], "stale": []}
    for record in scored(document):
        ident, entry = str(record["id"]), entries.get(str(record["id"]))
        if entry is not None and record["status"] == CAUGHT:
            found["stale"].append(ident)
        if accepted(record):
            continue
        if entry is not None and record["status"] == MISSED:
            found["known" if entry.in_force(today) else "expired"].append(ident)
        else:
            found["survivors"].append(ident)
    return found


def gate(code: int, reports: Path, known: KnownFindings, today: datetime.date, say: Callable[[str], None],
         failing: int) -> int:  # fmt: skip
    """The runner's exit code read through the file: `failing` (a survivor) becomes EXIT_KNOWN when
    every survivor is accepted; the outcomes file records what the file made of each."""
    outcomes = reports / "outcomes.json"
    if known.path is None or not outcomes.is_file():
        return code
    document = parse_document(outcomes.read_text())
    found = read_through(document, known, today)
    entries = known.of_kind(SURVIVOR)
    for ident in found["known"]:
        entry = entries[ident]
        say(f"KNOWN SURVIVOR survivor:{ident}: accepted by {entry.accepted_by} until {entry.expires} ({entry.reason})")
    for ident in found["expired"]:
        say(f"EXPIRED: survivor:{ident} was accepted until {entries[ident].expires}: it fails the gate; catch it, "
            f"or renew the entry in {known.path}")  # fmt: skip
    for ident in found["stale"]:
        say(f"STALE: survivor:{ident} is caught now: remove its entry from {known.path}")
    document["known_findings"] = {"file": str(known.path), **found}
    write_atomically(outcomes, json.dumps(document, indent=2) + "\n")
    if code == failing and found["known"] and not found["survivors"] and not found["expired"]:
        say(f"gate: every survivor is accepted in {known.path} ({len(found['known'])}): exit {EXIT_KNOWN}")
        return EXIT_KNOWN
    return code
