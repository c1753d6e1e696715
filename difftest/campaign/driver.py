"""A campaign: generated histories replayed on server pairs, one pair per worker process.

The budget is a number of histories or a number of seconds. Histories come in batches; batch b
draws from Hypothesis seeded with (seed, b), so a fixed seed and example budget reproduce a run
exactly, however many workers share it. A divergence is shrunk by Hypothesis and the minimal
history saved as an artifact (and kept in Hypothesis's example database, which replays it first
next time), named by its signature (difftest/findings/signature.py). With `stop_at_first` the first
divergence stops the campaign; else the campaign goes on: a finding already met (in this run, or
accepted in the known-findings file) is counted as a meeting and not shrunk again, and the batch a
new finding cut short is run again from its seed, its histories already compared not counted
twice, so that every batch compares its whole size and the budget stays exact.

A shard K/N runs only batches K-1, K-1+N, K-1+2N, ... of the same sequence, so N machines can
split one campaign and `difftest merge` joins their reports (see difftest/report/shards.py). Every
finished batch is recorded (its counts, labels and when it finished): the per-batch records are
what a merge adds up, and their finishing times are the run's time series.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import pickle
import queue as queues
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypedDict

from difftest.base.files import environmental_cause, is_environmental
from difftest.base.problems import SetupProblem
from difftest.campaign.batch import ShrinkBudget, failure_key, last_pass, machine_settings, smallest_failure
from difftest.coverage import labels as coverage
from difftest.findings.entries import Meeting as MeetingFields
from difftest.servers.leftovers import sweep_leftovers

if TYPE_CHECKING:  # the types only: a campaign's process imports them when it starts its servers
    from multiprocessing.queues import Queue
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Event

    from difftest.history.format import History
    from difftest.replay.replayer import Replayer, ReplayResult
    from difftest.servers.group import ServerGroup

BATCH = 40  # histories per Hypothesis run: small enough to stop on time, large enough to amortise
STOP_S = 8.0  # after SIGTERM, how long a worker may take to remove its servers before SIGKILL (docker stop: 10 s)
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class CampaignConfig:
    seed: int
    module: Path
    reports: Path  # this run's directory
    examples: int | None = 400
    seconds: float | None = None
    workers: int = 1
    lua_scripts: Path | None = None
    restarts: bool = True
    # production's size drawn (about one history in twenty: bulk steps of up to thousands of calls,
    # about half of a default campaign's steps); off: a quick run of the other dimensions
    sizes: bool = True
    max_steps: int = 40
    # Hypothesis example database: a directory, or valkey://HOST:PORT[/DB] shared by many machines
    # (difftest/campaign/exampledb.py); a spec, not an open database, so each worker process opens its own
    database: str | Path | None = None  # None: keep none
    pin: bool = True
    backend: str = "local"  # or "docker": each worker's pair as two containers
    shard: tuple[int, int] = (1, 1)  # (K, N): run only the batches b with b % N == K - 1
    # Hypothesis's shrinking is bounded by replays after the first failure (deterministic for a
    # seed), with a time cap only as a guard; then a last pass of step deletion
    shrink_tries: int = 600
    shrink_seconds: float = 300.0
    # a replica beside each server, compared with it after every segment (difftest/replay/replicas.py)
    replicas: bool = False
    # the first batch first replays the class corpus (strategies/corpus.py) as explicit examples
    corpus: bool = True
    # the build under test as recorded in the summary and every artifact (difftest/replay/build.py); None:
    # recorded from `module` and `lua_scripts` when an artifact is saved
    build: dict[str, object] | None = None
    # True: the first divergence stops the campaign (the mutant runner: one kill is enough); False: it
    # goes on past findings, each new signature shrunk once (`difftest run`'s default)
    stop_at_first: bool = True
    # the divergence signatures the known-findings file accepts today (difftest/findings/known.py): met,
    # they are counted, never shrunk or saved, and the batch goes on
    accepted: frozenset[str] = frozenset()


@dataclass
class Failure:
    batch: int
    reason: str
    steps: int
    artifact: str
    # the failing step, both replies and the differing keys, cut short (artifacts.brief): report.html shows them
    detail: dict[str, Any] = field(default_factory=dict)
    # when the machine refused the artifact (a full disk): why, and the shrunk history's JSON lines,
    # which the run then prints so that the divergence is not lost with the file
    unsaved: str = ""
    history: str = ""
    signature: str = ""  # the minimal history's (difftest/findings/signature.py): what tells findings apart
    described: str = ""  # its parts in one line, for people


@dataclass
class Meeting:
    """How often a campaign met one finding (its first meeting included), and when first and last."""

    count: int = 0
    first_at: float = 0.0  # time.time()
    last_at: float = 0.0
    first_batch: int = -1
    last_batch: int = -1

    def fields(self) -> MeetingFields:
        """The meeting as a summary's finding holds it."""
        return {"count": self.count, "first_at": self.first_at, "last_at": self.last_at,
                "first_batch": self.first_batch, "last_batch": self.last_batch}  # fmt: skip

    def met(self, batch: int, at: float) -> None:
        if self.count == 0:
            self.first_at, self.first_batch = at, batch
        self.count += 1
        self.last_at, self.last_batch = at, batch


