"""A campaign: generated histories replayed on server pairs, one pair per worker process.

The budget is a number of histories or a number of seconds. Histories come in batches; batch b
draws from Hypothesis seeded with (seed, b), so a fixed seed and example budget reproduce a run
exactly, however many workers share it. The first divergence stops the campaign; Hypothesis
shrinks it first, and the minimal history is saved as an artifact (and kept in Hypothesis's
example database, which replays it first next time).

A shard K/N runs only batches K-1, K-1+N, K-1+2N, ... of the same sequence, so N machines can
split one campaign and `difftest merge` joins their reports (see difftest/shards.py). Every
finished batch is recorded (its counts, labels and when it finished): the per-batch records are
what a merge adds up, and their finishing times are the run's time series.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from difftest import coverage

BATCH = 40  # histories per Hypothesis run: small enough to stop on time, large enough to amortise


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
    max_steps: int = 40
    # Hypothesis example database: a directory, or valkey://HOST:PORT[/DB] shared by many machines
    # (difftest/exampledb.py); a spec, not an open database, so each worker process opens its own
    database: str | Path | None = None  # None: keep none
    pin: bool = True
    backend: str = "local"  # or "docker": each worker's pair as two containers
    shard: tuple[int, int] = (1, 1)  # (K, N): run only the batches b with b % N == K - 1
    # Hypothesis's shrinking is bounded by replays after the first failure (deterministic for a
    # seed), with a time cap only as a guard; then a last pass of step deletion
    shrink_tries: int = 600
    shrink_seconds: float = 300.0


@dataclass
class Failure:
    batch: int
    reason: str
    steps: int
    artifact: str


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
    failure: Failure | None = None
    elapsed_s: float = 0.0
    replay_s: float = 0.0
    records: list[BatchRecord] = field(default_factory=list)


@dataclass
class CampaignResult:
    config: CampaignConfig
    reports: list[WorkerReport]
    elapsed_s: float
    interrupted: bool = False
    started_at: float = 0.0  # time.time() when the campaign started

    @property
    def records(self) -> list[BatchRecord]:
        """Every finished batch, in the order they finished."""
        return sorted((r for w in self.reports for r in w.records), key=lambda r: (r.finished_at, r.batch))

    @property
    def progress(self) -> list[dict[str, float]]:
        """The time series: after each finished batch, the time since the start and the cumulative
        batches, histories and steps (what the report's steps/s chart draws)."""
        points: list[dict[str, float]] = []
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
        return [r.failure for r in self.reports if r.failure is not None]


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
        self.update(report.worker, report.histories, report.steps, report.failure is not None)
        self.emit()

    def drain(self, queue: Any) -> None:
        import queue as queues

        while True:
            try:
                self.update(*queue.get_nowait())
            except queues.Empty:
                return

    def emit(self) -> None:
        counts = list(self.latest.values())
        self.hook(Progress(sum(c[0] for c in counts), sum(c[1] for c in counts), sum(1 for c in counts if c[2]),
                           time.perf_counter() - self.started))  # fmt: skip


_progress_queue: Any = None  # in a pool worker: where it reports after each batch (set at its start)
_stop: Any = None  # in a pool worker: an event the main process sets when another worker diverged


def _attach_progress(queue: Any, stop: Any = None) -> None:
    """The pool's initializer: a multiprocessing queue or event reaches a spawned worker only this way."""
    global _progress_queue, _stop
    _progress_queue = queue
    _stop = stop


def _queue_progress(report: WorkerReport) -> None:
    _progress_queue.put((report.worker, report.histories, report.steps, report.failure is not None))


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


class _ShrinkSpent(KeyboardInterrupt):
    """Raised once the shrink budget is spent, and caught by `_run_batch` at once: Hypothesis lets an
    interrupt through and stops there (its target phase would otherwise hill-climb on, replaying, long
    after a failure), and, unlike any other BaseException, does not save the input under way (a
    passing one) to the example database."""


def _run_batch(config: CampaignConfig, replayer: Any, batch: int, size: int, report: WorkerReport) -> bool:
    """One seeded Hypothesis run of `size` histories; False when it found a divergence."""
    from hypothesis import HealthCheck, Phase, Verbosity, event, given, settings, target
    from hypothesis import seed as seed_of

    from difftest.artifacts import save_divergence
    from difftest.exampledb import open_database
    from strategies.histories import HistoryShape, histories

    shape = HistoryShape(max_steps=config.max_steps, restarts=config.restarts, crashes=config.restarts)
    known: dict[str, Any] = {}  # each failing history's replay, by the history's repr, in the order found
    deadline: list[float] = []  # the shrink's time guard, set at the first failure
    tries: list[int] = []  # replays since the first failure
    database = open_database(config.database) if config.database else None

    @settings(max_examples=size, deadline=None, database=database, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
              report_multiple_bugs=False, print_blob=False, verbosity=Verbosity.quiet)  # fmt: skip
    @seed_of(batch_seed(config.seed, batch))
    @given(histories(shape))
    def campaign_history(history: Any) -> None:
        # Hypothesis replays a failure to confirm it (and at the end): the recorded verdict answers, so
        # it never sees a failure "pass" whatever the shrink budget did meanwhile; and every failure is
        # raised from one line, as Hypothesis tells failures apart by where they were raised
        key = repr(history)  # a history holds a dict: not hashable itself
        result = known.get(key)
        if result is None:
            if known:
                if len(tries) >= config.shrink_tries or time.monotonic() > deadline[0]:
                    # the shrink budget is spent (the tries, or the time guard): stop Hypothesis at
                    # once, hill-climbing and shrinking alike; the smallest failure so far is the result
                    raise _ShrinkSpent
                tries.append(1)
            started = time.perf_counter()
            result = replayer.replay(history)
            report.replay_s += time.perf_counter() - started
            reached = coverage.labels(result)
            if not known:  # shrinking replays do not count as coverage
                report.histories += 1
                report.steps += len(history.steps)
                report.labels.update(reached)
            for label in reached:
                event(label)
            target(float(sum(1 for label in reached if label.startswith(("contract:", "sweep:")))), label="rare")
            if result.divergence is not None:
                if not known:
                    deadline.append(time.monotonic() + config.shrink_seconds)
                known[key] = result
        if result.divergence is not None:
            raise _Diverged(result.divergence.reason)

    try:
        campaign_history()
    except (_Diverged, _ShrinkSpent):
        # the shortest failure (the latest of equals: Hypothesis only moves on to smaller ones)
        smallest = min(reversed(known.values()), key=lambda replayed: len(replayed.history.steps))
        minimal = _last_pass(replayer, smallest)
        directory = config.reports / "failures" / f"batch-{batch}"
        save_divergence(minimal, directory)
        report.failure = Failure(batch, minimal.divergence.reason, len(minimal.history.steps), str(directory))
        return False
    return True


def _last_pass(replayer: Any, failed: Any) -> Any:
    """Delete the steps Hypothesis's minimal history can still do without; returns its replay."""
    from difftest.history import step_to_json
    from difftest.shrink import minimise

    def kind(step: Any) -> tuple[str, str]:
        shape = step_to_json(step)
        return shape["op"], shape.get("verb", "")

    failing_kind = kind(failed.divergence.step)
    results: dict[int, Any] = {}

    def still_fails(candidate: Any) -> bool:
        result = replayer.replay(candidate)
        if result.divergence is None or kind(result.divergence.step) != failing_kind:
            return False
        results[id(candidate)] = result
        return True

    smaller = minimise(failed.history, still_fails)
    return results.get(id(smaller), failed)


def _worker(config: CampaignConfig, worker: int, notify: Callable[[WorkerReport], None] | None = None) -> WorkerReport:
    """One process: its own server pair (pinned with it to one core), batches worker, worker+n, ..."""
    # a terminated worker unwinds (and so removes its servers and files) like Ctrl-C
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if notify is None and _progress_queue is not None:
            notify = _queue_progress
        return _work(config, worker, notify)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _work(config: CampaignConfig, worker: int, notify: Callable[[WorkerReport], None] | None = None) -> WorkerReport:
    from difftest.replay import Replayer
    from difftest.servers.local import pin_to_core

    if config.pin:
        pin_to_core(worker)
    report = WorkerReport(worker)
    started = time.perf_counter()
    sizes = batch_sizes(config)
    deadline = None if config.seconds is None else time.monotonic() + config.seconds
    with Replayer(config.module, lua_scripts=config.lua_scripts, backend=config.backend) as replayer:
        position = worker  # the workers deal out the shard's batches: positions w, w+n, ...
        while True:
            batch = shard_batch(config.shard, position)
            if sizes is not None and batch >= len(sizes):
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
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
            if not agreed:
                break
            position += config.workers
    report.elapsed_s = time.perf_counter() - started
    return report


def run_campaign(config: CampaignConfig, on_progress: ProgressHook | None = None) -> CampaignResult:
    """Run the campaign; `on_progress` (optional) is told the running totals as batches finish."""
    from difftest.exampledb import check_database

    started = time.perf_counter()
    started_at = time.time()
    if config.database:
        check_database(config.database)  # one line now, rather than a traceback from every worker
    config.reports.mkdir(parents=True, exist_ok=True)
    tally = _Tally(on_progress, started) if on_progress is not None else None
    if config.workers <= 1:
        try:
            report = _worker(config, 0, tally.take if tally is not None else None)
            return CampaignResult(config, [report], time.perf_counter() - started, started_at=started_at)
        except KeyboardInterrupt:
            return CampaignResult(config, [], time.perf_counter() - started, interrupted=True, started_at=started_at)
    reports: list[WorkerReport] = []
    context = get_context("spawn")
    queue = context.Queue() if tally is not None else None  # workers' counts after each batch
    stop = context.Event()  # set at the first divergence: the other workers stop at their next batch
    pool = ProcessPoolExecutor(max_workers=config.workers, mp_context=context,
                               initializer=_attach_progress, initargs=(queue, stop))  # fmt: skip
    interrupted = False
    try:
        pending = {pool.submit(_worker, config, w) for w in range(config.workers)}
        while pending:
            done, pending = wait(pending, timeout=PROGRESS_POLL_S if tally else None, return_when=FIRST_COMPLETED)
            if tally is not None:
                tally.drain(queue)
                tally.emit()
            for future in done:
                reports.append(future.result())
                if tally is not None:
                    tally.take(reports[-1])
                if reports[-1].failure is not None and pending:
                    # the first divergence stops the campaign: asked, not killed, as a SIGTERM can land
                    # in a finished worker (the pool breaks) or in a finaliser that swallows it (a hang)
                    stop.set()
    except KeyboardInterrupt:
        interrupted = True
        _terminate(pool)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if queue is not None:
            queue.close()
    ordered = sorted(reports, key=lambda r: r.worker)
    return CampaignResult(config, ordered, time.perf_counter() - started, interrupted, started_at)


def _terminate(pool: ProcessPoolExecutor) -> None:
    for process in list(getattr(pool, "_processes", {}).values()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
