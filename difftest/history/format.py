"""Histories as data: a versioned JSON Lines format (a header line, then one step per line).

Bytes travel as JSON strings when they are UTF-8 without NUL, else as {"hex": "..."}, so ids,
payloads and errors can be any bytes. Loading a malformed file raises HistoryError naming the file,
the line and the field.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Required, TypeAlias, TypedDict

from difftest.history.rawcommands import raw_refusal
from difftest.spec.calls import Call, as_bytes
from difftest.spec.commands import TRANSITIONS, queue_keys, queue_of_base
from difftest.spec.notifications import flags_problem

# 2026-01-01T00:00:00Z: a fixed origin so that every run's scores are reproducible.
DEFAULT_START_MS = 1_767_225_600_000
# 9999-12-31T23:59:59.999Z: the last moment a history's clock may show, [0, MAX_MS] (the bound of
# the history format since its first version: the clock library would go further, the files not)
MAX_MS = 253_402_300_799_999


FORMAT = "difftest-history"
VERSION = 1
# The longest history a replay takes, and the largest file it reads. Every step's keyspaces are
# walked and compared whole, so a history whose keyspace grows with its length costs time (and
# memory: every step's snapshot is kept) in the square of its length: 2,000 ENQUEUEs replay in 10 s
# on a quiet 2-core machine, 48 s on one loaded 8 times over (bench/bench_long_history.py;
# docs/design-notes.md, "How long a history may be"). Generated histories have at most a few hundred.
MAX_STEPS = 2_000
# A bulk step's calls each count as a step of the replay, walked once, after the last (its keyspace
# between them the spec's model's): at most MAX_BULK in one, MAX_CALLS in a history, a step of
# its own each (docs/history-format.md, "Bulk steps")
MAX_BULK = 20_000
MAX_CALLS = 100_000
MAX_FILE_BYTES = 64 * 2**20  # 64 MiB: MAX_STEPS steps of payloads far past any generated one
DATABASES = 16  # the servers' `databases` (Valkey's default): a history's `db` is below it


class HistoryError(ValueError):
    """A malformed history: one line saying where, what was given, and what is expected."""


# A step's `executor`: None, the server's own executor (the scripts on the Lua server, the module on
# the native one); SCRIPTS, the Lua scripts on both servers (through the host adapter): a worker that
# still calls the scripts on the native server during an upgrade (docs/contract-decisions.md, "Upgrades").
SCRIPTS = "lua"
EXECUTORS = (SCRIPTS,)
# A step's `resp`: the protocol its worker's connection speaks (RESP2 unless 3: HELLO 3)
PROTOCOLS = (2, 3)
# A call's `target`: None, the server itself; REPLICA, each server's read-only replica (a worker
# pointed at a replica: docs/contract-decisions.md, "A read-only replica as a call target")
REPLICA = "replica"
TARGETS = (REPLICA,)
# A `memory` step's `replica`: how each server's replica meets its own memory limit
REPLICA_IGNORES, REPLICA_OBEYS = "ignores", "obeys"
REPLICA_LIMITS = (REPLICA_IGNORES, REPLICA_OBEYS)


@dataclass(frozen=True)
class Bulk:
    """A bulk step: `count` calls of one transition sent back to back as the admin, as a producer
    fills a queue or a fleet of workers claims at once ('op': 'bulk'). Each call is `template` with
    its id argument (a verb whose first argument is an id) followed by the call's number, 0 first:
    ids `b0`, `b1`, ... for the id `b`. The keyspaces are walked once, after the last call; each
    call's replies are compared, and what the keyspace holds between the calls is what the spec's
    model says (docs/design-notes.md, "Bulk steps")."""

    template: Call
    count: int

    def call(self, part: int) -> Call:
        """The bulk's call number `part` (from 0)."""
        return bulk_call(self.template, part)

    def steps(self, executor: str | None = None) -> tuple[CallStep, ...]:
        """The bulk as its calls, each a step of the history (`CallStep.bulk`); `executor` SCRIPTS:
        each runs through the Lua scripts on the native server too (a Lua-era prefix)."""
        return tuple(CallStep(self.call(part), executor=executor, bulk=self, part=part) for part in range(self.count))


def bulk_call(template: Call, part: int) -> Call:
    """`template` with the call's number after its id argument (a verb whose first argument is an id)."""
    transition = TRANSITIONS[template.verb]
    if not transition.args or transition.args[0].name != "id":
        return template
    at = transition.numkeys
    rest = template.rest
    return Call(template.verb, template.numkeys, (*rest[:at], rest[at] + str(part).encode(), *rest[at + 1 :]))


@dataclass(frozen=True)
class CallStep:
    """One transition call, sent whole (the Lua CLAIM's two round trips back to back)."""

    call: Call
    user: str | None = None
    worker: str | None = None
    executor: str | None = None  # SCRIPTS: the native server runs the scripts for it too
    protocol: int = 2  # 3: the worker's connection speaks RESP3 (replies compared with their RESP3 types)
    target: str | None = None  # REPLICA: sent to each server's read-only replica, as the admin
    # a call of a bulk step (`Bulk`), its number in it: no walk follows it unless the next step is
    # not the bulk's next call
    bulk: Bulk | None = None
    part: int = 0


