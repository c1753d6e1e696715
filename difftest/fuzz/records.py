"""The fuzzing store's records as plain data: a worker's record, a time point, the coverage, a finding, a snapshot."""

from __future__ import annotations

from typing import Required, TypedDict


class WorkerRecord(TypedDict, total=False):
    """What a worker does now and its counts (store.py's `workers` hash); the status adds `age_s` and `alive`."""

    host: str
    pid: int
    service: str
    slot: int
    state: str
    histories: int
    steps: int
    findings: int
    met_again: int
    met_known: int
    started: float  # time.time()
    seed: int  # its batch's seed
    seq: int  # the record's sequence number (a store that lost writes answers an older one)
    kept: int  # writes waiting for the store
    beat: float  # time.time() of the write
    age_s: float
    alive: bool


class SeriesPoint(TypedDict):
    """A time point of the totals and the coverage (what the dashboard charts)."""

    t: float
    service: str
    histories: int
    steps: int
    labels: int
    native: int
    lua: int
    findings: int
    workers: int


class StoreCoverage(TypedDict):
    labels: dict[str, int]  # each behaviour label's count
    labels_first: dict[str, float]  # when each was first reached
    native: int  # native counters reached
    lua: int  # Lua lines run
    native_total: int  # the module's counters (0: not told)


class Finding(TypedDict, total=False):
    """A finding as the store holds it (its `finding:<signature>` hash), and what the status adds."""

    signature: Required[str]
    claimed_by: str
    parts: list[str]
    described: str
    reason: str
    step: int
    steps: int
    found_at: float
    found_by: str
    host: str
    seen: int
    found_after: int
    history: str
    report_txt: str
    report: dict[str, object]  # the artifact's report.json
    artifact: str
    build: dict[str, object]  # the build it was found on (difftest/replay/build.py)
    reproduce: str
    local_artifact: str  # the status's: the artifact on this machine, and its replay line
    reproduce_here: str


class Pending(TypedDict):
    """A failing history kept before its shrink starts (or a dead worker's, for another to take)."""

    history: str
    build: dict[str, object]
    worker: str
    at: float


class CorpusEntry(TypedDict, total=False):
    """A history that reached something new: what it reached, when and by which worker."""

    history: Required[str]
    reached: dict[str, list[str] | int]  # labels reached first, and how many native counters and Lua lines
    at: float
    by: str


class Snapshot(TypedDict, total=False):
    """Everything in the store at once (the dashboard's and `difftest fuzz status`'s document)."""

    format: Required[str]
    database: Required[str]
    at: Required[float]
    totals: Required[dict[str, int]]
    workers: Required[dict[str, WorkerRecord]]
    series: Required[list[SeriesPoint]]
    coverage: Required[StoreCoverage]
    findings: Required[list[Finding]]
    corpus: Required[int]
    pending: Required[int]
    histories_per_min: float  # the status's: over the last minute
