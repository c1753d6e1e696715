"""One fuzzing worker: its own server pair, Hypothesis batches until told to stop, every history recorded.

After each history the worker tells the store what it compared and reached (behaviour labels, and
with the coverage build the native counters and Lua lines); a history that reached something no
history had reached before goes to the corpus. A failing history is kept in the store (`pending`)
before its shrink starts, so a worker that dies mid-shrink loses nothing: its pending failures are
handed to another worker, which replays and minimises them. A failure whose unshrunk signature is
already known is counted and not shrunk again (Hypothesis moves on to other histories), so a
service meets one defect many times and records it once.

SIGTERM (and SIGINT) ask a worker to drain: it finishes the history under way, records it and ends;
a shrink under way stops at the smallest failure so far, which is recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from difftest.campaign.batch import ShrinkBudget, failure_key, last_pass, machine_settings, smallest_failure
from difftest.coverage import labels as coverage
from difftest.findings import signature as signatures
from difftest.fuzz.outbox import Outbox, journal_path
from difftest.fuzz.store import COUNTED, Store, pending_field

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized, SynchronizedArray

    from difftest.fuzz.counters import Counters
    from difftest.fuzz.records import Finding as StoreFinding
    from difftest.fuzz.records import WorkerRecord
    from difftest.history.format import History
    from difftest.replay.replayer import Replayer, ReplayResult
    from difftest.servers.group import ServerGroup

    SharedCount = Synchronized[int]  # the service's shared counter of generated histories (its budget)
    SharedCounts = SynchronizedArray[int]  # the service's shared array of each slot's counts

BATCH = 20  # histories per Hypothesis run: short enough that draining and budgets act soon
BEAT_S = 0.5  # a worker's record and the totals are written at most this often (and at every change of state)
LUA_MARK = b"difftest-lua-coverage"


@dataclass(frozen=True)
class FuzzConfig:
    """A service's settings (the same for each of its workers)."""

    database: str
    module: Path  # the module the servers load (the coverage build when measuring native counters)
    reports: Path  # artifacts go to reports/fuzz/findings/<signature>/
    build: dict[str, Any]  # what findings record as found on (their replay runs on it)
    service: str  # host:pid of the service
    workers: int = 1
    lua_scripts: Path | None = None
    seconds: float | None = None
    histories: int | None = None  # this service's budget of generated histories
    restarts: bool = True
    sizes: bool = True  # histories at production's size drawn (about one in twenty)
    max_steps: int = 40
    batch: int = BATCH
    shrink_tries: int = 300
    shrink_seconds: float = 120.0
    native_counters: bool = False  # the servers run the coverage build: read its counters
    lua_lines: bool = False  # the Lua servers run instrumented scripts: read their lines
    guidance: bool | str = False  # steer Hypothesis with target(): "reach" (True), "rare", or off
    class_corpus: bool = True  # the first worker replays the class corpus first
    pin: bool = True
    seed: int | None = None  # the first batch's seed (the bench: same seeds guided and not); None: random
    profiles: Path | None = None  # where the workers' raw profiles go (each its own subdirectory)
    stop_on_finding: bool = False  # drain once this worker recorded a new finding (bench/bench_guidance.py)
    # the divergence signatures known-findings.toml accepts today (difftest/findings/known.py): met, they
    # are counted (met_known), never recorded as findings
    accepted: frozenset[str] = frozenset()


class _Drain(KeyboardInterrupt):
    """Raised between histories once the worker is asked to stop: Hypothesis lets it through and saves nothing."""


class _Failed(AssertionError):
    pass


class _ShrinkDone(KeyboardInterrupt):
    """The shrink budget is spent (or the worker drains): the smallest failure so far is the result."""


_draining = False


def _ask_to_drain(signum: int, _: object) -> None:
    global _draining
    _draining = True


GUIDANCE_MODES = ("off", "reach", "rare")


def guidance_mode(config: FuzzConfig) -> str:
    """off; reach: a history scores what it touched (native counters moved, Lua lines run, contract and
    sweep labels); rare: each thing it touched weighs less the more histories touched it before."""
    if config.guidance is True:
        return "reach"
    return config.guidance or "off"


def worker_id(config: FuzzConfig, slot: int) -> str:
    return f"{config.service}:{slot}"