class ProgressPoint(TypedDict):
    """After a finished batch: the seconds since the start, and the batches, histories and steps so far."""

    t_s: float
    batches: int
    histories: int
    steps: int


@dataclass
class BatchRecord:
    """One finished batch: what it compared and reached (shrinking replays not counted)."""

    batch: int
    worker: int
    histories: int
    steps: int
    labels: Counter[str]
    finished_at: float  # time.time() when it finished: comparable across the worker processes
    diverged: bool


@dataclass
class WorkerReport:
    worker: int
    histories: int = 0
    steps: int = 0
    batches: list[int] = field(default_factory=list)
    labels: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)  # each new finding this worker shrunk and saved
    meetings: dict[str, Meeting] = field(default_factory=dict)  # by finding signature: every meeting counted
    # every signature this worker met (raw or shrunk, and the accepted ones) -> the finding's signature
    names: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    replay_s: float = 0.0
    records: list[BatchRecord] = field(default_factory=list)
    interrupted_by: int = 0  # the signal that stopped it (SIGINT or SIGTERM); 0: it ran to its end

    def keep_whole_batches(self) -> None:
        """Forget the batch in flight: the counts become those of the finished batches (what a
        merge of shards adds up), and a failure without its batch record goes too."""
        self.histories = sum(r.histories for r in self.records)
        self.steps = sum(r.steps for r in self.records)
        self.labels = coverage.merge(r.labels for r in self.records)
        self.batches = [r.batch for r in self.records]
        finished = {r.batch for r in self.records}
        self.failures = [failure for failure in self.failures if failure.batch in finished]
        kept = {failure.signature for failure in self.failures}
        self.meetings = {name: meeting for name, meeting in self.meetings.items()
                         if meeting.first_batch in finished or name in kept}  # fmt: skip


@dataclass
class CampaignResult:
    config: CampaignConfig
    reports: list[WorkerReport]
    elapsed_s: float
    interrupted: bool = False
    started_at: float = 0.0  # time.time() when the campaign started
    interrupted_by: int = 0  # SIGINT or SIGTERM when interrupted (the command exits 128 + it)

    @property
    def records(self) -> list[BatchRecord]:
        """Every finished batch, in the order they finished."""
        return sorted((r for w in self.reports for r in w.records), key=lambda r: (r.finished_at, r.batch))

    @property
    def progress(self) -> list[ProgressPoint]:
        """The time series: after each finished batch, the time since the start and the cumulative
        batches, histories and steps (what the report's steps/s chart draws)."""
        points: list[ProgressPoint] = []
        histories = steps = 0
        for number, record in enumerate(self.records, start=1):
            histories += record.histories
            steps += record.steps
            t_s = round(max(0.0, record.finished_at - self.started_at), 3)
            points.append({"t_s": t_s, "batches": number, "histories": histories, "steps": steps})
        return points

    @property
    def histories(self) -> int:
        return sum(r.histories for r in self.reports)

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.reports)

    @property
    def labels(self) -> Counter[str]:
        return coverage.merge(r.labels for r in self.reports)

    @property
    def failures(self) -> list[Failure]:
        """Every saved finding, by batch (two workers may each have saved one of the same signature)."""
        return sorted((f for r in self.reports for f in r.failures), key=lambda f: (f.batch, f.signature))

    @property
    def meetings(self) -> dict[str, MeetingFields]:
        """Every finding met, by signature, summed over the workers."""
        from difftest.findings.tally import add_meetings

        summed: dict[str, MeetingFields] = {}
        for report in self.reports:
            add_meetings(summed, {name: meeting.fields() for name, meeting in report.meetings.items()})
        return summed


