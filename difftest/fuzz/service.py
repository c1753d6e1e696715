"""The fuzzing service's supervisor: its worker processes, their replacement, draining, and what it prints.

`serve` starts one worker process per core (each with its own server pair), replaces one that dies
(its pending failures handed to the others first), samples the store's totals into the time series,
prints each new finding with its reproduce line as it is recorded, and, on SIGTERM or SIGINT (or
when a budget ends), asks every worker to drain, waits for them, and leaves nothing behind: no
worker, no server, no directory in /dev/shm. A store of its own (no --database) is a valkey-server
kept in a state directory, which a second service on the same machine joins.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from multiprocessing.connection import wait
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TextIO, TypeVar

from difftest.fuzz.outbox import JOURNALS, send_journals
from difftest.fuzz.records import SeriesPoint
from difftest.fuzz.store import COUNTED, Store
from difftest.fuzz.worker import FuzzConfig, local_artifact, reproduce_line, run_worker, worker_id

SAMPLE_S = 5.0  # the store's totals and coverage sampled into the series this often
PRINT_S = 30.0  # a progress line this often
DRAIN_S = 120.0  # after asking the workers to drain: how long they may take before SIGKILL
STATE_DIR = Path(".hypothesis") / "difftest-fuzz"  # the local store's data, without --database
STORE_URL = "store.url"
QUICK_DEATH_S, QUICK_DEATHS = 20.0, 3  # a worker that dies this soon after its start, this often in a row: an error
COUNTS = COUNTED  # a worker's counts, as the store sums them
T = TypeVar("T")


@contextlib.contextmanager
def local_store(state: Path) -> Iterator[str]:
    """A store of this machine's own: the valkey-server this process keeps in `state` (its data in an
    append-only file there, so a later service resumes from it), or, while another service holds it,
    that one's (its URL in state/store.url)."""
    from difftest.servers.group import ServerGroup

    state = state.absolute()
    state.mkdir(parents=True, exist_ok=True)
    with (state / "lock").open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            url = (state / STORE_URL).read_text().strip() if (state / STORE_URL).is_file() else ""
            if not url:
                from difftest.base.problems import SetupProblem

                raise SetupProblem(f"{state} is held by a service that has not started its store yet: try again, "
                                   "or pass --database") from None  # fmt: skip
            yield url
            return
        group = ServerGroup(root=state)
        try:
            server = group.add("store", tcp_port=0)
            url = f"valkey://127.0.0.1:{server.tcp_port}/0"
            (state / STORE_URL).write_text(url + "\n")
            yield url
        finally:
            with contextlib.suppress(OSError):
                (state / STORE_URL).unlink()
            group.close()  # the server stops; its data stays in state/store


