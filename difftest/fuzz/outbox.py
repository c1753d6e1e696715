"""A worker's way to a fuzzing store that may be away: what must be written is kept, in order, until it answers.

The store is a real dependency with real faults: restarted, paused, gone for minutes, or back from an
older append-only file with its last writes lost. A worker keeps fuzzing through all of them:

- every write goes through the outbox; while the store does not answer (within store.TIMEOUT_S),
  writes are kept in memory, and those that record something (findings, failures pending, findings
  met again, counts) also in a journal file, one JSON line each, so a worker killed meanwhile loses
  nothing: the service sends a dead worker's journal itself (`send_journals`);
- after a failure the store is tried again with backoff (BACKOFF_FIRST_S doubling to BACKOFF_MOST_S),
  never more often, so a store that is away costs a worker one timeout per try, not one per write;
- once it answers, everything kept is sent in the order it was written (the coverage figures
  summed), the journal is removed, and the worker hears which of its findings another worker
  claimed first meanwhile (then met again, not new);
- a worker's record carries a sequence number: a store that answers with an older record than the
  worker last wrote has lost writes, and the worker writes its findings and pending failures again
  (its counts are written whole at every beat and need nothing more).

Reads answer a default while the store is away (no corpus to adopt, no orphan to take, no raw
signature known), so a worker goes on generating; nothing read decides a verdict.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar, cast

from difftest.fuzz.records import Finding, WorkerRecord
from difftest.fuzz.store import Store

BACKOFF_FIRST_S = 0.5
BACKOFF_MOST_S = 30.0
JOURNALS = Path("fuzz") / "outbox"  # under the reports directory: <worker id>.jsonl
# the writes kept in order (and journalled); the coverage figures are summed apart, the record replaced
ORDERED = frozenset({"finding", "restore", "seen_again", "note_raw", "pend", "unpend", "corpus", "native_total"})
# a kept write (or journal line) -> the Store method that makes it, its arguments as kept
STORE_METHOD = {"restore": "restore_finding", "seen_again": "seen_again", "note_raw": "note_raw", "pend": "pend",
                "unpend": "unpend", "corpus": "add_corpus", "native_total": "set_native_total", "beat": "beat",
                "lua": "add_lua"}  # fmt: skip


T = TypeVar("T")
Entry = list[object]  # a kept write as its journal line holds it: its op, then the Store method's arguments (JSON)


def _store_errors() -> tuple[type[BaseException], ...]:
    from redis.exceptions import RedisError

    return (RedisError, OSError)


def journal_path(reports: Path, worker: str) -> Path:
    return reports / JOURNALS / (worker.replace(":", "-").replace("/", "-") + ".jsonl")


class Outbox:
    """One worker's writes to the store, kept while it is away (see the module's text)."""

    def __init__(self, store: Store, journal: Path | None, say: Callable[[str], None]) -> None:
        self.store = store
        self.journal = journal
        self.say = say
        self.away_since: float | None = None  # monotonic, while the store does not answer
        self.retry_at = 0.0
        self.delay = BACKOFF_FIRST_S
        self.ordered: list[Entry] = []
        self.labels: Counter[str] = Counter()
        self.native = b""
        self.lua: set[str] = set()
        # the last beat not yet written: (worker, record, process)
        self.record: tuple[str, WorkerRecord, str] | None = None
        self.sent_seq = 0  # the sequence number of the last record the store acknowledged
        self.outcomes: list[tuple[str, bool]] = []  # (signature, new?) of findings sent, for the worker
        self.recorded: dict[str, Entry] = {}  # this worker's findings: written again if the store loses them
        self.pending: dict[str, Entry] = {}  # its failures pending: the same
        self._file: IO[str] | None = None

    # ---- state ------------------------------------------------------------------------------------------

    @property
    def away(self) -> bool:
        return self.away_since is not None

    def kept(self) -> int:
        """Writes waiting for the store (the record and the coverage figures not counted)."""
        return len(self.ordered)

    def _may_try(self) -> bool:
        return self.away_since is None or time.monotonic() >= self.retry_at

    def _lost(self, problem: BaseException) -> None:
        now = time.monotonic()
        if self.away_since is None:
            self.away_since, self.delay = now, BACKOFF_FIRST_S
            detail = str(problem).splitlines()[0] if str(problem) else type(problem).__name__
            where = f" in {self.journal}" if self.journal else ""
            self.say(f"the store {self.store.spec_shown} does not answer ({detail}): fuzzing goes on, what must be "
                     f"recorded is kept{where} until it is back")  # fmt: skip
        else:
            self.delay = min(self.delay * 2, BACKOFF_MOST_S)
        self.retry_at = now + self.delay

    # ---- reads ------------------------------------------------------------------------------------------

    def read(self, name: str, *args: object, default: object = None) -> Any:
        """The store's answer, or `default` while it is away (without waiting for it when a try is not due);
        Any: the answer of the Store method named, whichever it is."""
        if not self._may_try():
            return default
        try:
            answer = getattr(self.store, name)(*args)
        except _store_errors() as problem:
            self._lost(problem)
            return default
        if self.away:
            self.flush()
        return answer

    # ---- writes ------------------------------------------------------------------------------------------

    def send(self, op: str, *args: object) -> None:
        """A write kept in order (ORDERED): sent now if the store answers, else when it is back."""
        if op not in ORDERED:
            raise ValueError(f"outbox: {op!r} is not a kept write; kept are {sorted(ORDERED)}")
        entry: Entry = [op, *args]
        if op == "finding":
            self.recorded[str(args[0])] = ["restore", *args]
        elif op == "pend":
            self.pending[str(args[0])] = entry
        elif op == "unpend":
            self.pending.pop(str(args[0]), None)
        self.ordered.append(entry)
        self.flush()
        if any(kept is entry for kept in self.ordered):  # not sent: journalled until it is
            self._journal(entry)

    def _direct(self, write: Callable[[], T]) -> T | None:
        """A summed write's answer when nothing is kept before it and the store answers; else None (kept)."""
        if self.away or self.ordered:
            return None
        try:
            return write()
        except _store_errors() as problem:
            self._lost(problem)
            return None

    def add_labels(self, labels: Counter[str]) -> list[str]:
        """Count the labels; returns those no history reached before (none known while the store is away)."""
        fresh = self._direct(lambda: self.store.add_labels(labels))
        if fresh is None:
            self.labels.update(labels)
        return fresh or []

    def add_native(self, bitmap: bytes) -> int:
        fresh = self._direct(lambda: self.store.add_native(bitmap))
        if fresh is None:
            self.native = _or(self.native, bitmap)
        return fresh or 0

    def add_lua(self, lines: set[str]) -> int:
        fresh = self._direct(lambda: self.store.add_lua(lines))
        if fresh is None:
            self.lua.update(lines)
        return fresh or 0

    def beat(self, worker: str, record: WorkerRecord, process: str) -> None:
        """The worker's record (with its counts and `seq`): written now, or the last one when the store is back."""
        self.record = (worker, record, process)
        self.flush()
        if self.record is not None:  # not taken: journalled (the last one in the journal counts)
            self._journal(["beat", worker, record, process])

    # ---- sending -------------------------------------------------------------------------------------------

    def flush(self) -> bool:
        """Send what is kept, in order; True once nothing is (False: the store is away, tried again later)."""
        if not self._may_try():
            return False
        try:
            while self.ordered:
                self._apply(self.ordered[0])
                self.ordered.pop(0)
            if self.labels:
                self.store.add_labels(self.labels)
                self.labels = Counter()
            if self.native:
                self.store.add_native(self.native)
                self.native = b""
            if self.lua:
                self.store.add_lua(self.lua)
                self.lua = set()
            if self.record is not None:
                self._write_record(*self.record)
                self.record = None
        except _store_errors() as problem:
            self._lost(problem)
            return False
        self._close_journal()
        if self.away_since is not None:
            self.say(f"the store {self.store.spec_shown} is back after {time.monotonic() - self.away_since:,.0f} s: "
                     "what was kept is recorded")  # fmt: skip
            self.away_since = None
        return True

    def _apply(self, entry: Entry) -> None:
        op, args = entry[0], entry[1:]
        if op == "finding":
            name, worker, fields = args
            # a finding's fields as Worker.record_failure sent them
            self.outcomes.append((str(name), self.store.record_finding(str(name), str(worker), cast(Finding, fields))))
        elif op == "labels":
            self.store.add_labels(Counter(cast(dict[str, int], args[0])))
        elif op == "native":
            self.store.add_native(bytes.fromhex(str(args[0])))
        elif op in STORE_METHOD:
            getattr(self.store, STORE_METHOD[op])(*args)
        else:
            raise ValueError(f"outbox: a journal line of unknown kind {op!r}")

    def forget_recorded(self, name: str) -> str | None:
        """A finding this worker sent that another worker had recorded first, forgotten; its artifact
        directory here, if it had one."""
        entry = self.recorded.pop(name, None)
        fields = entry[3] if entry is not None and len(entry) > 3 else None
        artifact = fields.get("artifact") if isinstance(fields, dict) else None
        return str(artifact) if artifact else None

    def _write_record(self, worker: str, record: WorkerRecord, process: str) -> None:
        before = self.store.beat(worker, record, process)
        seq = int(record.get("seq", 0))
        lost = self.sent_seq and (before is None or before.get("pid") != record.get("pid")
                                  or int(before.get("seq", 0)) < self.sent_seq)  # fmt: skip
        self.sent_seq = seq
        if lost:
            again = [*self.recorded.values(), *self.pending.values()]
            for entry in again:
                self._apply(entry)
            self.say(
                f"the store {self.store.spec_shown} lost writes (this worker's last record was not there): "
                f"its {len(self.recorded)} finding(s), {len(self.pending)} pending failure(s) written again"
            )

    # ---- the journal ---------------------------------------------------------------------------------------

    def _journal(self, entry: Entry) -> None:
        if self.journal is None:
            return
        if self._file is None:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.journal.open("a", encoding="utf-8")
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held while this worker lives
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def _close_journal(self) -> None:
        if self._file is None:
            return
        with contextlib.suppress(OSError):
            self.journal.unlink()  # type: ignore[union-attr]
        self._file.close()
        self._file = None

    def close(self) -> None:
        """The worker ends: what the store has not taken stays in the journal, for the service to send."""
        if self.flush() or self.journal is None:
            return
        if self.record is not None:
            self._journal(["beat", *self.record])
        if self.labels:
            self._journal(["labels", dict(self.labels)])
        if self.native:
            self._journal(["native", self.native.hex()])
        if self.lua:
            self._journal(["lua", sorted(self.lua)])
        if self._file is not None:
            self._file.close()
            self._file = None


