"""The shapes of outcomes.json and the score history as types, JSON read into them once (`parse_document`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Required, TypedDict, cast


class Place(TypedDict):
    """One change block of a mutant's patches: the file (named from the repository) and its lines."""

    file: str
    start: int
    end: int


class Record(TypedDict, total=False):
    """One mutant's outcome (or the null run's) as outcomes.json holds it: score.Outcome's fields."""

    id: Required[str]
    executor: Required[str]
    status: Required[str]  # caught, missed, timeout, unviable, error, equivalent; the null run's clean
    defect_class: str
    transition: str
    needs: list[str]
    build_s: float
    campaign_s: float
    histories: int
    steps: int
    minimal_steps: int | None
    reason: str
    artifact: str
    reached: dict[str, int]
    restarts: bool
    caught_by: str
    exposure: dict[str, int]
    locations: list[Place]
    diff: str
    digests: dict[str, str]
    reused_from: str
    why_scored: str
    triage: str


class BudgetRecord(TypedDict, total=False):
    """score.Budget's fields (older reports may lack some)."""

    seed: int
    examples: int
    timeout_s: float
    max_steps: int
    shrink_s: float
    restarts: bool
    sizes: bool
    replicas: bool
    grace_s: float


# "break" is a keyword: the functional form
ThresholdsRecord = TypedDict("ThresholdsRecord", {"high": float, "low": float, "break": float | None}, total=False)


class Score(TypedDict):
    """caught / viable, and the percentage (None when nothing is viable)."""

    caught: int
    viable: int
    percent: float | None


class ScoreEntry(Score):
    """One key's score in a dimension (a transition, a file, a class), with its mutants and survivors."""

    mutants: int
    not_caught: list[str]


Scores = dict[str, dict[str, ScoreEntry]]  # dimension -> key -> its score
FlatScores = dict[str, dict[str, Score]]  # the same as the score history keeps it


class Subset(TypedDict):
    """What a run that scored part of the catalogue records, and how the part was chosen."""

    ran: int
    of: int
    only: list[str] | None
    shard: str | None  # "k/n"
    in_diff: str | None
    left_out: list[str]


class ShardPlace(TypedDict):
    index: int
    count: int


class Change(TypedDict):
    """A score's change since the last run (None: no score then, or none now)."""

    before: float | None
    now: float | None
    change: float | None


class LastRun(TypedDict, total=False):
    """What `since` keeps of the last run of the same scope and budget."""

    at: str | None
    commit: str | None
    report: str | None
    verdict: str | None
    passed: bool | None
    thresholds: ThresholdsRecord | None
    scope: str | None


class Since(TypedDict, total=False):
    """outcomes.json's `since`: the score's change and each key's that moved, against `last`."""

    history: str
    last: LastRun | None
    score: Change
    changes: dict[str, dict[str, Change]]


class HistoryEntry(TypedDict, total=False):
    """One line of the score history (mutants-scores.jsonl): a finished run or merge."""

    version: int
    at: str
    commit: str | None
    report: str
    verdict: str | None
    passed: bool | None
    thresholds: ThresholdsRecord | None
    budget: BudgetRecord | None
    scope: str
    subset: dict[str, int] | None
    score: Score | None
    summary: dict[str, int] | None
    scores: FlatScores
    reused: int


class Document(TypedDict, total=False):
    """outcomes.json: the run's (or merge's) verdict, what it ran with, every record, and the scores."""

    verdict: Required[str]
    budget: BudgetRecord | None
    wall_s: float
    jobs: int
    shard: ShardPlace | None
    shards: list[str]
    chosen: list[str]
    subset: Subset | None
    thresholds: ThresholdsRecord | None
    incremental: bool
    catalogue: str | None  # "catalogue" or "generated"
    outcomes: Required[list[Record]]
    summary: dict[str, int]
    score: Score
    scores: Scores
    passed: bool
    since: Since
    known_findings: dict[str, str | list[str]]  # what known-findings.toml made of the survivors (mutants/known.py)


def parse_document(text: str) -> Document:
    """outcomes.json's text as a Document: the one place its JSON becomes typed (not validated: the
    runner wrote it)."""
    return cast(Document, json.loads(text))


def read_document(path: Path) -> Document:
    return parse_document(path.read_text())
