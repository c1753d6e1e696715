"""A run's distinct findings as plain data: each signature met, its status under the known-findings file, its count.

Pure functions over what a campaign (or a merge of shards) recorded: the saved failures (one or
more artifacts a signature), the meetings by signature, and the known-findings file. The list is
what summary.json's `findings` holds and report.html's table shows; the run's verdict and exit
code follow from the statuses (`counts`). The shapes are difftest/findings/entries.py's.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import cast

from difftest.findings.entries import Divergence, Finding, Meeting, Night, NightFinding, Nights
from difftest.findings.known import DIVERGENCE, EXPIRED, KNOWN, NEW, NOT_MET, STALE, KnownFinding, KnownFindings

FAILING = (NEW, EXPIRED)  # statuses that make a run's verdict a divergence (exit 1)
_SAVED = ("described", "reason", "steps", "artifact", "link", "batch")  # what a finding takes from its artifact
_MEETING = ("count", "first_at", "last_at", "first_batch", "last_batch")  # a meeting's fields


def distinct(failures: Iterable[Divergence], meetings: Mapping[str, Meeting], known: KnownFindings,
             today: datetime.date, stale: Iterable[str] = ()) -> list[Finding]:  # fmt: skip
    """One entry per signature met (new and expired first, then known), then the file's divergence
    entries this run did not meet (`stale`: those whose history no longer reproduces)."""
    by_signature: dict[str, list[Divergence]] = {}
    for failure in failures:
        by_signature.setdefault(str(failure.get("signature", "")), []).append(failure)
    entries = known.of_kind(DIVERGENCE)
    found: list[Finding] = []
    for name, meeting in meetings.items():
        entry: Finding = {"signature": name, "status": known.status(DIVERGENCE, name, today)}
        entry.update(_meeting(meeting))
        _first_artifact(entry, by_signature.get(name, []), (*_SAVED, "reproduce"))
        _add_entry_fields(entry, entries.get(name))
        found.append(entry)
    found.sort(key=lambda e: (e["status"] not in FAILING, -int(e.get("count", 0)), e["signature"]))
    stale_names = set(stale)
    for name, known_entry in entries.items():
        if name not in meetings:
            entry = {"signature": name, "status": STALE if name in stale_names else NOT_MET, "count": 0}
            _add_entry_fields(entry, known_entry)
            found.append(entry)
    return found


def _meeting(fields: Mapping[str, object]) -> Finding:
    """A meeting's fields out of a meeting or a finding (those it has), to update a finding with."""
    # the keys are a Meeting's own (_MEETING), which a Finding shares, their values as `fields` held them
    return cast(Finding, {k: fields[k] for k in _MEETING if k in fields})


def _first_artifact(entry: Finding, saved: Sequence[Divergence | Finding], fields: tuple[str, ...]) -> None:
    """The finding's artifact (and `fields`) from its first batch's saved failure; the others in `also`."""
    ordered = sorted(saved, key=lambda f: (int(f.get("batch", 1 << 30)), str(f.get("artifact", ""))))
    if ordered:
        first: Mapping[str, object] = ordered[0]
        # `fields` are keys a Finding shares with a saved failure (_SAVED, "reproduce")
        entry.update(cast(Finding, {k: first[k] for k in fields if k in first}))
        entry["also"] = [str(other.get("artifact", "")) for other in ordered[1:]]


def _add_entry_fields(entry: Finding, known_entry: KnownFinding | None) -> None:
    if known_entry is not None:
        entry.update({"known_reason": known_entry.reason, "accepted_by": known_entry.accepted_by,
                      "expires": known_entry.expires.isoformat()})  # fmt: skip


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """How many distinct findings of each status (new, known, expired, stale, not met)."""
    found = {NEW: 0, KNOWN: 0, EXPIRED: 0, STALE: 0, NOT_MET: 0}
    for entry in findings:
        found[str(entry["status"])] = found.get(str(entry["status"]), 0) + 1
    return found