@dataclass(frozen=True)
class BeginClaim:
    """The first round trip of a split Lua CLAIM (its `paused?` read); the native does nothing yet
    (unless `executor` is SCRIPTS: then it plays the Lua host too, and its end runs the script)."""

    worker: str
    call: Call
    user: str | None = None
    executor: str | None = None
    protocol: int = 2


@dataclass(frozen=True)
class EndClaim:
    """The rest of a split CLAIM: the Lua script if the read said not paused; the native command."""

    worker: str


@dataclass(frozen=True)
class Advance:
    """The frozen clock moved by `ms` on both servers; negative: it stepped back (NTP stepping a
    machine's clock; right after a restart, a server restarted onto a clock behind the one it left)."""

    ms: int


@dataclass(frozen=True)
class Restart:
    """Both servers stop and start again on their data: gracefully, or by SIGKILL (crash)."""

    crash: bool = False


@dataclass(frozen=True)
class Notify:
    """Keyspace notifications switched on both servers (`notify-keyspace-events`, the flags as
    Valkey takes them; empty: off): from here each step's events are compared
    (docs/contract-decisions.md, "Keyspace notifications")."""

    flags: str


@dataclass(frozen=True)
class MemoryLimit:
    """The memory limit set on both servers (`maxmemory 1` with `maxmemory-policy noeviction`: any
    keyspace is over it) or lifted (`maxmemory 0`); the harness's own writes never meet it
    (docs/contract-decisions.md, "The memory limit")."""

    limit: bool
    # the replicas' own limit (a history that calls a replica): None, none (as a replica started
    # without one); REPLICA_IGNORES, `maxmemory 1` with `replica-ignore-maxmemory yes` (production's
    # default: a replica configured as its primary); REPLICA_OBEYS, the same with `no`, the replica
    # refusing a deny-oom first write for memory before it answers READONLY (docs/contract-decisions.md,
    # "Two refusals at once")
    replica: str | None = None
    condition: ClassVar[str] = "memory"  # the server condition it switches (difftest/replay/sides.py)

    @property
    def on(self) -> bool:
        return self.limit


@dataclass(frozen=True)
class ReplicasRequired:
    """Every write denied on both servers, as a primary denies them when fewer good replicas are
    connected than it requires (`min-replicas-to-write 100`: more than any server here has, so the
    server answers NOREPLICAS to any write, deterministic), or that requirement lifted
    (`min-replicas-to-write 0`); the harness's own writes never meet it (docs/contract-decisions.md,
    "Writes the server denies")."""

    required: bool
    condition: ClassVar[str] = "replicas"

    @property
    def on(self) -> bool:
        return self.required


@dataclass(frozen=True)
class RawWrite:
    """A plain command sent to both servers as the admin: how histories corrupt the keyspace."""

    command: tuple[bytes, ...]


@dataclass(frozen=True)
class Multi:
    """MULTI: the calls up to the next `Exec` are sent inside one transaction on both servers (as
    the admin, RESP2; no CLAIM, whose Lua host reads before it sends), each compared as an element
    of EXEC's reply, with a keyspace walk queued after each in the transaction. A `memory` or
    `replicas` step inside switches its condition from another connection once the calls before it
    are queued (the server checks those when they were queued, and the transaction at EXEC). A
    history may end inside one (an artifact cut at its failing step): it runs as if closed there.
    `target` REPLICA: the transaction goes to each server's read-only replica (a worker pointed at
    it), which refuses a write command when it is queued (READONLY: EXECABORT) and a script at its
    first write; no condition is switched inside it. `protocol` 3: the transaction's connection
    speaks RESP3 (every call in it, and EXEC's reply, in RESP3's types)."""

    target: str | None = None
    protocol: int = 2


@dataclass(frozen=True)
class Exec:
    """EXEC: the transaction the last `Multi` opened runs."""


Step: TypeAlias = (
    CallStep
    | BeginClaim
    | EndClaim
    | Advance
    | Restart
    | RawWrite
    | Notify
    | Multi
    | Exec
    | MemoryLimit
    | ReplicasRequired
)


@dataclass(frozen=True)
class History:
    steps: tuple[Step, ...]
    start_ms: int = DEFAULT_START_MS
    users: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> ACL key rules
    seed: int | None = None
    note: str = ""
    db: int = 0  # the database every step runs in, on both servers (the harness's connections too)


# -- bytes in JSON -------------------------------------------------------------------------------


