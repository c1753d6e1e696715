"""Each campaign in its own process, pinned to its own core, under a hard time limit; a few at a time."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.process import BaseProcess
from pathlib import Path

from mutants.score import ERROR, TIMEOUT, Budget, Outcome, campaign

RESULT_FILE = "outcome.json"  # the child's record, in its campaign directory
MARK_VARIABLE = "MUTANTS_TASK"  # set in the child (and so in its servers' environment): the task's mark
_PR_SET_PDEATHSIG = 1
STOP_S = 20.0  # after SIGTERM, how long a child may take to remove its servers before SIGKILL
POLL_S = 0.1


@dataclass(frozen=True)
class Task:
    """One campaign to run in a child process: the pair of executors, where it writes, its budget."""

    id: str
    executor: str
    module: Path
    lua_scripts: Path
    reports: Path  # the campaign's own directory (its failures/ and the child's outcome.json)
    budget: Budget

    @property
    def mark(self) -> str:
        """In the environment of the child and of every server it starts: finds leftovers, if any."""
        return f"{self.reports.resolve()}"


def default_jobs() -> int:
    return len(os.sched_getaffinity(0))


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _child_main(task: Task, core: int | None) -> None:
    """The child: pinned to `core`, runs the campaign, writes its outcome; SIGTERM unwinds it like
    Ctrl-C, so the campaign removes its servers and temporary files on the way out."""
    signal.signal(signal.SIGTERM, _interrupt)
    # a runner that dies (even by SIGKILL) sends this child SIGTERM, so it never outlives the run
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:
        return  # the runner is already gone
    os.environ[MARK_VARIABLE] = task.mark
    from difftest.servers.local import pin_to_core

    if core is not None:
        pin_to_core(core)
    try:
        outcome = campaign(task.module, task.lua_scripts, task.reports, task.budget)
    except KeyboardInterrupt:
        return
    outcome.id, outcome.executor = task.id, task.executor
    task.reports.mkdir(parents=True, exist_ok=True)
    from difftest.base.files import write_atomically

    write_atomically(task.reports / RESULT_FILE, json.dumps(outcome.as_json(), indent=2) + "\n")


def _stop(process: BaseProcess) -> None:
    """SIGTERM (the child removes its servers), then SIGKILL if it takes longer than STOP_S; the
    servers are bound to their parent's life (PR_SET_PDEATHSIG), so they die with it either way."""
    if process.is_alive():
        process.terminate()
        process.join(STOP_S)
    if process.is_alive():
        process.kill()
    process.join()


@dataclass
class _Running:
    index: int
    task: Task
    process: BaseProcess
    started: float

    def poll(self) -> Outcome | None:
        """The outcome once the child is done (or killed past the hard limit); None while it runs."""
        elapsed = time.monotonic() - self.started
        if self.process.is_alive():
            if elapsed < self.task.budget.hard_limit_s:
                return None
            _stop(self.process)
            limit = f"{self.task.budget.timeout_s:.0f} s + {self.task.budget.grace_s:.0f} s grace"
            reason = f"killed after {elapsed:.0f} s (the hard limit: {limit})"
            return Outcome(self.task.id, self.task.executor, TIMEOUT, campaign_s=elapsed, reason=reason)
        self.process.join()
        result = self.task.reports / RESULT_FILE
        if self.process.exitcode == 0 and result.is_file():
            return Outcome.from_json(json.loads(result.read_text()))
        code = self.process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        reason = f"the campaign's process ended without an outcome ({how})"
        return Outcome(self.task.id, self.task.executor, ERROR, campaign_s=elapsed, reason=reason)

    def stop(self) -> None:
        _stop(self.process)


def _start(task: Task, index: int, core: int | None) -> _Running:
    (task.reports / RESULT_FILE).unlink(missing_ok=True)
    process = get_context("spawn").Process(target=_child_main, args=(task, core), name=f"mutant-{task.id}")
    process.start()
    return _Running(index, task, process, time.monotonic())


Prepared = Task | Outcome  # a task to run, or an outcome known without a campaign (unviable)


class _Builder:
    """Prepares (builds) the tasks one by one in a thread, in order; `take` hands one over once it is ready."""

    def __init__(self, preparers: Sequence[Callable[[], Prepared]]) -> None:
        self.preparers = preparers
        self.ready: dict[int, Prepared] = {}
        self.lock = threading.Lock()
        self.abandon = threading.Event()
        self.thread = threading.Thread(target=self._prepare_all, name="mutants-builder", daemon=True)
        self.thread.start()

    def _prepare_all(self) -> None:
        for index, prepare in enumerate(self.preparers):
            if self.abandon.is_set():
                return
            item = prepare()
            with self.lock:
                self.ready[index] = item

    def take(self, index: int) -> Prepared | None:
        with self.lock:
            return self.ready.pop(index, None)


def _collect(running: dict[int, _Running], on_done: Callable[[int, Outcome], bool]) -> bool:
    """The finished children's outcomes handed to `on_done` (their slots freed); False when it says stop."""
    for slot, run in list(running.items()):
        outcome = run.poll()
        if outcome is None:
            continue
        del running[slot]
        if not on_done(run.index, outcome):
            return False
    return True


def run_tasks(
    preparers: Sequence[Callable[[], Prepared]],
    jobs: int,
    on_done: Callable[[int, Outcome], bool],
    pin: bool = True,
) -> bool:
    """Prepares (builds) the tasks one by one in a thread, in order, and runs each in a child
    process as soon as it is prepared and one of `jobs` slots is free; slot k is pinned to core k.
    `on_done(index, outcome)` is called in this thread as each finishes; when it returns False the
    rest is abandoned (children stopped, no more builds). True when every task was run."""
    jobs = max(1, jobs)
    builder = _Builder(preparers)
    running: dict[int, _Running] = {}  # by slot
    next_index = 0
    interrupted = False
    try:
        while next_index < len(preparers) or running:
            if not _collect(running, on_done):
                return False
            while len(running) < jobs and next_index < len(preparers):
                item = builder.take(next_index)
                if item is None:
                    break  # not built yet: tasks start in order
                index, next_index = next_index, next_index + 1
                if isinstance(item, Outcome):
                    if not on_done(index, item):
                        return False
                    continue
                slot = min(set(range(jobs)) - set(running))
                running[slot] = _start(item, index, slot if pin else None)
            time.sleep(POLL_S)
        return True
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        builder.abandon.set()
        for run in running.values():
            with contextlib.suppress(Exception):
                run.stop()
        if not interrupted:
            builder.thread.join()  # the build under way (a few seconds) finishes and is cached