def failing(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that make the run a divergence: new ones, and those whose acceptance expired."""
    return [entry for entry in findings if entry["status"] in FAILING]


def meetings_of(findings: Iterable[Finding]) -> dict[str, Meeting]:
    """The meetings back from a summary's findings (what a merge of shards adds up)."""
    # a Finding's meeting keys are a Meeting's
    return {str(e["signature"]): cast(Meeting, _meeting(e)) for e in findings if int(e.get("count", 0)) > 0}


def add_meetings(into: dict[str, Meeting], more: Mapping[str, Meeting]) -> None:
    """Another shard's (or night's) meetings added in: counts summed, the first first and the last last."""
    for name, meeting in more.items():
        if name not in into:
            into[name] = Meeting(**meeting)
            continue
        mine = into[name]
        if float(meeting.get("first_at", 0)) < float(mine.get("first_at", 0)):
            _copy_end(mine, meeting, "first")
        if float(meeting.get("last_at", 0)) >= float(mine.get("last_at", 0)):
            _copy_end(mine, meeting, "last")
        mine["count"] = int(mine.get("count", 0)) + int(meeting.get("count", 0))


def _copy_end(mine: Meeting, other: Meeting, end: str) -> None:
    """`other`'s first (or last) meeting's time and batch into `mine` (absent in `other`: absent, as null)."""
    # a meeting without the key kept it as null before: the summary's JSON is the same
    moved, given = cast(dict[str, object], mine), cast(Mapping[str, object], other)
    moved[f"{end}_at"], moved[f"{end}_batch"] = given.get(f"{end}_at"), given.get(f"{end}_batch")


def verdict_words(findings: Iterable[Finding]) -> str:
    """`2 distinct findings: 1 new, 1 known` (empty when none was met)."""
    tally = counts(findings)
    met = tally[NEW] + tally[KNOWN] + tally[EXPIRED]
    if not met:
        return ""
    parts = [f"{tally[status]} {status}" for status in (NEW, EXPIRED, KNOWN) if tally[status]]
    return f"{met} distinct finding{'s' if met != 1 else ''}: {', '.join(parts)}"


_RANK = {NEW: 0, EXPIRED: 1, KNOWN: 2, STALE: 3, NOT_MET: 4}  # which status a merge keeps: the first


def merged(shards: Iterable[Iterable[Finding]]) -> list[Finding]:
    """The shards' findings as one run's: meetings added up, each signature's artifact the one of its
    first batch (the others in `also`), its status the most urgent any shard gave it (new, expired,
    known; an entry not met anywhere is stale if a shard found it so)."""
    by_signature: dict[str, Finding] = {}
    meetings: dict[str, Meeting] = {}
    artifacts: dict[str, list[Finding]] = {}
    for findings in shards:
        findings = list(findings)
        add_meetings(meetings, meetings_of(findings))
        for entry in findings:
            name = str(entry["signature"])
            if "artifact" in entry:
                artifacts.setdefault(name, []).extend(_artifacts_of(entry))
            kept = by_signature.get(name)
            if kept is None or _RANK.get(str(entry["status"]), 9) < _RANK.get(str(kept["status"]), 9):
                by_signature[name] = _without_meeting(entry)
    found = []
    for name, entry in by_signature.items():
        entry.update(_meeting(meetings.get(name, {"count": 0})))
        # a shard's reproduce line is its machine's: the merge prints its own for the divergences
        _first_artifact(entry, artifacts.get(name, []), _SAVED)
        found.append(entry)
    found.sort(key=lambda e: (_RANK.get(str(e["status"]), 9), -int(e.get("count", 0)), str(e["signature"])))
    return found


def _artifacts_of(entry: Finding) -> list[Finding]:
    """A shard's finding and its other artifacts, each as a candidate for the merged finding's first."""
    others: list[Finding] = [{"signature": entry["signature"], "status": entry["status"], "artifact": also}
                             for also in entry.get("also", [])]  # fmt: skip
    return [entry, *others]


def _without_meeting(entry: Finding) -> Finding:
    """The finding without its meeting's fields (a merge adds up the shards' meetings instead)."""
    kept: Finding = {"signature": entry["signature"], "status": entry["status"]}
    # every other key a Finding holds, in its order
    kept.update(cast(Finding, {k: v for k, v in entry.items() if k not in _MEETING}))
    return kept


def across_nights(earlier: Iterable[Night], tonight: Iterable[Finding], at: float) -> dict[str, Nights]:
    """Each finding met tonight or on an earlier night (the history file's lines: {"at", "findings"}):
    on how many nights it was met, the first and the last (Unix time), and its status tonight."""
    found: dict[str, Nights] = {}
    tonight_line: Night = {"at": at, "seed": None, "findings": [_night_finding(entry) for entry in tonight]}
    for night in [*earlier, tonight_line]:
        for entry in night.get("findings", []):
            if int(entry.get("count", 0)) <= 0:
                continue
            mine = found.setdefault(str(entry["signature"]), {"nights": 0, "first_night": night["at"]})
            mine["nights"] += 1
            mine["last_night"], mine["status"] = night["at"], entry.get("status")
    return found


def _night_finding(entry: Finding) -> NightFinding:
    """What the findings history keeps of a finding: its signature, status and count (those it has)."""
    # the keys are NightFinding's own
    fields: Mapping[str, object] = entry
    return cast(NightFinding, {k: fields[k] for k in ("signature", "status", "count") if k in fields})


def history_line(findings: Iterable[Finding], at: float, seed: object) -> Night:
    """Tonight's line of the history file: each finding met, with its status and count."""
    met = [_night_finding(entry) for entry in findings if int(entry.get("count", 0)) > 0]
    return {"at": at, "seed": seed, "findings": met}