@dataclass
class Worker:
    config: FuzzConfig
    slot: int
    store: Outbox  # the store through an outbox: what it cannot take while it is away is kept
    replayer: Replayer
    shared: SharedCount | None  # the service's shared counter of generated histories (its budget), or None
    # the service's shared array of each slot's counts (what it reports, store or not)
    counts_shared: SharedCounts | None = None
    counters: Counters | None = None  # with the coverage build
    lua_log: Path | None = None
    lua_offset: int = 0
    lua_seen: set[str] = field(default_factory=set)
    histories: int = 0
    steps: int = 0
    findings: int = 0
    met_again: int = 0
    met_known: int = 0  # failures of accepted findings (config.accepted)
    state: str = "starting"
    batch_seed: int = 0
    started: float = field(default_factory=time.time)
    seq: int = 0  # the record's sequence number (a store that lost writes answers an older one)
    raw_known: dict[str, str] = field(default_factory=dict)  # raw signatures met -> their finding's
    last_beat: float = 0.0
    failed_after: int = 0  # the worker's generated histories when the failure being shrunk was met
    total_sent: bool = False  # the module's number of counters told to the store
    touched: Counter[str] = field(default_factory=Counter)  # histories that touched each label, counter, line

    @property
    def id(self) -> str:
        return worker_id(self.config, self.slot)

    # ---- what each history reached -----------------------------------------------------------------

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_beat < BEAT_S:
            return
        self.last_beat = now
        self.seq += 1
        self._settle()
        state = self.state + (" (the store is away)" if self.store.away else "")
        record: WorkerRecord = {"host": socket.gethostname(), "pid": os.getpid(), "service": self.config.service,
                                "slot": self.slot, "state": state, "histories": self.histories, "steps": self.steps,
                                "findings": self.findings, "met_again": self.met_again, "met_known": self.met_known,
                                "started": self.started,
                                "seed": self.batch_seed, "seq": self.seq, "kept": self.store.kept()}  # fmt: skip
        if self.counts_shared is not None:  # in the store's order of its counts (COUNTED)
            width = len(COUNTED)
            counts = [self.histories, self.steps, self.findings, self.met_again, self.met_known]
            self.counts_shared[width * self.slot : width * (self.slot + 1)] = counts
        self.store.beat(self.id, record, f"{self.id}@{os.getpid()}")
        self._settle()

    def _settle(self) -> None:
        """Findings sent late that another worker had claimed meanwhile: met again, not new (their
        artifact here goes: the first worker's is the finding's)."""
        while self.store.outcomes:
            name, new = self.store.outcomes.pop(0)
            if not new:
                self.findings -= 1
                self.met_again += 1
                directory = self.store.forget_recorded(name)
                if directory:
                    shutil.rmtree(directory, ignore_errors=True)

    def reached(self, history: History, result: ReplayResult, generated: bool) -> float:
        """Record one compared history; returns its guidance score (what it reached, by the mode)."""
        labels = coverage.labels(result)
        new_labels = self.store.add_labels(labels)
        # what the history touched: its labels, native counters and Lua lines, each by a name
        touched = {f"label:{label}" for label in labels}
        reach = float(sum(1 for label in labels if label.startswith(("contract:", "sweep:"))))
        new: dict[str, list[str] | int] = {}  # what it reached first: labels, and how many counters and lines
        if new_labels:
            new["labels"] = new_labels
        if self.counters is not None:
            moved, first = self.counters.look()
            if self.counters.total and not self.total_sent:
                self.store.send("native_total", self.counters.total)
                self.total_sent = True
            reach += len(moved)
            touched |= {f"native:{i}" for i in moved}
            if first:
                fresh = self.store.add_native(self.counters.bitmap())
                if fresh:
                    new["native"] = fresh
        if self.lua_log is not None:
            lines = self._lua_lines()
            reach += len(lines)
            touched |= {f"lua:{line}" for line in lines}
            unseen = lines - self.lua_seen
            if unseen:
                self.lua_seen |= unseen
                fresh = self.store.add_lua(unseen)
                if fresh:
                    new["lua"] = fresh
        # rarity: each thing touched weighs 1 / (1 + the histories of this worker that touched it before)
        rare = sum(1.0 / (1 + self.touched[name]) for name in touched)
        self.touched.update(touched)
        if new:
            self._keep(history, new)
        if generated:
            self.histories += 1
            if self.shared is not None:
                with self.shared.get_lock():
                    self.shared.value += 1
        self.steps += len(history.steps)
        self.beat()
        return rare if guidance_mode(self.config) == "rare" else reach

    def _lua_lines(self) -> set[str]:
        """The Lua lines run since the last look, from the Lua server's log (`script:line`)."""
        from executors.lua.instrument import parse_log

        assert self.lua_log is not None
        try:
            with self.lua_log.open("rb") as log:
                log.seek(self.lua_offset)
                text = log.read()
        except OSError:
            return set()
        cut = text.rfind(b"\n") + 1  # a line half-written is read next time
        self.lua_offset += cut
        return {f"{verb}:{line}" for verb, line in parse_log(text[:cut])}

    def _keep(self, history: History, new: dict[str, list[str] | int]) -> None:
        from difftest.fuzz.corpusfile import digest_of
        from difftest.history.format import dumps

        text = dumps(history)
        self.store.send("corpus", digest_of(text), {"history": text, "reached": new, "at": time.time(), "by": self.id})

    def budget_left(self) -> bool:
        if self.shared is None or self.config.histories is None:
            return True
        return int(self.shared.value) < self.config.histories

    # ---- failures ----------------------------------------------------------------------------------------

    def record_failure(self, result: ReplayResult, raw: str, pending: str | None) -> str:
        """A shrunk failure recorded (a new finding, or one met again); returns its signature. Its
        artifact is written here first, so a store that is away loses nothing (outbox.py)."""
        from difftest.replay.artifacts import save_divergence
        from difftest.replay.build import replay_command

        global _draining
        name = signatures.signature(result)
        parts = signatures.parts(result)
        self.raw_known[raw] = self.raw_known[name] = name
        if name in self.config.accepted:  # shrunk to a finding the known-findings file accepts
            self.met_known += 1
            if pending is not None:
                self.store.send("unpend", pending)
            return name
        if name in self.store.recorded:  # recorded by this worker already (sent, or kept while the store is away)
            self.store.send("seen_again", name)
            self.met_again += 1
        else:
            directory = finding_directory(self.config.reports, name)
            save_divergence(result, directory, self.config.build)
            divergence = result.divergence
            assert divergence is not None  # a failure recorded is a replay that diverged
            self.findings += 1  # until the store says another worker recorded it first (_settle)
            self.store.send("finding", name, self.id, {
                "signature": name, "parts": parts, "described": signatures.describe(parts),
                "reason": divergence.reason, "step": divergence.index, "steps": len(result.history.steps),
                "found_at": time.time(), "found_by": self.id, "host": socket.gethostname(), "seen": 1,
                "found_after": self.failed_after,
                "history": (directory / "history.jsonl").read_text(),
                "report_txt": (directory / "report.txt").read_text(),
                "report": json.loads((directory / "report.json").read_text()),
                "artifact": str(directory), "build": self.config.build,
                "reproduce": replay_command(directory, self.config.build, result.replicas),
            })  # fmt: skip
            self._settle()
            if self.config.stop_on_finding:
                _draining = True
        self.store.send("note_raw", raw, name)
        self.store.send("note_raw", name, name)
        if pending is not None:
            self.store.send("unpend", pending)
        return name

    def adopt_orphans(self) -> None:
        """Failures a dead worker found but did not record: replayed, minimised and recorded here."""
        from difftest.history.format import loads

        while (orphan := self.store.read("take_orphan")) is not None:
            self.state = "recording a dead worker's failure"
            self.beat(force=True)
            pending = pending_field(self.id)
            self.store.send("pend", pending, self.id, orphan["history"], orphan.get("build", {}))
            result = self.replayer.replay(loads(orphan["history"]))
            if result.divergence is None:
                self.store.send("unpend", pending)  # it does not fail on this build: nothing to record
                continue
            raw = signatures.signature(result)
            self.record_failure(last_pass(self.replayer, result), raw, pending)