# any JSON value as a file writes it (Sequence and Mapping: a list or an object of narrower values is one too)
JSON: TypeAlias = bool | int | float | str | Sequence["JSON"] | Mapping[str, "JSON"] | None
# a line's object as json.loads reads it: each field checked with isinstance before it is used
JSONObject: TypeAlias = dict[str, object]
# bytes as a line writes them: text where it is UTF-8 without NUL, else {"hex": ...}
BytesJSON: TypeAlias = str | dict[str, str]


class StepJSON(TypedDict, total=False):
    """A step's line: its `op` and the fields that op has (see `step_to_json`); a call's, its queue and
    arguments, or (keys not the queue's) numkeys and rest."""

    op: Required[str]
    verb: str
    queue: BytesJSON
    args: list[BytesJSON]
    numkeys: BytesJSON
    rest: list[BytesJSON]
    user: str
    worker: str
    executor: str
    resp: int
    target: str
    count: int
    ms: int
    flags: str
    limit: bool
    replica: str
    required: bool
    command: list[BytesJSON]


def encode_bytes(value: bytes) -> BytesJSON:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": value.hex()}
    return {"hex": value.hex()} if "\x00" in text else text


def _decode_bytes(value: object, where: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool):
        raise HistoryError(f'{where}: expected a string, an integer or {{"hex": ...}}, got {value!r}')
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, dict) and set(value) == {"hex"} and isinstance(value["hex"], str):
        try:
            return bytes.fromhex(value["hex"])
        except ValueError:
            raise HistoryError(f"{where}: {value['hex']!r} is not hexadecimal") from None
    raise HistoryError(f'{where}: expected a string, an integer or {{"hex": ...}}, got {value!r}')


# -- writing -------------------------------------------------------------------------------------


def _call_fields(call: Call, out: StepJSON) -> StepJSON:
    """`out` with a call's fields after those it has (a line's fields keep their order)."""
    transition = TRANSITIONS[call.verb]
    numkeys = transition.numkeys
    out["verb"] = call.verb
    if call.numkeys == str(numkeys).encode() and len(call.rest) >= numkeys:
        keys = list(call.rest[:numkeys])
        base = keys[transition.keys.index("")] if "" in transition.keys else keys[0][: -len(b"meta")]
        queue = queue_of_base(base)
        if queue is not None and queue_keys(transition, queue) == keys:
            out["queue"] = encode_bytes(queue)
            out["args"] = [encode_bytes(a) for a in call.rest[numkeys:]]
            return out
    out["numkeys"] = encode_bytes(call.numkeys)
    out["rest"] = [encode_bytes(a) for a in call.rest]
    return out


def step_to_json(step: Step) -> StepJSON:
    if isinstance(step, CallStep):
        out = _call_fields(step.call, {"op": "call"})
        if step.user is not None:
            out["user"] = step.user
        if step.worker is not None:
            out["worker"] = step.worker
        if step.executor is not None:
            out["executor"] = step.executor
        if step.protocol != 2:
            out["resp"] = step.protocol
        if step.target is not None:
            out["target"] = step.target
        return out
    if isinstance(step, BeginClaim):
        out = _call_fields(step.call, {"op": "begin", "worker": step.worker})
        if step.user is not None:
            out["user"] = step.user
        if step.executor is not None:
            out["executor"] = step.executor
        if step.protocol != 2:
            out["resp"] = step.protocol
        return out
    if isinstance(step, Multi):
        multi: StepJSON = {"op": "multi"}
        if step.target is not None:
            multi["target"] = step.target
        if step.protocol != 2:
            multi["resp"] = step.protocol
        return multi
    if isinstance(step, Exec):
        return {"op": "exec"}
    if isinstance(step, EndClaim):
        return {"op": "end", "worker": step.worker}
    if isinstance(step, Advance):
        return {"op": "advance", "ms": step.ms}
    if isinstance(step, Restart):
        return {"op": "crash" if step.crash else "restart"}
    if isinstance(step, Notify):
        return {"op": "notify", "flags": step.flags}
    if isinstance(step, MemoryLimit):
        if step.replica is not None:
            return {"op": "memory", "limit": step.limit, "replica": step.replica}
        return {"op": "memory", "limit": step.limit}
    if isinstance(step, ReplicasRequired):
        return {"op": "replicas", "required": step.required}
    return {"op": "raw", "command": [encode_bytes(part) for part in step.command]}


def only_users_called(history: History) -> History:
    """The history with only the users its steps call as: a generated history declares one user
    per permission class, and an artifact should say only what its steps need."""
    called = {step.user for step in history.steps if isinstance(step, CallStep | BeginClaim) and step.user}
    return replace(history, users={name: rules for name, rules in history.users.items() if name in called})


def header_json(history: History, extra: Mapping[str, object] | None = None) -> JSONObject:
    header: JSONObject = {"format": FORMAT, "version": VERSION, "start_ms": history.start_ms}
    if history.db:
        header["db"] = history.db
    if history.users:
        header["users"] = {name: list(rules) for name, rules in history.users.items()}
    if history.seed is not None:
        header["seed"] = history.seed
    if history.note:
        header["note"] = history.note
    header.update(extra or {})
    return header


