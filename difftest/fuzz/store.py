"""The fuzzing service's records in a Valkey database that every worker and machine shares.

Beside Hypothesis's example database (its keys start `hypothesis-example:`), the service keeps its
own records under `difftest-fuzz:`, with a format version that a service of another version refuses:

| key | what it holds |
| --- | --- |
| `format` | `difftest-fuzz 2` (1 summed its counts with increments, which a store that lost writes loses) |
| `counts` (hash) | per worker process (its id and pid): JSON of its counts so far, written whole at each beat |
| `workers` (hash) | per worker id (host:service pid:slot): JSON of what it does now and its counts |
| `series` (list) | time points of the totals and the coverage (what the dashboard charts) |
| `labels` / `labels-first` (hashes) | each behaviour label's count / when it was first reached |
| `native` (string) | a bitmap: the native module's coverage counters any history made non-zero |
| `lua` (set) | `script:line` of every Lua line any history ran |
| `findings` (set), `finding:<signature>` (hash) | each finding: its minimal history, report and reproduce line |
| `raw` (hash) | the signature of an unshrunk failure -> its finding (known ones are not shrunk again) |
| `pending` (hash), `orphans` (list) | failures found but not yet recorded whole; a dead worker's, for others to take |
| `corpus` (hash) | histories that reached something new (a label, native counters, Lua lines), by their hash |
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any, cast

from difftest.base.problems import SetupProblem
from difftest.campaign.exampledb import client_of, describe
from difftest.fuzz.records import CorpusEntry, Finding, Pending, SeriesPoint, Snapshot, StoreCoverage, WorkerRecord

FORMAT = "difftest-fuzz"
VERSION = 2
PREFIX = "difftest-fuzz:"
MAX_SERIES = 20_000  # time points kept (one per few seconds per service: days of them)
STALE_S = 120.0  # a worker whose record has not moved for this long, and is not ours, is taken for dead
# a store that does not answer within this long is away (a worker then keeps its records: outbox.py);
# redis-py's own retries are off, the outbox backs off instead
TIMEOUT_S = 3.0
# met_known: failures of findings the known-findings file accepts (counted, never recorded as findings)
COUNTED = ("histories", "steps", "findings", "met_again", "met_known")  # a worker's counts, summed into the totals


def _json(raw: bytes | str | None) -> object:
    """A record's JSON as read from the store (None for no record): its callers say which record it is."""
    return json.loads(raw) if raw else None


def _text(raw: bytes | str | None) -> str | None:
    return raw.decode() if isinstance(raw, bytes) else raw