@dataclass(frozen=True)
class Progress:
    """What a running campaign has done so far, summed over its workers: what a progress display shows."""

    histories: int
    steps: int
    failures: int
    elapsed_s: float


# Called in the main process as batches finish (and, with several workers, every PROGRESS_POLL_S
# too, so a time budget's clock moves); it only reads counts, so no verdict or seeded history
# depends on it. The campaign stays free of terminal code: the display is the caller's.
ProgressHook = Callable[[Progress], None]
PROGRESS_POLL_S = 0.5


class _Tally:
    """The workers' latest counts (each worker reports its cumulative totals), summed for the hook."""

    def __init__(self, hook: ProgressHook, started: float) -> None:
        self.hook = hook
        self.started = started
        self.latest: dict[int, tuple[int, int, bool]] = {}

    def update(self, worker: int, histories: int, steps: int, failed: bool) -> None:
        # a worker's counts only grow, and its queued reports may arrive after its final one
        old = self.latest.get(worker, (0, 0, False))
        self.latest[worker] = (max(old[0], histories), max(old[1], steps), old[2] or failed)

    def take(self, report: WorkerReport) -> None:
        self.update(report.worker, report.histories, report.steps, bool(report.failures))
        self.emit()

    def emit(self) -> None:
        counts = list(self.latest.values())
        self.hook(Progress(sum(c[0] for c in counts), sum(c[1] for c in counts), sum(1 for c in counts if c[2]),
                           time.perf_counter() - self.started))  # fmt: skip


_stop: Event | None = None  # in a worker process: an event the main process sets when another worker diverged
_parent = 0  # in a worker process: the runner's pid (a worker whose runner is gone stops)
# in a worker process: the next position of the shard's batches no worker has taken yet (shared)
_dealer: Synchronized[int] | None = None
_signalled = 0  # the SIGINT or SIGTERM that is stopping this worker (0: none)