def finding_directory(reports: Path, name: str) -> Path:
    """reports/fuzz/findings/<signature> (another name beside it if that one is taken by an older run)."""
    directory = reports / "fuzz" / "findings" / name
    suffix = 0
    while directory.exists():
        suffix += 1
        directory = reports / "fuzz" / "findings" / f"{name}-{suffix}"
    directory.parent.mkdir(parents=True, exist_ok=True)
    return directory


def _first_failure(worker: Worker, history: History, result: ReplayResult, shrink: dict[str, str],
                   budget: ShrinkBudget) -> bool:  # fmt: skip
    """A batch's first failing history: False for a known defect met again (counted, not shrunk
    again); else True, the history kept as pending in the store and the shrink's budget started."""
    from difftest.history.format import dumps

    raw = signatures.signature(result)
    seen = worker.raw_known.get(raw) or worker.store.read("known_raw", raw)
    if (seen or raw) in worker.config.accepted:  # a finding the known-findings file accepts: counted, not shrunk
        worker.raw_known[raw] = seen or raw
        worker.met_known += 1
        return False
    if seen is not None:
        worker.raw_known[raw] = seen
        worker.store.send("seen_again", seen)
        worker.met_again += 1
        return False
    worker.failed_after = worker.histories
    worker.state = "shrinking a failure"
    worker.beat(force=True)
    pending = pending_field(worker.id)
    worker.store.send("pend", pending, worker.id, dumps(history), worker.config.build)
    shrink.update(raw=raw, pending=pending)
    budget.start()
    return True