@dataclass
class Service:
    config: FuzzConfig
    out: TextIO = sys.stdout
    context: SpawnContext = field(default_factory=lambda: get_context("spawn"))
    processes: dict[int, BaseProcess] = field(default_factory=dict)
    replaced: int = 0
    signalled: list[int] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    shown: set[str] = field(default_factory=set)  # findings already printed
    retired: dict[str, int] = field(default_factory=dict)  # the counts of workers that died and were replaced
    begun: dict[int, float] = field(default_factory=dict)  # when each slot's worker was last started
    quick_deaths: dict[int, int] = field(default_factory=dict)  # its deaths in a row soon after a start
    away_since: float | None = None  # monotonic, while the store does not answer the supervisor

    def __post_init__(self) -> None:
        self.shared = self.context.Value("q", 0)
        # each slot's counts (histories, steps, findings, met_again), written by its worker at each beat:
        # what this service reports, whether the store answers or not
        self.counts = self.context.Array("q", len(COUNTS) * self.config.workers)
        self.store = Store(self.config.database)

    def ask(self, action: Callable[[], T]) -> T | None:
        """What reads or writes the store, run; None while it does not answer (said once, and when it
        is back), and the service goes on: the workers keep what they must record (outbox.py)."""
        from redis.exceptions import RedisError

        try:
            answer = action()
        except (RedisError, OSError) as problem:
            if self.away_since is None:
                self.away_since = time.monotonic()
                detail = str(problem).splitlines()[0] if str(problem) else type(problem).__name__
                self.say(f"fuzz: the store {self.store.spec_shown} is away ({detail}): the workers go on fuzzing "
                         "and keep what they must record until it is back")  # fmt: skip
            return None
        if self.away_since is not None:
            away_s = time.monotonic() - self.away_since
            self.say(f"fuzz: the store {self.store.spec_shown} is back after {away_s:,.0f} s")
            self.away_since = None
        return answer

    def journals(self) -> Path:
        return self.config.reports / JOURNALS

    def send_journals(self) -> None:
        self.ask(lambda: send_journals(self.store, self.journals(), lambda line: self.say(f"fuzz: {line}")))

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def start(self, slot: int) -> None:
        process = self.context.Process(target=run_worker, name=f"difftest-fuzz-{slot}",
                                       args=(self.config, slot, self.shared, os.getpid(), self.counts))  # fmt: skip
        process.start()
        self.processes[slot] = process
        self.begun[slot] = time.monotonic()

    def budget_spent(self) -> bool:
        config = self.config
        if config.seconds is not None and time.monotonic() - self.started >= config.seconds:
            return True
        return config.histories is not None and int(self.shared.value) >= config.histories

    def replace_dead(self) -> None:
        from difftest.servers.leftovers import sweep_leftovers

        for slot, process in list(self.processes.items()):
            if process.exitcode is None:
                continue
            process.join()
            if process.exitcode != 0:
                sweep_leftovers()  # a killed worker's server directory (its servers died with it)
            if self.budget_spent() or self.signalled:
                continue
            if process.exitcode == 0 and self.config.histories is not None:
                continue  # it ran out of the budget
            quick = time.monotonic() - self.begun.get(slot, 0.0) < QUICK_DEATH_S
            self.quick_deaths[slot] = self.quick_deaths.get(slot, 0) + 1 if quick else 0
            if self.quick_deaths[slot] >= QUICK_DEATHS:
                raise RuntimeError(f"worker {slot} ended {QUICK_DEATHS} times in a row soon after its start (last "
                                   f"exit code {process.exitcode}): see its output above")  # fmt: skip
            self.retire(slot)
            who = worker_id(self.config, slot)
            handed = self.ask(lambda: self.store.orphan(who))  # noqa: B023 (run at once)
            self.send_journals()  # what it kept while the store was away
            self.replaced += 1
            self.say(f"fuzz: worker {slot} ended (exit code {process.exitcode}); started again"
                     + (f", its {handed} unrecorded failure(s) handed on" if handed else ""))  # fmt: skip
            self.start(slot)

    def retire(self, slot: int) -> None:
        """A slot's worker ended: its counts kept apart, the slot's zeroed for the next one."""
        base = len(COUNTS) * slot
        for offset, key in enumerate(COUNTS):
            self.retired[key] = self.retired.get(key, 0) + int(self.counts[base + offset])
            self.counts[base + offset] = 0

    def mine(self) -> dict[str, int]:
        """What this service's workers did, from the counts they shared (the store not needed)."""
        totals = {key: self.retired.get(key, 0) for key in COUNTS}
        for slot in range(self.config.workers):
            for offset, key in enumerate(COUNTS):
                totals[key] += int(self.counts[len(COUNTS) * slot + offset])
        return totals

    def announce_findings(self) -> None:
        """Each finding once: printed with its reproduce line, its artifact written here if another
        machine found it (the reproduce line then names this machine's copy)."""
        for finding in self.store.findings():
            name = finding.get("signature")
            if not name or name in self.shown or "history" not in finding:
                continue
            self.shown.add(name)
            artifact = local_artifact(self.config.reports, finding)
            self.say(f"FINDING {name} ({finding.get('described', '')}): {finding.get('reason', '')}")
            self.say(f"artifact: {artifact} (reproduce: {reproduce_line(finding, artifact)})")

    def loop(self, on_sample: Callable[[SeriesPoint], None] | None) -> None:
        last_sample = last_print = 0.0
        while not self.signalled and not self.budget_spent():
            sentinels = [p.sentinel for p in self.processes.values() if p.exitcode is None]
            wait(sentinels, timeout=1.0)
            if self.signalled:
                break
            self.replace_dead()
            if self.config.histories is not None and all(p.exitcode is not None for p in self.processes.values()):
                break
            now = time.monotonic()
            if now - last_sample >= SAMPLE_S:
                last_sample = now
                point = self.ask(lambda: self.store.sample(self.config.service))
                if point is not None:
                    if on_sample is not None:
                        on_sample(point)
                    self.ask(self.announce_findings)
                    self.send_journals()
                if now - last_print >= PRINT_S:
                    last_print = now
                    if point is not None:
                        self.say(progress_line(point, now - self.started))
                    else:
                        mine = self.mine()
                        self.say(f"fuzz: {now - self.started:,.0f} s, this service {mine['histories']:,} histories, "
                                 f"{mine['findings']} finding(s); the store is away")  # fmt: skip

    def drain(self) -> list[int]:
        """Every worker asked to finish its history and end; those still running after DRAIN_S killed
        (their pending failures handed on, their servers' directories removed). Returns the killed slots."""
        from difftest.servers.leftovers import sweep_leftovers

        for process in self.processes.values():
            if process.exitcode is None and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + DRAIN_S
        while any(p.exitcode is None for p in self.processes.values()) and time.monotonic() < deadline:
            wait([p.sentinel for p in self.processes.values() if p.exitcode is None], timeout=0.5)
        killed = [slot for slot, p in self.processes.items() if p.exitcode is None]
        for slot in killed:
            self.processes[slot].kill()
            who = worker_id(self.config, slot)
            self.ask(lambda: self.store.orphan(who))  # noqa: B023 (run at once)
        for process in self.processes.values():
            process.join()
        sweep_leftovers()  # what a killed worker left in /dev/shm
        return killed