def batch_seed(seed: int, batch: int) -> int:
    digest = hashlib.sha256(f"{seed}:{batch}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def shard_batch(shard: tuple[int, int], position: int) -> int:
    """The batch index of the shard's `position`-th batch (K/N owns K-1, K-1+N, ...)."""
    index, count = shard
    return index - 1 + position * count


def batch_sizes(config: CampaignConfig) -> list[int] | None:
    """The size of every batch under an example budget; None under a time budget (open-ended)."""
    if config.examples is None:
        return None
    full, rest = divmod(config.examples, BATCH)
    return [BATCH] * full + ([rest] if rest else [])


class _Diverged(AssertionError):
    pass


class _HarnessLost(BaseException):
    """Carries a harness failure (ReferenceLost: the Lua server gone) out through Hypothesis, which
    would take an Exception for a failing history, shrink it and replay on (a BaseException that is
    not an Exception it lets through); `_run_batch` raises the failure itself again."""

    def __init__(self, problem: Exception) -> None:
        super().__init__(str(problem))
        self.problem = problem


class _BatchFull(KeyboardInterrupt):
    """Raised when a batch run again after a new finding has compared its whole size: it stops
    Hypothesis at once (an interrupt, as _ShrinkSpent, and for the same reasons)."""


class _ShrinkSpent(KeyboardInterrupt):
    """Raised once the shrink budget is spent, and caught by `_run_batch` at once: Hypothesis lets an
    interrupt through and stops there (its target phase would otherwise hill-climb on, replaying, long
    after a failure), and, unlike any other BaseException, does not save the input under way (a
    passing one) to the example database."""


MAX_FINDINGS_A_BATCH = 8  # new findings one batch may shrink; past them the batch ends (told in the docs)
RERUN_ROOM = 10  # a batch run again may call its test up to this many times its size


def _run_batch(config: CampaignConfig, replayer: Replayer, batch: int, size: int, report: WorkerReport) -> bool:
    """One seeded Hypothesis run of `size` histories; False when it found a new divergence. Going on
    past findings, a batch a new finding stopped is run again from its seed until it has compared
    `size` histories (those already compared replayed by no one and not counted twice)."""
    from difftest.campaign.exampledb import open_database
    from strategies.machine import run_machine
    from strategies.shape import HistoryShape

    # calls to a replica need replicas, which run beside embedded servers and containers (not an attached pair)
    shape = HistoryShape(max_steps=config.max_steps, restarts=config.restarts, crashes=config.restarts,
                         replica_calls=config.backend in ("local", "docker"), sizes=config.sizes)  # fmt: skip
    seen = _BatchSeen(size)
    found = 0
    attempt = -1
    # each run counts at least one history it had not compared (the failure that stopped it), so the
    # runs end: at the batch's size (_BatchFull), at Hypothesis's own end, or past the new findings' cap
    while found <= MAX_FINDINGS_A_BATCH:
        attempt += 1
        replays = _Replays(config, replayer, report, batch, seen, rerun=attempt > 0)
        # a run again meets some of the histories compared before (skipped, yet Hypothesis counts them)
        # and some new ones (what it generates follows its settings and what it was told): room for
        # many, and _BatchFull ends it when the batch has compared `size`
        examples = size if attempt == 0 else RERUN_ROOM * size
        # Hypothesis's reuse phase (the example database's stored failures first) in a batch's first run
        # only: in a run again it would replay a failure that now passes, and delete it from the database
        database = open_database(config.database) if config.database else None
        batch_settings = machine_settings(examples, config.max_steps, database, reuse=attempt == 0)
        try:
            if batch == 0 and config.corpus:
                # the class corpus first: every class label is met whatever the seed (strategies/corpus.py)
                from strategies.corpus import class_corpus

                for directed in class_corpus(shape.replica_calls, shape.sizes):
                    replays(directed, in_test=False)
            run_machine(shape, replays, batch_settings, seed=batch_seed(config.seed, batch))
        except _HarnessLost as lost:
            raise lost.problem from None  # the run stops: exit 70 (the reference is never started again)
        except _BatchFull:
            return not found
        except (_Diverged, _ShrinkSpent):
            found += _record_new(config, replayer, batch, report, replays, smallest_failure(replays.known))
            if found and config.stop_at_first:
                return False
            continue
        return not found
    return False


def _record_new(config: CampaignConfig, replayer: Replayer, batch: int, report: WorkerReport, replays: _Replays,
                smallest: ReplayResult) -> bool:  # fmt: skip
    """The shrunk failure saved as a finding, or counted as a meeting when its signature was met or
    accepted already (a failure whose raw signature this worker met in another batch is not shrunk
    again); its raw and shrunk signatures pass for the rest of the batch. True when it was new."""
    from difftest.findings.signature import describe, parts, signature

    raw = replays.raw[0] if replays.raw else ""
    if raw in report.names:
        minimal, name = smallest, report.names[raw]
    else:
        minimal = last_pass(replayer, smallest, config.shrink_seconds)
        name = signature(minimal)
        name = report.names.get(name, name)
    for met in (raw, name):
        if met:
            report.names[met] = replays.seen.names[met] = name
    new = name not in report.meetings and name not in config.accepted
    report.meetings.setdefault(name, Meeting()).met(batch, time.time())
    if new:
        earlier = sum(1 for saved in report.failures if saved.batch == batch)  # a batch may find several
        failure = _save_failure(config, batch, minimal, f"batch-{batch}" + (f"-{earlier + 1}" if earlier else ""))
        failure.signature, failure.described = name, describe(parts(minimal))
        report.failures.append(failure)
    return new


class _BatchSeen:
    """What one batch has compared across its runs: the digests of its histories, and how many."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.digests: set[bytes] = set()
        self.histories = 0
        # the signatures met in this batch (raw and shrunk) -> the finding's: they pass for the rest of
        # it. Batch-local, so that a batch's histories never depend on which worker ran the batches before
        self.names: dict[str, str] = {}


class _Replays:
    """A batch's test as Hypothesis runs it: each history replayed, counted and fed to Hypothesis's
    events and target; a failure whose signature was met before counted as a meeting and passed;
    after the first new failure, the shrink's replays, within its budget."""

    def __init__(self, config: CampaignConfig, replayer: Replayer, report: WorkerReport, batch: int,
                 seen: _BatchSeen, rerun: bool = False) -> None:  # fmt: skip
        self.config, self.replayer, self.report, self.batch, self.seen = config, replayer, report, batch, seen
        self.rerun = rerun  # run again after a new finding: it ends when the batch has compared its size
        self.known: dict[str, ReplayResult] = {}  # each failing history's replay, by its repr, in the order found
        self.raw: list[str] = []  # the signature of the first new failure (before shrinking)
        self.shrink = ShrinkBudget(config.shrink_tries, config.shrink_seconds)  # started at the first failure

    def __call__(self, history: History, in_test: bool = True) -> None:
        # Hypothesis replays a failure to confirm it (and at the end): the recorded verdict answers, so
        # it never sees a failure "pass" whatever the shrink budget did meanwhile; and every failure is
        # raised from one line, as Hypothesis tells failures apart by where they were raised
        _check_stopping()
        key = failure_key(history)
        result = self.known.get(key)
        if result is None:
            if self.known:
                if not self.shrink.take():
                    # the shrink budget is spent (the tries, or the time guard): stop Hypothesis at
                    # once, hill-climbing and shrinking alike; the smallest failure so far is the result
                    raise _ShrinkSpent
            else:
                digest = hashlib.sha1(key.encode(), usedforsecurity=False).digest()
                if self.rerun:
                    if digest in self.seen.digests:
                        return  # compared (and counted) by this batch's run before a finding cut it short
                    if self.seen.histories >= self.seen.size:
                        raise _BatchFull  # a batch run again has compared its whole size
                self.seen.digests.add(digest)
            result = self._replayed(history, in_test)
            if result.divergence is not None:
                if self._met_before(result):
                    return
                first = not self.known
                self.known[key] = result
                if first:
                    self.shrink.start()
                    if self.raw and self.raw[0] in self.report.names:
                        raise _ShrinkSpent  # met by this worker in another batch: not shrunk again
        if result.divergence is not None:
            raise _Diverged(result.divergence.reason)

    def _met_before(self, result: ReplayResult) -> bool:
        """A failure of a finding met before (or accepted): counted as a meeting unless shrinking,
        and passed, so that neither the batch nor the shrink of another finding stops at it."""
        from difftest.findings.signature import signature

        raw = signature(result)
        name = self.seen.names.get(raw) or (raw if raw in self.config.accepted else None)
        if name is None:
            if not self.known:
                self.raw = [raw]
            return False
        if not self.known:
            self.report.meetings.setdefault(name, Meeting()).met(self.batch, time.time())
        return True

    def _replayed(self, history: History, in_test: bool) -> ReplayResult:
        from hypothesis import event, target

        from difftest.replay.replayer import ReferenceLost
        from strategies.corpus import CORPUS_NOTE

        started = time.perf_counter()
        try:
            result = self.replayer.replay(history)
        except ReferenceLost as lost:
            raise _HarnessLost(lost) from lost
        report = self.report
        report.replay_s += time.perf_counter() - started
        reached = coverage.labels(result)
        if not self.known:  # shrinking replays do not count as coverage
            # the class corpus adds to steps and coverage; the budget counts generated histories
            generated = not history.note.startswith(CORPUS_NOTE)
            report.histories += int(generated)
            self.seen.histories += int(generated)
            report.steps += len(history.steps)
            report.labels.update(reached)
        if in_test:  # Hypothesis's statistics and its target phase (the corpus runs before it)
            for label in reached:
                event(label)
            target(float(sum(1 for label in reached if label.startswith(("contract:", "sweep:")))), label="rare")
        return result


def _save_failure(config: CampaignConfig, batch: int, minimal: ReplayResult, name: str) -> Failure:
    """The minimal failing history saved as the batch's artifact; when the machine refuses the file,
    the failure keeps the history, to be printed."""
    from difftest.replay.artifacts import brief, save_divergence

    divergence = minimal.divergence
    assert divergence is not None  # the failures kept are failing replays only, and so is the last pass
    directory = config.reports / "failures" / name
    failure = Failure(batch, divergence.reason, len(minimal.history.steps), str(directory), brief(divergence))
    found_on = config.build or _build_of(config)
    try:
        save_divergence(minimal, directory, found_on)
    except OSError as problem:
        if not is_environmental(problem):
            raise
        # the divergence outlives its file: the run prints the history and exits on the divergence
        from difftest.history.format import dumps
        from difftest.replay.build import BUILD_FIELD

        failure.unsaved = f"{environmental_cause(problem)} ({problem.strerror})"
        failure.history = dumps(minimal.history, {BUILD_FIELD: found_on})  # replay runs on that build
    return failure


def _build_of(config: CampaignConfig) -> dict[str, object]:
    """The build record of a campaign started without one (the mutant runner, the tests)."""
    from difftest.replay import build
    from difftest.servers import valkeys

    return build.record(config.module, config.lua_scripts, True, valkeys.version_in_use(),
                        bool(os.environ.get(valkeys.ENVIRONMENT)))  # fmt: skip


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken like Ctrl-C: what `timeout`, `docker stop` and a CI step's time limit send."""


def _interrupt_once(signum: int, _: object) -> None:
    """A worker's SIGINT and SIGTERM: the first unwinds it (its servers and files removed on the
    way out); any later one is ignored, so that it cannot cut that removal short."""
    global _signalled
    _signalled = signum
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, _ignore)  # not SIG_IGN: a signal already pending would print a warning
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _check_stopping() -> None:
    """Between histories and batches: raise again a signal's interrupt that something swallowed (a
    finaliser it landed in), and stop a worker whose runner is gone even if no signal said so."""
    global _signalled
    if not _signalled and _parent and os.getppid() != _parent:
        _signalled = signal.SIGTERM
    if _signalled:
        raise Terminated if _signalled == signal.SIGTERM else KeyboardInterrupt