def steps_to_json(steps: Sequence[Step]) -> Iterator[StepJSON]:
    """Each step as its line's object, a bulk's calls as one line again (those of it the steps
    hold: a history cut inside a bulk holds its first calls); a bulk's call without its first, alone."""
    at = 0
    while at < len(steps):
        step, count = steps[at], bulk_run(steps, at)
        if count and isinstance(step, CallStep) and step.bulk is not None:
            yield bulk_to_json(Bulk(step.bulk.template, count), step.executor)
            at += count
            continue
        yield step_to_json(step)
        at += 1


def bulk_run(steps: Sequence[Step], at: int) -> int:
    """How many calls of one bulk line start at `at`: its first call and those after it of the same
    bulk, in order, as the line says them; 0 where no bulk's first call stands."""
    step = steps[at]
    if not (isinstance(step, CallStep) and step.bulk is not None and step.part == 0 and _bulk_call(step)):
        return 0
    count = 1
    while (at + count < len(steps) and isinstance(following := steps[at + count], CallStep)
           and following.bulk == step.bulk and following.part == count
           and following.executor == step.executor and _bulk_call(following)):  # fmt: skip
        count += 1
    return count


def _bulk_call(step: CallStep) -> bool:
    """Whether a bulk's call is as its line says (the admin's, on RESP2, to the server itself)."""
    return step.user is None and step.worker is None and step.protocol == 2 and step.target is None


def bulk_to_json(bulk: Bulk, executor: str | None = None) -> StepJSON:
    out = _call_fields(bulk.template, {"op": "bulk", "count": bulk.count})
    if executor is not None:
        out["executor"] = executor
    return out


def dumps(history: History, extra_header: Mapping[str, object] | None = None) -> str:
    lines = [json.dumps(header_json(history, extra_header), ensure_ascii=False)]
    lines += [json.dumps(line, ensure_ascii=False) for line in steps_to_json(history.steps)]
    return "\n".join(lines) + "\n"


def save(history: History, path: Path, extra_header: Mapping[str, object] | None = None) -> None:
    from difftest.base.files import write_atomically

    write_atomically(path, dumps(history, extra_header))


# -- reading -------------------------------------------------------------------------------------


def _require(obj: JSONObject, key: str, where: str) -> object:
    if key not in obj:
        raise HistoryError(f"{where}: missing field {key!r}")
    return obj[key]


def _int_field(obj: JSONObject, key: str, where: str, minimum: int = 0) -> int:
    value = _require(obj, key, where)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise HistoryError(f"{where} field {key!r}: expected an integer >= {minimum}, got {value!r}")
    return value


def _name_field(obj: JSONObject, key: str, where: str, required: bool = True) -> str | None:
    if key not in obj and not required:
        return None
    value = _require(obj, key, where)
    if not isinstance(value, str) or not value:
        raise HistoryError(f"{where} field {key!r}: expected a non-empty string, got {value!r}")
    return value


def _executor_field(obj: JSONObject, where: str) -> str | None:
    if "executor" not in obj:
        return None
    value = obj["executor"]
    if value not in EXECUTORS:
        raise HistoryError(f"{where} field 'executor': expected {' or '.join(map(repr, EXECUTORS))} (the Lua scripts "
                           f"run this call on the native server too), got {value!r}; leave it out for each "
                           "server's own executor")  # fmt: skip
    return str(value)


def _protocol_field(obj: JSONObject, where: str) -> int:
    if "resp" not in obj:
        return 2
    value = obj["resp"]
    if value not in PROTOCOLS or isinstance(value, bool):
        raise HistoryError(f"{where} field 'resp': expected 2 or 3 (the protocol the worker's connection speaks: "
                           f"3 says HELLO 3 first), got {value!r}")  # fmt: skip
    return int(value)


def _target_field(obj: JSONObject, op: object, where: str) -> str | None:
    """A call's `target`: only "replica", on a plain call as the admin, on RESP2 or RESP3 (its replica
    is reached over the admin's own connection, as a worker pointed at the wrong node would be)."""
    if "target" not in obj:
        return None
    value = obj["target"]
    if value not in TARGETS:
        raise HistoryError(f"{where} field 'target': expected {' or '.join(map(repr, TARGETS))} (the call goes "
                           f"to each server's read-only replica), got {value!r}; else leave it out")  # fmt: skip
    if op not in ("call", "multi"):
        raise HistoryError(f"{where} field 'target': only a 'call' or a 'multi' goes to a replica, not a {op!r}")
    others = [name for name in ("user", "worker", "executor") if name in obj]
    if others:
        raise HistoryError(f"{where} field 'target': a call to a replica runs as the admin, through each "
                           f"server's own executor: drop its {', '.join(repr(o) for o in others)}")  # fmt: skip
    return str(value)


