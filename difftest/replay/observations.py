"""Observations as files: what a replay recorded at every step, to judge again without servers.

A file holds the history, each step's observation (replies, snapshots, epochs, ACL facts) and the
verdict the judge gave it when it was recorded. The native server's run_ids are random, so they are
written as `run-1`, `run-2`, ... in order of first appearance: the judge only compares them with
each other. `tests/observations/` holds one file per contract row and per tricky interleaving.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from difftest.history import format as hist
from difftest.history.format import JSON, History, encode_bytes
from difftest.history.resolve import resolve
from difftest.judge.contract import Verdict
from difftest.judge.verdicts import Observation
from difftest.spec.replies import (
    Attributed,
    BigNumber,
    BlobError,
    Boolean,
    Died,
    Double,
    ErrorReply,
    Map,
    NilArray,
    NotSent,
    Push,
    Refused,
    Reply,
    RespSet,
    Simple,
    Verbatim,
)
from difftest.spec.snapshot import Entry, Epochs, Snapshot, Value

if TYPE_CHECKING:  # reading and judging observations needs no server: replay is only named here
    from difftest.replay.replayer import ReplayResult

FORMAT = "difftest-observations"
VERSION = 1


class ObservationError(ValueError):
    """A malformed observation file."""


def _b(value: object) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    raise ObservationError(f"expected a string or {{'hex': ...}}, got {value!r}")


def reply_to_json(reply: Reply) -> JSON:
    if reply is None or (isinstance(reply, int) and not isinstance(reply, bool)):
        return reply
    if isinstance(reply, bytes):
        return {"bulk": encode_bytes(reply)}
    if isinstance(reply, list):
        return [reply_to_json(item) for item in reply]
    if isinstance(reply, BlobError):
        return {"blob_error": reply.message}
    resp3 = _resp3_to_json(reply)
    if resp3 is not None:
        return resp3
    if isinstance(reply, ErrorReply):
        return {"error": reply.message}
    if isinstance(reply, Refused):
        return {"refused": reply.message}
    if isinstance(reply, NotSent):
        return {"not_sent": reply.why}
    if isinstance(reply, Died):
        return {"died": reply.why}
    if isinstance(reply, Simple):
        return {"simple": encode_bytes(reply.value)}
    if isinstance(reply, NilArray):
        return {"nil_array": None}
    raise ObservationError(f"cannot write reply {reply!r}")


def _pairs_to_json(pairs: tuple[tuple[Reply, Reply], ...]) -> list[JSON]:
    return [[reply_to_json(key), reply_to_json(value)] for key, value in pairs]


def _resp3_to_json(reply: Reply) -> JSON:
    """A RESP3 reply's JSON (a worker's RESP3 connection), or None for any other reply."""
    if isinstance(reply, Double):
        return {"double": encode_bytes(reply.text)}
    if isinstance(reply, Boolean):
        return {"boolean": reply.value}
    if isinstance(reply, BigNumber):
        return {"big_number": encode_bytes(reply.digits)}
    if isinstance(reply, Verbatim):
        return {"verbatim": [encode_bytes(reply.format), encode_bytes(reply.text)]}
    if isinstance(reply, Map):
        return {"map": _pairs_to_json(reply.pairs)}
    if isinstance(reply, RespSet | Push):
        return {"set" if isinstance(reply, RespSet) else "push": [reply_to_json(item) for item in reply.items]}
    if isinstance(reply, Attributed):
        return {"attributed": [_pairs_to_json(reply.attributes), reply_to_json(reply.reply)]}
    return None


def _pairs_from_json(value: object) -> tuple[tuple[Reply, Reply], ...]:
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise ObservationError(f"not a list of pairs: {value!r}")
    return tuple((reply_from_json(k), reply_from_json(v)) for k, v in value)


def _resp3_from_json(kind: str, inner: object) -> Reply:
    if kind == "double":
        return Double(_b(inner))
    if kind == "boolean" and isinstance(inner, bool):
        return Boolean(inner)
    if kind == "big_number":
        return BigNumber(_b(inner))
    if kind == "verbatim" and isinstance(inner, list) and len(inner) == 2:
        return Verbatim(_b(inner[0]), _b(inner[1]))
    if kind == "map":
        return Map(_pairs_from_json(inner))
    if kind in ("set", "push") and isinstance(inner, list):
        items = tuple(reply_from_json(item) for item in inner)
        return RespSet(items) if kind == "set" else Push(items)
    if kind == "attributed" and isinstance(inner, list) and len(inner) == 2:
        return Attributed(_pairs_from_json(inner[0]), reply_from_json(inner[1]))
    if kind == "blob_error":
        return BlobError(str(inner))
    raise ObservationError(f"not a reply: {{{kind!r}: {inner!r}}}")


def reply_from_json(value: object) -> Reply:
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, list):
        return [reply_from_json(item) for item in value]
    if isinstance(value, dict) and len(value) == 1:
        (kind, inner), *_ = value.items()
        if kind == "bulk":
            return _b(inner)
        if kind == "error":
            return ErrorReply(str(inner))
        if kind == "refused":
            return Refused(str(inner))
        if kind == "not_sent":
            return NotSent(str(inner))
        if kind == "died":
            return Died(str(inner))
        if kind == "simple":
            return Simple(_b(inner))
        if kind == "nil_array":
            return NilArray()
        return _resp3_from_json(kind, inner)
    raise ObservationError(f"not a reply: {value!r}")


def snapshot_to_json(snapshot: Snapshot) -> list[JSON]:
    rows: list[JSON] = []
    for key, entry in sorted(snapshot.items()):
        value: JSON
        if isinstance(entry.value, bytes):
            value = encode_bytes(entry.value)
        elif isinstance(entry.value, Mapping):  # (a hash, or a zset: a dict, or the model's Members)
            value = [[encode_bytes(k), encode_bytes(v)] for k, v in sorted(entry.value.items())]
        elif isinstance(entry.value, frozenset | tuple):
            items = sorted(entry.value) if isinstance(entry.value, frozenset) else list(entry.value)
            value = [encode_bytes(item) for item in items]
        else:
            value = None
        rows.append([encode_bytes(key), entry.kind, value, entry.pttl])
    return rows


# (Any: the rows as json.loads reads them, their values checked by _b as they are read)
def snapshot_from_json(rows: list[list[Any]]) -> Snapshot:
    snapshot: dict[bytes, Entry] = {}
    for key, kind, value, pttl in rows:
        logical: Value
        if kind == "string":
            logical = _b(value)
        elif kind in ("hash", "zset"):
            logical = {_b(k): _b(v) for k, v in value}
        elif kind == "set":
            logical = frozenset(_b(v) for v in value)
        elif kind == "list":
            logical = tuple(_b(v) for v in value)
        else:
            logical = None
        snapshot[_b(key)] = Entry(kind, logical, int(pttl))
    return snapshot


class _RunIds:
    """Random run_ids as `run-N`, in order of first appearance."""

    def __init__(self) -> None:
        self.names: dict[bytes, bytes] = {}

    def __call__(self, run_id: bytes) -> bytes:
        if run_id not in self.names:
            self.names[run_id] = f"run-{len(self.names) + 1}".encode()
        return self.names[run_id]

    def epochs(self, epochs: Epochs) -> Epochs:
        return {key: self.names.get(value, value) for key, value in epochs.items()}


def _snapshots(observation: Observation) -> dict[str, JSON]:
    native = snapshot_to_json(observation.native_after)
    lua = "same" if observation.lua_after == observation.native_after else snapshot_to_json(observation.lua_after)
    return {"native_after": native, "lua_after": lua}


def dumps(result: ReplayResult) -> str:
    """A replay's observations and verdicts, one JSON document (a line per step)."""
    names = _RunIds()
    lines = [
        json.dumps({"format": FORMAT, "version": VERSION, "history": hist.dumps(result.history)}, ensure_ascii=False)
    ]
    for observation, record in zip(result.observations, result.records, strict=True):
        row = {
            "step": observation.resolved.index,
            "now_ms": observation.now_ms,
            "run_id": encode_bytes(names(observation.run_id)),
            "lua_reply": reply_to_json(observation.lua_reply),
            "native_reply": reply_to_json(observation.native_reply),
            **_snapshots(observation),
            "native_epochs": [
                [encode_bytes(k), encode_bytes(v)] for k, v in sorted(names.epochs(observation.native_epochs).items())
            ],
            "denied": [[encode_bytes(key), perm] for key, perm in sorted(observation.denied)],
            "verdict": {"kind": record.verdict.kind, "rule": record.verdict.rule, "reason": record.verdict.reason},
        }
        lines.append(json.dumps(row, ensure_ascii=False, sort_keys=True))
    return "\n".join(lines) + "\n"