def _ignore(*_: object) -> None:
    pass


def _unraisable(previous: Callable[[sys.UnraisableHookArgs], object]) -> Callable[[sys.UnraisableHookArgs], None]:
    """sys.unraisablehook for a campaign: an interrupt that landed in a callback Python cannot raise
    from (Hypothesis's gc callback, a finaliser) is not printed as "Exception ignored in ...": the
    signal is remembered (`_signalled`, or the runner's own handler) and raised again between
    histories. Everything else goes to the hook as before."""

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            return
        previous(unraisable)

    return hook


@contextlib.contextmanager
def quiet_swallowed_interrupts() -> Iterator[None]:
    """For the block, interrupts that land where Python cannot raise them print nothing (see _unraisable)."""
    previous = sys.unraisablehook
    sys.unraisablehook = _unraisable(previous)
    try:
        yield
    finally:
        sys.unraisablehook = previous


@contextlib.contextmanager
def _signals(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """SIGINT and SIGTERM go to `handler` for the block (in the main thread; elsewhere unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before)


def _worker(config: CampaignConfig, worker: int, notify: Callable[[WorkerReport], None] | None = None) -> WorkerReport:
    """One worker in this process (a one-worker campaign): Ctrl-C or SIGTERM ends it with its whole
    batches reported and its servers and files removed."""
    global _signalled
    _signalled = 0
    try:
        with _signals(_interrupt_once), quiet_swallowed_interrupts():
            return _work(config, worker, notify)
    finally:
        _signalled = 0


def _work(config: CampaignConfig, worker: int, notify: Callable[[WorkerReport], None] | None = None,
          on_root: Callable[[Path], None] | None = None) -> WorkerReport:  # fmt: skip
    """Its own server pair (pinned with it to one core), batches worker, worker+n, ...; interrupted
    (KeyboardInterrupt), it returns the batches it finished, the one in flight dropped."""
    from difftest.replay.replayer import Replayer
    from difftest.servers.group import ServerGroup
    from difftest.servers.local import pin_to_core

    if config.pin:
        pin_to_core(worker)
    report = WorkerReport(worker)
    started = time.perf_counter()
    sizes = batch_sizes(config)
    deadline = None if config.seconds is None else time.monotonic() + config.seconds
    group: ServerGroup | None = None
    try:
        try:
            group = ServerGroup(backend=config.backend)  # (its directory names this worker as its owner)
            if on_root is not None:
                on_root(group.root)
            with Replayer(config.module, group=group, lua_scripts=config.lua_scripts,
                          replicas=config.replicas) as replayer:  # fmt: skip
                _batches(config, worker, replayer, report, sizes, deadline, notify)
        finally:
            if group is not None:
                group.close()
    except KeyboardInterrupt as interrupt:
        if group is not None:
            group.close()  # again: the signal may have cut the first removal short (later ones are ignored)
        report.interrupted_by = _signalled or (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)
        report.keep_whole_batches()
    report.elapsed_s = time.perf_counter() - started
    return report


def _batches(config: CampaignConfig, worker: int, replayer: Replayer, report: WorkerReport, sizes: list[int] | None,
             deadline: float | None, notify: Callable[[WorkerReport], None] | None) -> None:  # fmt: skip
    # Several workers take the shard's positions one at a time, each the next one no worker has taken
    # (so none waits idle at the end while another still has batches of its share); one worker alone
    # takes them all in order. Which worker runs a batch never changes its histories.
    position = _next_position(worker)
    while True:
        batch = shard_batch(config.shard, position)
        if sizes is not None and batch >= len(sizes):
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
        _check_stopping()
        if _stop is not None and _stop.is_set():
            break  # another worker diverged: this one stops between batches, its report whole
        size = sizes[batch] if sizes is not None else BATCH
        report.batches.append(batch)
        before = (report.histories, report.steps, Counter(report.labels))
        agreed = _run_batch(config, replayer, batch, size, report)
        report.records.append(BatchRecord(batch, worker, report.histories - before[0], report.steps - before[1],
                                          report.labels - before[2], time.time(), not agreed))  # fmt: skip
        if notify is not None:
            notify(report)
        if not agreed and config.stop_at_first:
            break
        position = _next_position(position + config.workers)


def _next_position(otherwise: int) -> int:
    if _dealer is None:
        return otherwise
    with _dealer.get_lock():
        position = int(_dealer.value)
        _dealer.value = position + 1
    return position


# ---- workers in processes of their own -------------------------------------------------------------


def bind_to_parent(parent: int) -> bool:
    """A worker dies with the runner: SIGTERM when it ends, even by SIGKILL (and the worker's servers
    die with the worker). False if the runner is already gone."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    return os.getppid() == parent


def _portable(error: BaseException) -> BaseException:
    """The worker's exception as the main process can receive it, with the worker's traceback."""
    text = "".join(traceback.format_exception(error))
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"a worker failed:\n{text}")
    if not isinstance(error, SetupProblem):
        error.add_note(f"in the worker:\n{text}")
    return error