def _queue_field(value: object, where: str) -> bytes:
    """A queue name is a string (or {"hex": ...}); a number is refused, not read as its digits:
    `"queue": 5` is far more often a misplaced argument than a queue named "5"."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise HistoryError(f'{where}: a queue name is a string or {{"hex": ...}}, got the number {value!r}; '
                           f'write "{value}" if the queue is named so')  # fmt: skip
    return _decode_bytes(value, where)


def _parse_call(obj: JSONObject, where: str) -> Call:
    verb = _require(obj, "verb", where)
    if verb not in TRANSITIONS:
        raise HistoryError(f"{where} field 'verb': {verb!r} is not a transition (one of {', '.join(TRANSITIONS)})")
    if "queue" in obj:
        args = obj.get("args", [])
        if not isinstance(args, list):
            raise HistoryError(f"{where} field 'args': expected a list, got {args!r}")
        queue = _queue_field(obj["queue"], f"{where} field 'queue'")
        decoded = [_decode_bytes(a, f"{where} field 'args'[{i}]") for i, a in enumerate(args)]
        return Call.of(verb, queue, *decoded)
    if "rest" in obj:
        rest = obj["rest"]
        if not isinstance(rest, list):
            raise HistoryError(f"{where} field 'rest': expected a list, got {rest!r}")
        numkeys = _decode_bytes(_require(obj, "numkeys", where), f"{where} field 'numkeys'")
        parts = tuple(_decode_bytes(a, f"{where} field 'rest'[{i}]") for i, a in enumerate(rest))
        return Call(verb, numkeys, parts)
    raise HistoryError(f"{where}: a call needs 'queue' and 'args', or 'numkeys' and 'rest'")


def _parse_step(obj: object, where: str, users: dict[str, tuple[str, ...]]) -> Step | Bulk:
    if not isinstance(obj, dict):
        raise HistoryError(f"{where}: expected a JSON object, got {obj!r}")
    op = _require(obj, "op", where)
    user = _name_field(obj, "user", where, required=False)
    if user is not None and user not in users:
        raise HistoryError(f"{where} field 'user': {user!r} is not declared in the header's 'users'")
    executor = _executor_field(obj, where)
    if executor is not None and op not in ("call", "begin", "bulk"):
        raise HistoryError(f"{where} field 'executor': only a 'call', a 'bulk' or a 'begin' names its executor "
                           "(an 'end' runs where its 'begin' did)")  # fmt: skip
    protocol = _protocol_field(obj, where)
    if protocol != 2 and op not in ("call", "begin", "multi"):
        raise HistoryError(f"{where} field 'resp': only a 'call', a 'begin' or a 'multi' names its protocol "
                           "(an 'end' runs on its 'begin's connection)")  # fmt: skip
    target = _target_field(obj, op, where)
    if op == "bulk":
        return _parse_bulk(obj, where, user, protocol, target)
    if op == "call":
        worker = _name_field(obj, "worker", where, required=False)
        return CallStep(_parse_call(obj, where), user, worker, executor, protocol, target)
    if op == "begin":
        call = _parse_call(obj, where)
        if not TRANSITIONS[call.verb].splittable:
            raise HistoryError(f"{where} field 'verb': only CLAIM is split, got {call.verb!r}")
        return BeginClaim(str(_name_field(obj, "worker", where)), call, user, executor, protocol)
    if op == "multi":
        return Multi(_target_field(obj, op, where), protocol)
    if op == "exec":
        return Exec()
    if op == "end":
        return EndClaim(str(_name_field(obj, "worker", where)))
    if op == "advance":  # (negative: the clock stepped back, as NTP steps a machine's)
        return Advance(_int_field(obj, "ms", where, minimum=-MAX_MS))
    if op in ("restart", "crash"):
        return Restart(crash=op == "crash")
    if op == "memory":
        return _parse_memory(obj, where)
    if op == "replicas":
        return _parse_replicas(obj, where)
    if op == "notify":
        return _parse_notify(obj, where)
    if op == "raw":
        return _parse_raw(obj, where)
    raise HistoryError(f"{where} field 'op': {op!r} is not a step (call, bulk, begin, end, advance, restart, "
                       "crash, raw, notify, multi, exec, memory, replicas)")  # fmt: skip


def _parse_bulk(obj: JSONObject, where: str, user: str | None, protocol: int,
                target: str | None) -> Bulk:  # fmt: skip
    """A bulk step's line (its calls made by the loader, `Bulk.steps`)."""
    if user is not None or protocol != 2 or target is not None or "worker" in obj:
        raise HistoryError(f"{where}: a 'bulk' runs as the admin on RESP2 on each server itself (no 'user', "
                           "'worker', 'resp' or 'target'); write such calls as 'call' steps")  # fmt: skip
    if "queue" not in obj:
        raise HistoryError(f"{where}: a 'bulk' names its 'queue' and 'args' (the first call's, its id without "
                           "the call's number)")  # fmt: skip
    count = _int_field(obj, "count", where, minimum=1)
    if count > MAX_BULK:
        raise HistoryError(f"{where} field 'count': {count:,} calls, past the {MAX_BULK:,} one bulk step holds; "
                           "split it into several")  # fmt: skip
    return Bulk(_parse_call(obj, where), count)


