"""The shape of summary.json: a run's (or a merge's) summary document and its batch, budget and shard entries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Required, TypedDict, cast

if TYPE_CHECKING:  # the shapes only: reading a summary (the nightly's, `difftest report`) starts no campaign code
    from difftest.campaign.driver import ProgressPoint
    from difftest.findings.entries import Divergence, Finding, Nights


class Budget(TypedDict, total=False):
    examples: int | None
    seconds: float | None


class ShardField(TypedDict):
    """`--shard K/N`'s K and N."""

    index: int
    count: int


class BatchEntry(TypedDict, total=False):
    """One finished batch: what it compared and reached, and when it finished since the run's start."""

    batch: Required[int]
    worker: int  # absent in summaries older than the speed chart's per-worker spans
    histories: Required[int]
    steps: Required[int]
    diverged: bool
    finished_s: float
    labels: dict[str, int]


class ModelShare(TypedDict, total=False):
    """The steps the spec's model judged, of all it was shown, and the others by kind (labels.model_share)."""

    steps: int
    judged_steps: int
    unjudged: dict[str, int]


class Summary(TypedDict, total=False):
    """summary.json. A run writes every key but the merge's own (`shards`) and the command line's
    (`program`, `reproduce`, the code coverage, `findings_history`); summaries of older runs lack
    some, which every reader takes with .get()."""

    verdict: str  # one of reports.VERDICTS; the oldest summaries have none (html.verdict_of derives it)
    seed: Required[int]
    budget: Required[Budget]
    shard: ShardField | None
    shards: list[str]  # a merge's: its shards' run directories
    # null in a merge of summaries older than the key
    restarts: bool | None
    sizes: bool | None
    replicas: bool | None
    max_steps: int | None
    workers: int
    database: str | None
    module: str | None
    lua_scripts: str | None
    valkey: str | None
    valkey_requested: bool
    # the build under test (difftest/replay/build.py's record)
    module_sha256: str | None
    module_given: bool
    lua_scripts_dir: str | None
    lua_scripts_sha256: str | None
    histories: Required[int]
    steps: Required[int]
    elapsed_s: float
    compared_steps_per_s: float
    interrupted: bool
    divergences: Required[list[Divergence]]
    findings: list[Finding]
    known_findings: str | None
    known_findings_default: bool
    stop_at_first: bool
    coverage: dict[str, int]  # every required label's count
    coverage_missing: list[str]
    also_reached: dict[str, int]
    model: ModelShare
    host: str | None
    progress: list[ProgressPoint]
    batches: list[BatchEntry]
    program: list[str]  # how the printed commands start
    reproduce: str
    # the code coverage sections (difftest/instrument), in their own modules' shapes
    native_coverage: dict[str, object]
    lua_coverage: dict[str, object]
    findings_history: dict[str, Nights]


def ordered(document: Summary, first: Sequence[str]) -> Summary:
    """The document with the keys `first` first, in that order, then the others as they came: a
    summary.json reads in the order its writer has always written it."""
    fields: dict[str, object] = dict(document)
    leading = {key: fields.pop(key) for key in first if key in fields}
    return cast(Summary, {**leading, **fields})  # the document's own keys, reordered


def parsed(document: Mapping[str, object]) -> Summary:
    """A summary.json read from disk, as a Summary: its shape is trusted here, once (a malformed one
    raises where a field is used, which the command line reports as one line)."""
    return cast(Summary, document)


# what replay.build.build_flags reads of a build record: the options that put a command on the summary's build
_BUILD_KEYS = ("module", "module_given", "lua_scripts", "valkey", "valkey_requested")


def build_fields(summary: Summary) -> dict[str, object]:
    """The summary's build fields, as a build record (difftest/replay/build.py) holds them."""
    fields: Mapping[str, object] = summary
    return {key: fields[key] for key in _BUILD_KEYS if key in fields}