def _batch(worker: Worker, seed: int, explicit: list[History]) -> None:
    """One Hypothesis run of the worker's batch size (the explicit histories first)."""
    from hypothesis import target

    from difftest.campaign.exampledb import open_database
    from strategies.corpus import CORPUS_NOTE
    from strategies.machine import run_machine
    from strategies.shape import HistoryShape

    config = worker.config
    shape = HistoryShape(max_steps=config.max_steps, restarts=config.restarts, crashes=config.restarts,
                         replica_calls=True, sizes=config.sizes)  # fmt: skip
    known: dict[str, ReplayResult] = {}  # failing replays by failure_key, in the order found
    shrink: dict[str, str] = {}  # the first failure's raw signature and pending field
    budget = ShrinkBudget(config.shrink_tries, config.shrink_seconds)

    def on_history(history: History, in_test: bool = True) -> None:
        key = failure_key(history)
        result = known.get(key)
        if result is None:
            if known:  # shrinking
                if _draining or not budget.take():
                    raise _ShrinkDone
                worker.beat()  # heard while it shrinks: a long shrink is not taken for a dead worker
            elif _draining or not worker.budget_left():
                raise _Drain
            result = worker.replayer.replay(history)  # ReferenceLost (the Lua side lost its server) ends the batch
            if not known:
                score = worker.reached(history, result, in_test and not history.note.startswith(CORPUS_NOTE))
                if in_test and guidance_mode(config) != "off":
                    target(score, label="reached")
            if result.divergence is not None:
                if not known and not _first_failure(worker, history, result, shrink, budget):
                    return  # a known defect, met again: counted, not shrunk again
                known[key] = result
        if result.divergence is not None:
            raise _Failed(result.divergence.reason)

    try:
        for history in explicit:
            on_history(history, in_test=False)
        database = open_database(config.database, tolerant=True)
        run_machine(shape, on_history, machine_settings(config.batch, config.max_steps, database), seed=seed)
    except (_Failed, _ShrinkDone):
        if not known:
            raise
        smallest = smallest_failure(known)
        minimal = smallest if _draining else last_pass(worker.replayer, smallest, config.shrink_seconds)
        worker.record_failure(minimal, shrink["raw"], shrink["pending"])


def run_worker(config: FuzzConfig, slot: int, shared: SharedCount | None, parent: int,
               counts_shared: SharedCounts | None = None) -> None:  # fmt: skip
    """A worker process's life: servers up, orphans adopted, batches until drained or out of budget."""
    from difftest.campaign.driver import bind_to_parent, quiet_swallowed_interrupts
    from difftest.servers.local import pin_to_core

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _ask_to_drain)
    if not bind_to_parent(parent):
        return
    if config.pin:
        pin_to_core(slot)
    profiles = _profiles_dir(config, slot)
    store = Store(config.database)
    outbox = Outbox(store, journal_path(config.reports, worker_id(config, slot)),
                    lambda line: print(f"fuzz: worker {slot}: {line}", file=sys.stderr, flush=True))  # fmt: skip
    started = _Started()
    try:
        with quiet_swallowed_interrupts():
            _work(config, slot, outbox, (shared, counts_shared), profiles, started)
    except Exception as problem:
        if not _draining:
            raise
        # Ctrl-C reaches the servers too (the terminal's whole process group): the history under way
        # lost its servers; nothing of it is recorded, and the worker ends as drained
        print(f"difftest fuzz: worker {slot}: the history under way was cut short while draining "
              f"({type(problem).__name__})", file=sys.stderr, flush=True)  # fmt: skip
    finally:
        if started.worker is not None:
            _stopped(started.worker)
        if started.group is not None:
            started.group.close()
        if profiles is not None:
            shutil.rmtree(profiles, ignore_errors=True)
        outbox.close()
        store.close()


@dataclass
class _Started:
    """What a worker process has started so far, for its `finally` to stop (None: not yet)."""

    worker: Worker | None = None
    group: ServerGroup | None = None