def _or(left: bytes, right: bytes) -> bytes:
    if len(left) < len(right):
        left, right = right, left
    return bytes(a | b for a, b in zip(left, right.ljust(len(left), b"\0"), strict=True))


def send_journals(store: Store, directory: Path, say: Callable[[str], None]) -> int:
    """The journals of workers that ended with writes kept (their files not locked by a living
    worker) sent to the store and removed; returns how many were sent (none while it is away)."""
    sent = 0
    for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
        with path.open("r+", encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its worker lives and sends it itself
            if os.fstat(handle.fileno()).st_nlink == 0:
                continue  # its worker sent it all and removed it between our open and our lock
            # a finding may have been sent before its worker ended (the journal goes once all is sent):
            # written only where the store does not hold it, never counted as met again
            entries = [["restore", *e[1:]] if e[0] == "finding" else e
                       for e in (json.loads(line) for line in handle.read().splitlines() if line.strip())]  # fmt: skip
            outbox = Outbox(store, None, say)
            try:
                for entry in entries:
                    outbox._apply(entry)
            except _store_errors():
                return sent  # away: tried again later, the journal untouched
            path.unlink()
        sent += 1
        findings = sum(1 for entry in entries if entry[0] == "restore")
        say(f"sent what a worker that ended kept ({path.name}: {len(entries)} write(s), {findings} finding(s))")
    return sent
