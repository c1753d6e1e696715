"""The shapes of a run's findings as plain data: a saved divergence, a meeting, a distinct finding, a night's line."""

from __future__ import annotations

from typing import Any, Required, TypedDict


class Meeting(TypedDict, total=False):
    """How often a run met one finding, and when first and last (a summary of an older run may lack any)."""

    count: int
    first_at: float  # time.time()
    last_at: float
    first_batch: int
    last_batch: int


class Divergence(Meeting, total=False):
    """A saved failure as summary.json's `divergences` hold it (the campaign's Failure, and its link);
    a merge of shards that went on past their findings lists each failing finding (Finding) here, with
    its status, meetings and other artifacts."""

    batch: Required[int]
    reason: Required[str]
    steps: Required[int]
    artifact: Required[str]
    # the failing step in brief: artifacts.brief's nested replies and keys, which difftest/replay leaves untyped
    detail: dict[str, Any]
    unsaved: str  # only when the machine refused the artifact: why, and the history instead
    history: str
    signature: str  # absent in summaries of runs older than signatures
    described: str
    link: str  # the artifact relative to the run directory: what report.html links to
    reproduce: str  # the command that replays it, added by the command line
    status: str  # a merge's: the finding's
    also: list[str]
    known_reason: str
    accepted_by: str
    expires: str


class Finding(Meeting, total=False):
    """One distinct finding of a run: its signature, its status under the known-findings file, its
    meetings, its first artifact's fields (if one was saved) and its known-findings entry (if any)."""

    signature: Required[str]
    status: Required[str]
    described: str
    reason: str
    steps: int
    artifact: str
    link: str
    batch: int
    reproduce: str
    also: list[str]  # the other artifacts of the same finding
    known_reason: str
    accepted_by: str
    expires: str  # ISO date


class NightFinding(TypedDict, total=False):
    """A finding as a night's line of the findings history holds it."""

    signature: Required[str]
    status: str
    count: int


class Night(TypedDict):
    """One line of the findings history: when, the seed, and each finding met."""

    at: float
    seed: object  # whatever the night's summary held: an int, or None for a summary without one
    findings: list[NightFinding]


class Nights(TypedDict, total=False):
    """A finding across the nights: on how many it was met, the first and the last, its status tonight."""

    nights: Required[int]
    first_night: Required[float]
    last_night: float
    status: str | None