def _worker_process(config: CampaignConfig, worker: int, messages: Queue[tuple[Any, ...]], stop: Event, parent: int,
                    dealer: Synchronized[int] | None = None) -> None:  # fmt: skip
    """A worker process's whole life: its reports go to `messages` (each finished batch, then the
    whole report, or its error); SIGINT and SIGTERM (also the runner's death) end it cleanly."""
    global _stop, _parent, _dealer
    with _signals(_interrupt_once), quiet_swallowed_interrupts():
        if not bind_to_parent(parent):
            return
        _stop, _parent, _dealer = stop, parent, dealer

        def batch_done(report: WorkerReport) -> None:
            record = report.records[-1]
            messages.put(("batch", worker, report.histories, report.steps, bool(report.failures), record))

        try:
            report = _work(config, worker, batch_done, lambda root: messages.put(("root", worker, str(root))))
        except KeyboardInterrupt:
            pass  # outside the batches: the runner has the finished ones already
        except BaseException as error:
            messages.put(("error", worker, _portable(error)))
        else:
            messages.put(("done", worker, report))
        if os.getppid() != parent:
            messages.cancel_join_thread()  # no one reads any more: exit without waiting to send


class _Workers:
    """The main process's side: the worker processes, what they sent, and how they are stopped."""

    def __init__(self, config: CampaignConfig, tally: _Tally | None) -> None:
        self.config = config
        self.tally = tally
        context = get_context("spawn")
        self.context = context
        self.messages = context.Queue()  # ("root" | "batch" | "done" | "error", worker, ...)
        self.stop = context.Event()  # set at the first divergence: the others stop at their next batch
        self.dealer = context.Value("q", 0)  # the next position of the shard's batches to take
        self.processes: dict[int, BaseProcess] = {}
        self.roots: dict[int, str] = {}
        self.records: dict[int, list[BatchRecord]] = {}
        self.finals: dict[int, WorkerReport] = {}
        self.errors: list[BaseException] = []

    def start(self) -> None:
        for worker in range(self.config.workers):
            args = (self.config, worker, self.messages, self.stop, os.getpid(), self.dealer)
            process = self.context.Process(target=_worker_process, name=f"difftest-worker-{worker}", args=args)
            process.start()
            self.processes[worker] = process

    def take(self, message: tuple[Any, ...]) -> None:
        kind, worker = message[0], message[1]
        if kind == "root":
            self.roots[worker] = message[2]
        elif kind == "batch":
            self.records.setdefault(worker, []).append(message[5])
            if self.tally is not None:
                self.tally.update(worker, *message[2:5])
        elif kind == "done":
            report: WorkerReport = message[2]
            self.finals[worker] = report
            if self.tally is not None:
                self.tally.take(report)
            if report.failures and self.config.stop_at_first:
                # the first divergence stops the campaign: asked, not killed, so the others' reports stay whole
                self.stop.set()
        elif kind == "error":
            self.errors.append(message[2])

    def receive(self, timeout: float) -> None:
        """Everything sent so far, waiting up to `timeout` for the first message."""
        try:
            self.take(self.messages.get(timeout=timeout))
            while True:
                self.take(self.messages.get_nowait())
        except queues.Empty:
            pass

    def unreported(self) -> list[int]:
        return [w for w in self.processes if w not in self.finals]

    def check_ended(self) -> None:
        """A worker that ended without a word (killed, say) is an error of the campaign."""
        for worker in self.unreported():
            process = self.processes[worker]
            if process.exitcode is not None:
                self.receive(0.0)  # what it sent before it ended
                if worker not in self.finals and not self.errors:
                    self.errors.append(RuntimeError(f"worker {worker} ended without a report (exit code "
                                                    f"{process.exitcode}): see its output above"))  # fmt: skip

    def wind_down(self, terminate: bool) -> None:
        """Every worker ended (SIGTERM first when `terminate`, SIGKILL after STOP_S), everything it
        sent received, and what a killed one left removed."""
        if terminate:
            for process in self.processes.values():
                if process.exitcode is None and process.pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        while any(p.exitcode is None for p in self.processes.values()) and time.monotonic() < deadline:
            self.receive(0.05)  # a worker may wait for room in the pipe before it can end
        killed = [w for w, p in self.processes.items() if p.exitcode is None]
        for worker in killed:
            self.processes[worker].kill()
        for process in self.processes.values():
            process.join()
        self.receive(0.0)
        for worker in killed:  # its servers died with it (PR_SET_PDEATHSIG); their files did not go
            if worker in self.roots:
                shutil.rmtree(self.roots[worker], ignore_errors=True)
        if killed:
            sweep_leftovers()
        self.messages.close()
        self.messages.join_thread()

    def reports(self) -> list[WorkerReport]:
        """Each worker's report; for one that never sent it, its finished batches."""
        out = []
        for worker in sorted(self.processes):
            if worker in self.finals:
                out.append(self.finals[worker])
                continue
            report = WorkerReport(worker, records=list(self.records.get(worker, [])))
            report.keep_whole_batches()
            report.interrupted_by = signal.SIGTERM
            out.append(report)
        return out