def _profiles_dir(config: FuzzConfig, slot: int) -> Path | None:
    """This worker's directory of raw native profiles (--native-counters), its servers told to write there."""
    if config.profiles is None:
        return None
    profiles = config.profiles / f"worker-{slot}"  # this worker's servers write their raw profiles here, and only they
    profiles.mkdir(parents=True, exist_ok=True)
    os.environ["LLVM_PROFILE_FILE"] = str(profiles / "native-%p%c.profraw")
    return profiles


def _work(config: FuzzConfig, slot: int, outbox: Outbox, shared: tuple[SharedCount | None, SharedCounts | None],
          profiles: Path | None, started: _Started) -> None:  # fmt: skip
    """The worker's servers and replayer up, its orphans adopted, then its batches; `shared`: the
    service's shared counters."""
    from difftest.replay.replayer import Replayer
    from difftest.servers.group import ServerGroup

    started.group = ServerGroup()
    with Replayer(config.module, group=started.group, lua_scripts=config.lua_scripts) as replayer:
        worker = started.worker = Worker(config, slot, outbox, replayer, *shared)
        if profiles is not None:
            from difftest.fuzz.counters import Counters

            worker.counters = Counters(profiles)
        if config.lua_lines:
            worker.lua_log = Path(replayer.lua_server.logfile)
        worker.adopt_orphans()
        _batches(worker, _first_histories(config, slot, outbox))


def _batches(worker: Worker, explicit: list[History]) -> None:
    """Batch after batch (the explicit histories in the first) until drained, out of budget or time."""
    config = worker.config
    rng = random.Random(config.seed if config.seed is not None else None)
    number = 0
    while not _draining and worker.budget_left():
        worker.batch_seed = (config.seed + 1000 * worker.slot + number if config.seed is not None
                             else rng.randrange(2**63))  # fmt: skip
        worker.state = f"batch {number + 1} (seed {worker.batch_seed})"
        worker.beat(force=True)
        try:
            _batch(worker, worker.batch_seed, explicit)
        except _Drain:
            break
        explicit = []
        number += 1
        if config.seconds is not None and time.time() - worker.started >= config.seconds:
            break


def _stopped(worker: Worker) -> None:
    """A worker's last record (stopped) and its last native counters, whatever stopped it."""
    worker.state = "stopped"
    with contextlib.suppress(Exception):
        worker.beat(force=True)
    if worker.counters is not None:
        with contextlib.suppress(Exception):
            worker.counters.look()
            worker.store.add_native(worker.counters.bitmap())


def _first_histories(config: FuzzConfig, slot: int, store: Outbox) -> list[History]:
    """What a worker replays before generating: its share of the service's corpus, and for the
    first worker the class corpus (one short history per behaviour label)."""
    from difftest.history.format import HistoryError, loads

    histories = []
    for number, entry in enumerate(store.read("corpus", default=[])):
        if number % config.workers == slot:
            with contextlib.suppress(HistoryError, KeyError):
                histories.append(loads(entry["history"]))
    if slot == 0 and config.class_corpus:
        from strategies.corpus import class_corpus

        histories += class_corpus(True, config.sizes)
    return histories


def drained() -> bool:
    return _draining


__all__ = ["BATCH", "GUIDANCE_MODES", "FuzzConfig", "guidance_mode", "run_worker"]


def local_artifact(reports: Path, finding: StoreFinding) -> Path:
    """The finding's artifact on this machine: where it was saved, else a copy written from the store."""
    from difftest.base.files import write_atomically

    recorded = Path(str(finding.get("artifact", "")))
    if recorded.is_dir() and (recorded / "history.jsonl").is_file() and finding.get("host") == socket.gethostname():
        return recorded
    directory = reports / "fuzz" / "findings" / str(finding["signature"])
    if (directory / "history.jsonl").is_file():
        return directory
    directory = finding_directory(reports, str(finding["signature"]))
    directory.mkdir(parents=True)
    write_atomically(directory / "report.json", json.dumps(finding.get("report", {}), indent=2) + "\n")
    write_atomically(directory / "report.txt", str(finding.get("report_txt", "")))
    write_atomically(directory / "history.jsonl", str(finding["history"]))  # last: its presence marks it whole
    return directory


def reproduce_line(finding: StoreFinding, artifact: Path) -> str:
    from difftest.replay.build import replay_command

    replicas = bool((finding.get("report") or {}).get("replicas"))
    return replay_command(artifact, finding.get("build") or {}, replicas)