def _switched(obj: JSONObject, name: str, where: str, meaning: str) -> bool:
    """A server condition's switch: the field `name`, true (`meaning`) or false (lifted)."""
    value = _require(obj, name, where)
    if not isinstance(value, bool):
        raise HistoryError(f"{where} field {name!r}: expected true ({meaning}) or false (lifted), got {value!r}")
    return value


def _parse_memory(obj: JSONObject, where: str) -> MemoryLimit:
    limit = _switched(obj, "limit", where, "maxmemory 1 with noeviction on both servers")
    replica = obj.get("replica")
    if replica is not None and (replica not in REPLICA_LIMITS or not limit):
        raise HistoryError(f"{where} field 'replica': expected {' or '.join(map(repr, REPLICA_LIMITS))} (the "
                           "replicas' own limit, ignored or obeyed) beside \"limit\": true, or no field (the "
                           f"replicas keep none), got {replica!r}")  # fmt: skip
    return MemoryLimit(limit, replica)


def _parse_replicas(obj: JSONObject, where: str) -> ReplicasRequired:
    meaning = "every write denied for want of replicas: min-replicas-to-write 100 on both servers"
    return ReplicasRequired(_switched(obj, "required", where, meaning))


def _parse_notify(obj: JSONObject, where: str) -> Notify:
    flags = _require(obj, "flags", where)
    if not isinstance(flags, str):
        raise HistoryError(f"{where} field 'flags': expected a string of notify-keyspace-events flags "
                           f'("KEA": every event on both channels; "": off), got {flags!r}')  # fmt: skip
    problem = flags_problem(flags)
    if problem is not None:
        raise HistoryError(f"{where} field 'flags': {problem}")
    return Notify(flags)


def _parse_raw(obj: JSONObject, where: str) -> RawWrite:
    """A raw step's command: a data command of the history's keys only (difftest/history/rawcommands.py)."""
    command = _require(obj, "command", where)
    if not isinstance(command, list) or not command:
        raise HistoryError(f"{where} field 'command': expected a non-empty list, got {command!r}")
    parts = tuple(_decode_bytes(p, f"{where} field 'command'[{i}]") for i, p in enumerate(command))
    refused = raw_refusal(parts)
    if refused is not None:
        raise HistoryError(f"{where} field 'command': {refused}")
    return RawWrite(parts)


def pairing_problems(
    steps: Sequence[Step], where: Callable[[int], str] = "step {}".format
) -> Iterator[tuple[int, str]]:
    """The one pairing rule for split claims, used by the loader, the shrinker and the replay: where
    they do not pair up, as (step index, what is wrong): a begin while the worker's claim is open, an
    end with no open begin, a restart while a claim is open. A claim still open at the end is
    allowed: its second round trip never happens (a worker that died, or an artifact cut at its
    failing step). `where` names a step in the messages."""
    open_claims: dict[str, int] = {}
    multi: int | None = None  # the open transaction's MULTI
    on_replica = False  # the open transaction goes to the replicas
    for index, step in enumerate(steps):
        if multi is not None:
            problem = _in_transaction(step)
            if problem is None and on_replica and isinstance(step, MemoryLimit | ReplicasRequired):
                problem = f"the step {step_to_json(step)['op']!r} (a transaction on the replicas switches nothing)"
            if isinstance(step, Exec):
                multi = None
            elif problem is not None:
                yield index, f"{problem} inside the transaction {where(multi)} opened: close it with 'exec' first"
            continue
        if isinstance(step, Multi):
            multi, on_replica = index, step.target is not None
        elif isinstance(step, Exec):
            yield index, "'exec' with no open 'multi'"
        elif isinstance(step, BeginClaim):
            if step.worker in open_claims:
                yield index, (f"worker {step.worker!r} begins a CLAIM while its CLAIM from "
                              f"{where(open_claims[step.worker])} is open: add its 'end' first")  # fmt: skip
            open_claims[step.worker] = index
        elif isinstance(step, EndClaim):
            if open_claims.pop(step.worker, None) is None:
                yield index, f"'end' for worker {step.worker!r}, which has no open 'begin'"
        elif isinstance(step, Restart) and open_claims:
            worker, begun = next(iter(open_claims.items()))
            yield index, (f"a restart while worker {worker!r}'s CLAIM from {where(begun)} is open: end it first "
                          "(a restart drops every connection)")  # fmt: skip