def progress_line(point: SeriesPoint, elapsed: float) -> str:
    return (f"fuzz: {elapsed:,.0f} s, {point['histories']:,} histories, {point['steps']:,} steps, "
            f"{point['labels']} labels, {point['native']:,} native counters, {point['lua']} Lua lines, "
            f"{point['findings']} finding(s), {point['workers']} worker(s)")  # fmt: skip


def service_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def serve(config: FuzzConfig, out: TextIO = sys.stdout, dashboard: int | None = None) -> tuple[int, dict[str, int]]:
    """Run the service until a budget ends or SIGTERM/SIGINT; returns the signal that stopped it (0:
    a budget) and what this service's workers did (histories, findings, met_again)."""
    from difftest.servers.leftovers import sweep_leftovers

    store = Store(config.database)
    store.check()
    sweep_leftovers()
    service = Service(config, out)
    _take_over(service, store)
    server = None
    if dashboard is not None:
        from difftest.fuzz.dashboard import start_dashboard

        server = start_dashboard(config.database, dashboard)
        service.say(f"fuzz: dashboard on http://127.0.0.1:{server.server_address[1]}/")

    def note(signum: int, _: object) -> None:
        service.signalled.append(signum)

    previous = {number: signal.signal(number, note) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        for slot in range(config.workers):
            service.start(slot)
        service.loop(None)
    finally:
        _wind_down(service)
        if server is not None:
            server.shutdown()
            server.server_close()
        for number, before in previous.items():
            signal.signal(number, before)
    mine = service.mine()
    mine["replaced"] = service.replaced
    store.close()
    service.store.close()
    return (service.signalled[0] if service.signalled else 0), mine


def _take_over(service: Service, store: Store) -> None:
    """What earlier services left: their stale failures handed to this one, their workers' journals
    sent, and the findings already known (not printed again)."""
    handed = store.orphan_stale(service.config.service)
    if handed:
        service.say(f"fuzz: {handed} failure(s) a stopped service left unrecorded will be recorded first")
    service.send_journals()  # what an earlier service's workers kept while the store was away
    for finding in store.findings():  # known before this service started: not printed again
        service.shown.add(str(finding.get("signature")))


def _wind_down(service: Service) -> None:
    """The workers drained (or killed), their journals sent, the findings announced, and what the
    store could not take said."""
    killed = service.drain()
    if killed:
        service.say(f"fuzz: worker(s) {', '.join(map(str, killed))} did not drain in {DRAIN_S:.0f} s: killed")
    service.send_journals()
    with contextlib.suppress(Exception):
        service.store.sample(service.config.service)
        service.announce_findings()
    left = sorted(service.journals().glob("*.jsonl")) if service.journals().is_dir() else []
    if left:
        service.say(f"fuzz: the store is away: {len(left)} worker journal(s) in {service.journals()} keep what "
                    "is not recorded yet; the next `difftest fuzz` with these --reports sends them")  # fmt: skip


__all__ = ["FuzzConfig", "local_store", "replace", "serve", "service_name"]