def run_campaign(config: CampaignConfig, on_progress: ProgressHook | None = None) -> CampaignResult:
    """Run the campaign; `on_progress` (optional) is told the running totals as batches finish.

    Ctrl-C or SIGTERM ends it early: the result is interrupted and holds every batch finished so
    far; every worker has removed its servers and files by then."""
    from difftest.campaign.exampledb import check_database

    started = time.perf_counter()
    started_at = time.time()
    if config.database:
        check_database(config.database)  # one line now, rather than a traceback from every worker
    config.reports.mkdir(parents=True, exist_ok=True)
    sweep_leftovers()  # what killed campaigns before this one left in /dev/shm
    tally = _Tally(on_progress, started) if on_progress is not None else None
    if config.workers <= 1:
        report = _worker(config, 0, tally.take if tally is not None else None)
        return CampaignResult(config, [report], time.perf_counter() - started, bool(report.interrupted_by),
                              started_at, report.interrupted_by)  # fmt: skip
    workers = _Workers(config, tally)
    signalled: list[int] = []  # SIGINT or SIGTERM to this process: noted, and the loop winds down

    def note(signum: int, _: object) -> None:
        signalled.append(signum)

    with _signals(note), quiet_swallowed_interrupts():
        try:
            workers.start()
            while workers.unreported() and not signalled and not workers.errors:
                workers.receive(PROGRESS_POLL_S)
                if tally is not None:
                    tally.emit()
                workers.check_ended()
        finally:
            workers.wind_down(terminate=bool(workers.unreported()))
    if workers.errors and not signalled:
        raise workers.errors[0]
    reports = workers.reports()
    interrupted_by = signalled[0] if signalled else max((r.interrupted_by for r in reports), default=0)
    return CampaignResult(config, reports, time.perf_counter() - started, bool(interrupted_by), started_at,
                          interrupted_by)  # fmt: skip


def _raise_terminated(*_: object) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises Terminated (a KeyboardInterrupt) for the block, so that it unwinds like
    Ctrl-C: servers stopped, files removed, the report so far written (in the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