def _in_transaction(step: Step) -> str | None:
    """Why a step may not stand inside MULTI/EXEC, or None (an 'exec' closes it)."""
    if isinstance(step, Exec | MemoryLimit | ReplicasRequired):
        return None  # a condition switched between MULTI and EXEC: from another connection, before EXEC
    if not isinstance(step, CallStep):
        return f"the step {step_to_json(step)['op']!r}"
    if step.bulk is not None:
        return "a 'bulk' (its calls are walked once, after the last: one by one outside a transaction)"
    if TRANSITIONS[step.call.verb].reads_meta:
        return f"{step.call.verb} (the Lua host reads 'paused?' before it sends the script)"
    if step.user is not None or step.protocol != 2 or step.worker is not None:
        return "a call with a 'user', 'worker' or 'resp' (a transaction runs as the admin, on its 'multi''s protocol)"
    if step.target is not None:
        return "a call to a replica (a transaction runs on the server itself)"
    return None


def unwalked_at(steps: Sequence[Step], index: int) -> bool:
    """Whether the step at `index` is a bulk's call before its last one (no walk follows it)."""
    step = steps[index]
    if not isinstance(step, CallStep) or step.bulk is None or index + 1 >= len(steps):
        return False
    following = steps[index + 1]
    return isinstance(following, CallStep) and following.bulk == step.bulk and following.part == step.part + 1


def cut_after(steps: Sequence[Step], index: int) -> tuple[Step, ...]:
    """The steps up to `index` (an artifact cut at its failing step), and where that step lies in a
    transaction, the rest of the transaction up to its 'exec': what a call in one meets depends on
    what the transaction queues after it (a command refused when queued discards it whole)."""
    open_at: int | None = None
    for at, step in enumerate(steps):
        if isinstance(step, Multi):
            open_at = at
        elif isinstance(step, Exec):
            if open_at is not None and at >= index:
                return tuple(steps[: at + 1])
            open_at = None
        elif at >= index and open_at is None:
            break
    return tuple(steps[: index + 1]) if open_at is None else tuple(steps)


def well_paired(steps: Sequence[Step]) -> bool:
    return next(pairing_problems(steps), None) is None


def _check_workers(steps: list[tuple[int, Step]], name: str) -> None:
    for index, problem in pairing_problems([step for _, step in steps], lambda i: f"line {steps[i][0]}"):
        raise HistoryError(f"{name}:{steps[index][0]}: {problem}")


def _check_clock(steps: Sequence[tuple[int, Step]], start_ms: int, name: str) -> None:
    """The clock a history moves must stay showable: refused at load, not as a traceback mid-replay."""
    now = start_ms
    for line, step in steps:
        if isinstance(step, Advance):
            now += step.ms
            if now < 0:
                raise HistoryError(f"{name}:{line} field 'ms': stepping back by {-step.ms} takes the clock to {now} "
                                   "ms, before 1970-01-01T00:00:00Z, which the frozen clock cannot show; "
                                   "step back by less")  # fmt: skip
            if now > MAX_MS:
                raise HistoryError(f"{name}:{line} field 'ms': advancing by {step.ms} takes the clock to {now} ms, "
                                   f"past the last moment the frozen clock can show ({MAX_MS} ms, "
                                   "9999-12-31T23:59:59.999Z); advance by less")  # fmt: skip


def loads(text: str, name: str = "<history>") -> History:
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip()]
    if not lines:
        raise HistoryError(f'{name}: empty file; a history starts with a header line {{"format": "{FORMAT}", ...}}')
    header_line, header_text = lines[0]
    where = f"{name}:{header_line}"
    header = _header(_parse_json(header_text, where), where)
    start_ms, users = _start_field(header, where), _users_field(header, where)
    seed = header.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise HistoryError(f"{where} field 'seed': expected an integer, got {seed!r}")
    if len(lines) - 1 > MAX_STEPS:
        raise HistoryError(f"{name}: {len(lines) - 1:,} steps, past the {MAX_STEPS:,} a replay takes (every step's "
                           "keyspaces are walked and compared whole, so the time grows with steps times keys; "
                           "docs/design-notes.md, \"How long a history may be\"): split the history")  # fmt: skip
    db = header.get("db", 0)
    if isinstance(db, bool) or not isinstance(db, int) or not 0 <= db < DATABASES:
        raise HistoryError(f"{where} field 'db': expected a database number from 0 to {DATABASES - 1} "
                           f"(the servers' 'databases' is {DATABASES}), got {db!r}")  # fmt: skip
    parsed = _parse_steps(lines[1:], name, users)
    _check_workers(parsed, name)
    _check_clock(parsed, start_ms, name)
    return History(tuple(s for _, s in parsed), start_ms, users, seed, str(header.get("note", "")), db)


def _parse_json(line: str, where: str) -> object:
    """A line's JSON value; a HistoryError naming the line for one that is not JSON."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise HistoryError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None


def _header(header: object, where: str) -> JSONObject:
    """A history's first line, held to be a header of this format and version."""
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise HistoryError(f'{where}: the first line must be a header with "format": "{FORMAT}"')
    version = header.get("version")
    if version != VERSION:
        raise HistoryError(f"{where} field 'version': this difftest reads version {VERSION}, got {version!r}")
    return header