def loads(text: str, name: str = "<observations>") -> tuple[History, list[Observation], list[Verdict]]:
    """The history, its observations and the verdicts recorded with them."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ObservationError(f"{name}: empty file")
    header = json.loads(lines[0])
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ObservationError(f"{name}: the first line must be a header with format {FORMAT!r}, version {VERSION}")
    history = hist.loads(header["history"], f"{name} (its history)")
    resolved = resolve(history.steps)
    observations, verdicts = [], []
    for line in lines[1:]:
        row = json.loads(line)
        native_after = snapshot_from_json(row["native_after"])
        lua_after = native_after if row["lua_after"] == "same" else snapshot_from_json(row["lua_after"])
        observations.append(
            Observation(
                resolved[row["step"]],
                row["now_ms"],
                _b(row["run_id"]),
                reply_from_json(row["lua_reply"]),
                reply_from_json(row["native_reply"]),
                lua_after,
                native_after,
                {_b(k): _b(v) for k, v in row["native_epochs"]},
                frozenset((_b(k), perm) for k, perm in row["denied"]),
            )
        )
        verdict = row["verdict"]
        verdicts.append(Verdict(verdict["kind"], verdict["rule"], verdict["reason"]))
    return history, observations, verdicts


def save(result: ReplayResult, path: Path) -> None:
    from difftest.base.files import write_atomically

    write_atomically(path, dumps(result))


def load(path: Path) -> tuple[History, list[Observation], list[Verdict]]:
    return loads(path.read_text(encoding="utf-8"), str(path))