class Store:
    """The records, through one client (one per process: connections do not cross processes)."""

    def __init__(self, spec: str, timeout_s: float = TIMEOUT_S) -> None:
        self.spec = spec
        # redis-py's replies are bytes and its pipelines untyped; its stubs say bytes | str: Any, kept here
        self.client: Any = client_of(spec, timeout_s=timeout_s, retries=False)

    @property
    def spec_shown(self) -> str:
        return describe(self.spec)

    def key(self, name: str) -> str:
        return PREFIX + name

    def close(self) -> None:
        self.client.close()

    # ---- the format ----------------------------------------------------------------------------------

    def check(self) -> None:
        """One line (SetupProblem) unless the database answers and holds records of this version
        (or none yet: then they start here)."""
        from redis.exceptions import RedisError

        stamp = f"{FORMAT} {VERSION}"
        try:
            self.client.set(self.key("format"), stamp, nx=True)
            found = self.client.get(self.key("format"))
        except RedisError as problem:
            detail = str(problem).splitlines()[0] if str(problem) else type(problem).__name__
            raise SetupProblem(f"fuzzing database {describe(self.spec)} does not answer ({detail}): start that "
                               "server, or pass another --database") from None  # fmt: skip
        text = found.decode(errors="replace") if isinstance(found, bytes) else str(found)
        if text != stamp:
            raise SetupProblem(f"fuzzing database {describe(self.spec)} holds records of format {text!r}, this "
                               f"difftest writes {stamp!r}: use another database (or /DB number)")  # fmt: skip

    # ---- counts and workers ----------------------------------------------------------------------------

    def beat(self, worker: str, record: WorkerRecord, process: str) -> WorkerRecord | None:
        """A worker's record now (what it does, its counts, its `seq`), its counts whole under its
        process's name; returns the record this replaced (a worker whose last record is missing or
        older than it wrote is talking to a store that lost writes)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.key("workers"), worker)
        pipe.hset(self.key("workers"), worker, json.dumps({**record, "beat": time.time()}))
        counts: dict[str, object] = dict(record)
        pipe.hset(self.key("counts"), process, json.dumps({k: int(str(counts.get(k, 0))) for k in COUNTED}))
        before = pipe.execute()[0]
        return cast(WorkerRecord | None, _json(before))

    def forget_worker(self, worker: str) -> None:
        self.client.hdel(self.key("workers"), worker)

    def workers(self) -> dict[str, WorkerRecord]:
        raw = self.client.hgetall(self.key("workers"))
        return {k.decode(): cast(WorkerRecord, _json(v)) for k, v in sorted(raw.items())}

    def totals(self) -> dict[str, int]:
        """Every worker process's counts summed (each written whole, so a lost or repeated write
        leaves no gap or double)."""
        sums = dict.fromkeys(COUNTED, 0)
        for raw in self.client.hvals(self.key("counts")):
            for name, value in cast(dict[str, int], _json(raw) or {}).items():
                sums[name] = sums.get(name, 0) + int(value)
        return sums

    # ---- coverage ----------------------------------------------------------------------------------------

    def add_labels(self, labels: Counter[str]) -> list[str]:
        """Count the labels; returns those no history had reached before."""
        if not labels:
            return []
        now = time.time()
        pipe = self.client.pipeline(transaction=False)
        names = sorted(labels)
        for name in names:
            pipe.hsetnx(self.key("labels-first"), name, now)
        for name in names:
            pipe.hincrby(self.key("labels"), name, labels[name])
        done = pipe.execute()
        return [name for name, new in zip(names, done[: len(names)], strict=True) if new]

    def add_native(self, bitmap: bytes) -> int:
        """OR a worker's bitmap of reached counters into the service's; returns how many counters were new."""
        if not any(bitmap):
            return 0
        scratch = self.key(f"native-scratch:{id(self)}:{time.monotonic_ns()}")
        pipe = self.client.pipeline(transaction=True)
        pipe.bitcount(self.key("native"))
        pipe.set(scratch, bitmap)
        pipe.bitop("OR", self.key("native"), self.key("native"), scratch)
        pipe.delete(scratch)
        pipe.bitcount(self.key("native"))
        done = pipe.execute()
        return int(done[4]) - int(done[0])

    def native_bitmap(self) -> bytes:
        return bytes(self.client.get(self.key("native")) or b"")

    def set_native_total(self, total: int) -> None:
        self.client.hset(self.key("meta"), "native_counters", total)

    def add_lua(self, lines: Iterable[str]) -> int:
        """Lua lines (`script:line`) run; returns how many no history had run before."""
        members = sorted(set(lines))
        return int(self.client.sadd(self.key("lua"), *members)) if members else 0

    def coverage(self) -> StoreCoverage:
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self.key("labels"))
        pipe.hgetall(self.key("labels-first"))
        pipe.bitcount(self.key("native"))
        pipe.scard(self.key("lua"))
        pipe.hgetall(self.key("meta"))
        labels, first, native, lua, meta = pipe.execute()
        return {"labels": {k.decode(): int(v) for k, v in labels.items()},
                "labels_first": {k.decode(): float(v) for k, v in first.items()},
                "native": int(native), "lua": int(lua),
                "native_total": int(meta.get(b"native_counters", 0) or 0)}  # fmt: skip

    # ---- the time series ---------------------------------------------------------------------------------

    def sample(self, service: str) -> SeriesPoint:
        """A time point of the totals and the coverage, appended to the series; returns it."""
        totals, coverage = self.totals(), self.coverage()
        point: SeriesPoint = {"t": round(time.time(), 3), "service": service, "histories": totals.get("histories", 0),
                 "steps": totals.get("steps", 0), "labels": len(coverage["labels"]), "native": coverage["native"],
                 "lua": coverage["lua"], "findings": int(self.client.scard(self.key("findings"))),
                 "workers": len(self.live_workers())}  # fmt: skip
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(self.key("series"), json.dumps(point))
        pipe.ltrim(self.key("series"), -MAX_SERIES, -1)
        pipe.execute()
        return point

    def series(self) -> list[SeriesPoint]:
        points = [cast(SeriesPoint, _json(raw)) for raw in self.client.lrange(self.key("series"), 0, -1)]
        return sorted(points, key=lambda p: p["t"])

    def live_workers(self) -> dict[str, WorkerRecord]:
        now = time.time()
        return {w: r for w, r in self.workers().items() if r.get("state") != "stopped" and now - r["beat"] < STALE_S}

    # ---- findings ----------------------------------------------------------------------------------------

    def known_raw(self, raw: str) -> str | None:
        found = self.client.hget(self.key("raw"), raw)
        return found.decode() if found else None

    def note_raw(self, raw: str, signature: str) -> None:
        self.client.hset(self.key("raw"), raw, signature)

    def record_finding(self, signature: str, worker: str, fields: Finding) -> bool:
        """The finding written whole by the first worker to claim its signature (True); for any
        other, it is met again (False)."""
        key = self.key(f"finding:{signature}")
        won = bool(self.client.hsetnx(key, "claimed_by", worker))
        if not won and _text(self.client.hget(key, "claimed_by")) == worker and not self.client.hexists(key, "history"):
            won = True  # this worker's claim of an earlier try whose answer it never had (a paused store ran it)
        if won:
            self._write_finding(key, signature, fields)
        else:
            self.seen_again(signature)
        return won

    def restore_finding(self, signature: str, worker: str, fields: Finding) -> bool:
        """A finding this worker recorded, written again if the store lost it (True), else nothing."""
        key = self.key(f"finding:{signature}")
        if not self.client.hsetnx(key, "claimed_by", worker):
            return False
        self._write_finding(key, signature, fields)
        return True

    def _write_finding(self, key: str, signature: str, fields: Finding) -> None:
        """A claimed finding's fields and its place in `findings`, in a transaction: no reader sees it half-written."""
        flat = {k: str(v) if k in TEXT_FIELDS else json.dumps(v) for k, v in fields.items()}
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, mapping=flat)
        pipe.sadd(self.key("findings"), signature)
        pipe.execute()

    def seen_again(self, signature: str) -> None:
        self.client.hincrby(self.key(f"finding:{signature}"), "seen", 1)

    def finding(self, signature: str) -> Finding:
        raw = self.client.hgetall(self.key(f"finding:{signature}"))
        out: dict[str, object] = {}
        for k, v in raw.items():
            name, text = k.decode(), v.decode()
            out[name] = text if name in TEXT_FIELDS else _json(text)
        return cast(Finding, out)  # its fields as record_finding wrote them

    def findings(self) -> list[Finding]:
        names = sorted(m.decode() for m in self.client.smembers(self.key("findings")))
        found = [self.finding(name) for name in names]
        return sorted(found, key=lambda f: f.get("found_at") or 0)

    # ---- failures not yet recorded whole -----------------------------------------------------------------

    def pend(self, field: str, worker: str, history: str, build: dict[str, object]) -> None:
        """A failing history, kept before its shrink starts under `field` (pending_field: to unpend
        it when recorded)."""
        pending: Pending = {"history": history, "build": build, "worker": worker, "at": time.time()}
        self.client.hset(self.key("pending"), field, json.dumps(pending))

    def unpend(self, field: str) -> None:
        self.client.hdel(self.key("pending"), field)

    def orphan(self, worker: str) -> int:
        """A dead worker's pending failures handed to whoever takes them next; returns how many."""
        moved = 0
        for field, raw in self.client.hgetall(self.key("pending")).items():
            name = field.decode()
            if name.startswith(worker + ":"):
                self.client.rpush(self.key("orphans"), raw)
                self.client.hdel(self.key("pending"), field)
                moved += 1
        return moved

    def orphan_stale(self, own: str) -> int:
        """Failures pending for workers of other services that stopped beating (their machine died)."""
        workers, moved, now = self.workers(), 0, time.time()
        owners = {field.decode().rsplit(":", 1)[0] for field in self.client.hkeys(self.key("pending"))}
        for owner in owners:
            record = workers.get(owner)
            if owner.startswith(own + ":"):
                continue
            if record is None or now - record.get("beat", 0) > STALE_S:
                moved += self.orphan(owner)
        return moved

    def take_orphan(self) -> Pending | None:
        return cast(Pending | None, _json(self.client.lpop(self.key("orphans"))))

    def pending(self) -> int:
        return int(self.client.hlen(self.key("pending"))) + int(self.client.llen(self.key("orphans")))

    # ---- the corpus ---------------------------------------------------------------------------------------

    def add_corpus(self, digest: str, entry: CorpusEntry) -> bool:
        return bool(self.client.hsetnx(self.key("corpus"), digest, json.dumps(entry)))

    def corpus(self) -> list[CorpusEntry]:
        entries = [cast(CorpusEntry, _json(v)) for v in self.client.hvals(self.key("corpus"))]
        return sorted(entries, key=lambda e: e.get("at", 0))

    def corpus_size(self) -> int:
        return int(self.client.hlen(self.key("corpus")))

    # ---- everything, for the dashboard and `difftest fuzz status` ----------------------------------------

    def snapshot(self) -> Snapshot:
        coverage = self.coverage()
        return {"format": f"{FORMAT} {VERSION}", "database": describe(self.spec), "at": time.time(),
                "totals": self.totals(), "workers": self.workers(), "series": self.series(),
                "coverage": coverage, "findings": self.findings(), "corpus": self.corpus_size(),
                "pending": self.pending()}  # fmt: skip


def pending_field(worker: str) -> str:
    return f"{worker}:{time.time_ns()}"


# a finding's fields kept as text (the others are JSON)
TEXT_FIELDS = frozenset({"claimed_by", "history", "report_txt", "reproduce", "artifact", "signature", "reason",
                         "found_by", "host", "described"})  # fmt: skip