def _start_field(header: JSONObject, where: str) -> int:
    """The header's `start_ms`: where the frozen clock starts (a moment it can show)."""
    start_ms = _int_field(header, "start_ms", where) if "start_ms" in header else DEFAULT_START_MS
    if start_ms > MAX_MS:
        raise HistoryError(f"{where} field 'start_ms': {start_ms} is past the last moment the frozen clock can show "
                           f"({MAX_MS} ms, 9999-12-31T23:59:59.999Z); use a smaller start")  # fmt: skip
    return start_ms


def _users_field(header: JSONObject, where: str) -> dict[str, tuple[str, ...]]:
    """The header's `users`: each restricted user's ACL rules (never the admin, `default`)."""
    users_raw = header.get("users", {})
    if not isinstance(users_raw, dict):
        raise HistoryError(f"{where} field 'users': expected an object of name -> list of ACL rules")
    users: dict[str, tuple[str, ...]] = {}
    for user_name, rules in users_raw.items():
        if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
            raise HistoryError(f"{where} field 'users'.{user_name}: expected a list of ACL rule strings")
        if user_name == "default":
            raise HistoryError(f"{where} field 'users': 'default' is the admin; name the user otherwise")
        users[user_name] = tuple(rules)
    return users


def _parse_steps(lines: list[tuple[int, str]], name: str,
                 users: dict[str, tuple[str, ...]]) -> list[tuple[int, Step]]:  # fmt: skip
    """The step lines parsed, each with its line number (a bulk's calls one by one, on its line)."""
    parsed: list[tuple[int, Step]] = []
    for n, ln in lines:
        obj_of_line = _parse_json(ln, f"{name}:{n}")
        step = _parse_step(obj_of_line, f"{name}:{n}", users)
        if isinstance(step, Bulk):
            if len(parsed) + step.count > MAX_CALLS:
                raise HistoryError(f"{name}:{n}: past the {MAX_CALLS:,} steps a replay takes (a bulk's calls "
                                   "count one by one): split the history")  # fmt: skip
            assert isinstance(obj_of_line, dict)  # (a bulk parsed from it: an object)
            parsed += ((n, call) for call in step.steps(_executor_field(obj_of_line, f"{name}:{n}")))
        else:
            parsed.append((n, step))
    return parsed


def _kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def read_bounded(path: Path, what: str = "a history (.jsonl) or an artifact's directory",
                 limit: int = MAX_FILE_BYTES) -> bytes:  # fmt: skip
    """A regular file's bytes, at most `limit` of them; anything else (a FIFO, a device, a socket, a
    symlink loop, a file past the limit) is one line, before a read that could hang or never end."""
    try:
        mode = path.stat().st_mode  # follows symlinks: a loop is ELOOP here, not an internal error
    except FileNotFoundError:
        raise HistoryError(f"{path}: no such file") from None
    except OSError as problem:
        raise HistoryError(f"{path}: cannot be read ({problem.strerror}); pass {what}") from None
    if not stat.S_ISREG(mode):
        raise HistoryError(f"{path}: {_kind_of(mode)}, not a regular file; pass {what}")
    try:
        # O_NONBLOCK: should a FIFO take the file's place since the stat, opening it does not wait
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(handle, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                raise HistoryError(f"{path}: not a regular file; pass {what}")
            data = stream.read(limit + 1)  # never more than the bound, whatever the file grows to
    except OSError as problem:
        raise HistoryError(f"{path}: cannot be read ({problem.strerror}); pass {what}") from None
    if len(data) > limit:
        raise HistoryError(f"{path}: larger than {limit // 2**20} MiB, the most a history may be "
                           f"(at most {MAX_STEPS:,} steps); split it")  # fmt: skip
    return data


def load(path: Path) -> History:
    return load_with_header(path)[0]


# the header as Any: its readers (difftest/cli) take the fields they wrote as they wrote them
def load_with_header(path: Path) -> tuple[History, dict[str, Any]]:
    """The history in a file, and its header line as written (an artifact's records what it expects)."""
    data = read_bounded(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise HistoryError(f"{path}: not UTF-8 text; a history is JSON Lines") from None
    history = loads(text, str(path))  # a malformed header is one line from here
    header = json.loads(next(line for line in text.splitlines() if line.strip()))
    assert isinstance(header, dict)  # (loads held it to be a header: an object)
    return history, header


def iter_calls(history: History) -> Iterator[Call]:
    for step in history.steps:
        if isinstance(step, CallStep | BeginClaim):
            yield step.call


def call_step(
    verb: str, queue: str | bytes, *args: bytes | str | int, user: str | None = None, executor: str | None = None
) -> CallStep:
    return CallStep(Call.of(verb, queue, *args), user, executor=executor)


def raw(*parts: bytes | str | int) -> RawWrite:
    return RawWrite(tuple(as_bytes(p) for p in parts))
