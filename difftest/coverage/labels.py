"""Behaviour coverage: the labels a replay reached, derived from its records (pure).

Labels name each transition's reply kinds, each sweep verdict, each contract row and each
invariant exercised. A default campaign must reach every label in `REQUIRED`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from difftest.coverage.upgrades import UPGRADE_LABELS, upgrade_labels
from difftest.history.format import (
    DEFAULT_START_MS,
    MAX_MS,
    REPLICA_OBEYS,
    Advance,
    CallStep,
    MemoryLimit,
    Notify,
    RawWrite,
    ReplicasRequired,
)
from difftest.history.resolve import Resolved
from difftest.judge import accounting
from difftest.judge.contract import RULES
from difftest.judge.invariants import INVARIANTS
from difftest.replay.replayer import ReplayResult, StepRecord
from difftest.spec import domains
from difftest.spec.commands import (
    ATTEMPTS,
    SETS,
    STALLED,
    SWEEP_VERDICTS,
    TRANSITIONS,
    ArgKind,
    Increment,
    Moves,
    Rows,
    Stamp,
    Transition,
    Verb,
    parse_key,
)
from difftest.spec.commands import reply_kind as _moved_kind
from difftest.spec.errors import error_code
from difftest.spec.model import hash_fields, zset
from difftest.spec.replies import ErrorReply, NotSent, Refused, Reply
from difftest.spec.snapshot import Snapshot, same_keys

REPLY_KINDS: dict[str, tuple[str, ...]] = {verb: t.reply_kinds for verb, t in TRANSITIONS.items()}

# The classes where defects hide (issue 18), each label derived from the command table and the
# decisions (difftest/spec/domains.py): every bound of every integer argument, every value another
# writer may leave in a field a transition reads, every key a transition writes made of another
# type just before it, every permission a caller may have on every key a transition reaches, ids,
# payloads and errors at their edges, and counters and tokens past one digit.
FIELD_NAMES: tuple[str, ...] = tuple(domains.FIELD_CLASSES)
CLASS_LABELS: tuple[str, ...] = (
    *(f"bound:{verb}:{arg}:{edge}" for verb, arg in domains.INT_ARGS for edge in domains.BOUND_EDGES),
    *(f"value:{field}:{cls}" for field, classes in domains.FIELD_CLASSES.items() for cls in classes),
    *(f"value:score:{name}:{cls}" for name in domains.SCORE_READERS for cls in domains.SCORE_CLASSES),
    *(f"edge:{arg}:{cls}" for arg in ("id", "payload", "error") for cls in domains.BYTES_EDGES),
    *domains.argument_labels(),
    *(f"wrongtype:{verb}:{kind}" for verb, t in TRANSITIONS.items() for kind in domains.written_keys(t)),
    *(f"wrongtype:as:{wrong}" for wrong in domains.WRONG_TYPES),
    *domains.acl_labels(),
    "long:claimed", "long:fenced-held", "long:fenced-stale", "long:stalled",
    *UPGRADE_LABELS,
)  # fmt: skip

# Server conditions production meets (issue 27), one label per condition and verb: a transition
# sent on a worker's RESP3 connection, and one sent inside MULTI/EXEC (every verb but CLAIM, whose
# Lua host reads `paused?` before it sends)
CONDITION_LABELS: tuple[str, ...] = (
    *(f"condition:resp3:{verb.lower()}" for verb in TRANSITIONS),
    *(f"condition:multi:{verb.lower()}" for verb, t in TRANSITIONS.items() if not t.reads_meta),
    # where production runs: a transition called while its queue lives in a database other than 0,
    # while a key of its queue has a TTL another writer gave it, while its meta or a row holds a
    # field another writer added
    *(f"condition:{condition}:{verb.lower()}" for condition in ("db", "ttl", "fields") for verb in TRANSITIONS),
    # over the memory limit (maxmemory below the used memory, noeviction), and sent to the server's
    # read-only replica (docs/contract-decisions.md, "The memory limit", "A read-only replica as a call target")
    *(f"condition:oom:{verb.lower()}" for verb in TRANSITIONS),
    *(f"condition:replica:{verb.lower()}" for verb in TRANSITIONS),
    # while the server denies every write for want of good replicas (min-replicas-to-write;
    # docs/contract-decisions.md, "Writes the server denies")
    *(f"condition:noreplicas:{verb.lower()}" for verb in TRANSITIONS),
    # a call to a replica under its own memory limit, which it ignores (`replica-ignore-maxmemory
    # yes`, the default: READONLY) or obeys (OOM first): a `memory` step's `replica`
    *(f"condition:replica-limit:{how}" for how in ("ignored", "obeyed")),
    # the memory limit or writes denied switched on between MULTI and EXEC (the server checks the
    # transaction's commands again at EXEC)
    *(f"condition:multi-switch:{condition}" for condition in ("oom", "noreplicas")),
)
# Conditions combined (issue 36): `pair:<a>+<b>:<verb>` for a transition sent while two conditions
# held at once (PAIR_CONDITIONS, the pair in that order), on each path (`:first-write`: it wrote, or a
# gate refused its first write). Required for every pair a history can hold (DRAWN_PAIRS: all but
# UNPAIRED; a transaction only with the verbs it may hold), each drawn by the generator and in the
# class corpus too.
PAIR_CONDITIONS = ("oom", "noreplicas", "replica", "user", "resp3", "multi", "db", "notify")
UNPAIRED = {
    ("noreplicas", "replica"): "a call to a replica never meets its primary's writes denied",
    ("replica", "user"): "a call to a replica runs as the admin (the replica has no users of the history)",
    ("user", "multi"): "a transaction runs as the admin: which of a restricted user's queued commands the "
    "server refuses when queued (discarding the transaction) would need the ACL in the model",
}
DRAWN_PAIRS = tuple(pair for pair in itertools.combinations(PAIR_CONDITIONS, 2) if pair not in UNPAIRED)
PAIR_LABELS: tuple[str, ...] = tuple(
    f"pair:{a}+{b}:{verb.lower()}{path}"
    for a, b in DRAWN_PAIRS
    for verb, t in TRANSITIONS.items()
    if "multi" not in (a, b) or not t.reads_meta
    for path in ("", ":first-write")
)
# each pair label also by the call's path: `:first-write` (it wrote, or a condition or a permission
# refused it: OOM, NOREPLICAS, READONLY, NOPERM, a transaction discarded), where every difference of
# issue 36 lay, required; `:write-nothing` (it answered without writing), reported
GATE_CODES = frozenset({"OOM", "NOREPLICAS", "READONLY", "MISCONF", "NOPERM", "EXECABORT"})
# Time as production's clocks show it (issue 36): where a history's clock starts (each on a second's
# last millisecond), how far one advance moves it, and the second counts it crosses (2^31 s: 2038,
# 2^32 s: 2106). The origins are the generator's (strategies/machine.py, `clock_origin`).
CLOCK_ORIGINS: dict[str, int] = {
    "2026": DEFAULT_START_MS + 999,
    "1970": 999,
    "2038": 2**31 * 1000 - 1001,
    "2106": 2**32 * 1000 - 1001,
    "9999": MAX_MS - 366 * 86_400_000,
}
ADVANCE_CLASSES = (("ms", 1_000), ("seconds", 60_000), ("minutes", 3_600_000), ("hours", 86_400_000),
                   ("days", None))  # fmt: skip
CROSSINGS = {"2038": 2**31 * 1000, "2106": 2**32 * 1000}
TIME_LABELS: tuple[str, ...] = (
    *(f"time:start:{name}" for name in CLOCK_ORIGINS),
    *(f"time:advance:{name}" for name, _ in ADVANCE_CLASSES),
    *(f"time:crosses:{name}" for name in CROSSINGS),
    "time:back",  # the clock stepped back (NTP), right after a restart of the native server
)
# a module transition judged with keyspace notifications on (its events compared with the scripts')
NOTIFY_LABELS: tuple[str, ...] = tuple(f"condition:notify:{verb.lower()}" for verb in TRANSITIONS)

# Production's size (issue 37): a bulk step of each verb the generator bulks and of each size, a
# queue's set holding thousands after one, and a PROMOTE or a SWEEP moving hundreds or thousands at once
SIZES = (100, 1_000, 10_000)
MEGABYTE = 2**20
BATCHES = (100, 1_000)
BULK_VERBS = (Verb.ENQUEUE, Verb.CLAIM, Verb.COMPLETE, Verb.FAIL)  # those the generator bulks
SIZE_LABELS: tuple[str, ...] = (
    *(f"size:bulk:{verb.lower()}" for verb in BULK_VERBS),
    *(f"size:bulk:{n}" for n in SIZES),
    *(f"size:queue:{n}" for n in SIZES),
    *(f"size:batch:{verb}:{n}" for verb in ("promote", "sweep") for n in BATCHES),
)
# a megabyte's payload or error text sent, and a CLAIM's reply carrying one back
VALUE_SIZE_LABELS = ("size:value:payload:1MiB", "size:value:error:1MiB", "size:value:claimed:1MiB")

# Counters crossing the edges production's counters cross (issue 37): a metrics count, or the
# attempts a CLAIM's increment left, below an edge before a call and at or past it after
# (`domains.COUNTER_EDGES`: 2^31, 2^32, 2^53, i64's end); each also by its field, reported
COUNTER_LABELS: tuple[str, ...] = tuple(f"counter:crosses:{edge}" for edge in domains.COUNTER_EDGES)

REQUIRED: tuple[str, ...] = (
    *(f"reply:{verb}:{kind}" for verb, kinds in REPLY_KINDS.items() for kind in kinds),
    *(f"sweep:{verdict}" for verdict in SWEEP_VERDICTS),
    *(f"contract:{rule}" for rule in RULES),
    *(f"invariant:{name}" for name in INVARIANTS),
    *(f"accounting:{name}" for name in accounting.FINDINGS),  # the queue's accounting's checks (issue 29)
    *CLASS_LABELS,
    *CONDITION_LABELS,
    *NOTIFY_LABELS,
    *PAIR_LABELS,
    *TIME_LABELS,
    *SIZE_LABELS,
    *VALUE_SIZE_LABELS,
    *COUNTER_LABELS,
)


def reply_kind(verb: str, reply: Reply) -> str:
    """A reply's kind for coverage: errors and refusals by their code."""
    if isinstance(reply, ErrorReply):
        return f"error:{reply.code}"
    if isinstance(reply, Refused):
        return f"refused:{reply.code}"
    return _moved_kind(verb, reply)


def labels(result: ReplayResult) -> Counter[str]:
    """Every label the replay reached, counted (the native side's replies; they equal the Lua
    side's except where a contract row was recorded)."""
    reached: Counter[str] = Counter()
    _step_labels(reached, result)
    reached.update(class_labels(result))
    reached.update(upgrade_labels(result))
    reached.update(notify_labels(result))
    reached.update(condition_labels(result))
    reached.update(time_labels(result))
    reached.update(size_labels(result))
    reached.update(counter_labels(result))
    reached.update(accounting.labels(result.records))  # the queue's accounting's checks (issue 29)
    reached.update(model_labels(result))
    return reached


@dataclass
class _Held:
    """The server conditions in force at a step, as the history's earlier steps switched them."""

    limited: bool = False  # the memory limit is on (a `memory` step)
    replica_limit: str | None = None  # the replicas' own limit with it (the step's `replica`)
    denied: bool = False  # every write denied for want of replicas (a `replicas` step)
    notified: bool = False  # keyspace notifications on (a `notify` step)

    def follow(self, resolved: Resolved) -> None:
        """The conditions after `resolved` (a step that switches one)."""
        step = resolved.step
        if isinstance(step, Notify):
            self.notified = bool(step.flags)
        if resolved.is_memory:
            self.limited = isinstance(step, MemoryLimit) and step.limit
            self.replica_limit = step.replica if isinstance(step, MemoryLimit) else None
        if resolved.is_replicas:
            self.denied = isinstance(step, ReplicasRequired) and step.required


def _step_labels(reached: Counter[str], result: ReplayResult) -> None:
    """The labels of the steps one by one: each call's transition as the conditions held met it, the
    contract rows recorded, a condition switched in a transaction, and the invariants they show."""
    restarted = stale_refused = fenced_success = False
    held = _Held()
    wrote = _writing_steps(result)
    for record in result.records:
        resolved = record.resolved
        if resolved.is_notify or resolved.is_condition:
            held.follow(resolved)
        if resolved.is_condition and resolved.in_multi and resolved.step.on:  # type: ignore[union-attr]
            reached[f"condition:multi-switch:{'oom' if resolved.is_memory else 'noreplicas'}"] += 1
        if record.verdict.rule:
            reached[f"contract:{record.verdict.rule}"] += 1
        if resolved.is_restart:
            restarted = True
            continue
        if resolved.via_scripts:
            continue  # the scripts on the native server (an upgrade): not the module's behaviour
        transition = resolved.transition
        if transition is None or not resolved.sends_transition or isinstance(record.native_reply, NotSent):
            continue
        condition = "noreplicas" if held.denied else "oom" if held.limited else None
        kind = _transition_labels(reached, resolved, transition, record.native_reply, condition, restarted)
        if held.denied and held.limited and resolved.guarded is not None and not resolved.on_replica:
            reached[f"condition:oom:{transition.verb.lower()}"] += 1  # (both on: each condition's label)
        if resolved.guarded is not None:
            _guarded_labels(reached, result, record, transition, held, resolved.index in wrote)
        if transition.fenced:
            fenced_success |= kind != "fenced" and not kind.startswith(("error", "refused"))
            stale_refused |= kind == "fenced"
    if fenced_success and stale_refused:
        reached["invariant:fence"] += 1
    if result.records and not result.divergence:
        reached["invariant:attempts-monotonic"] += int(reached["reply:CLAIM:claimed"] > 1)


def _guarded_labels(reached: Counter[str], result: ReplayResult, record: StepRecord, transition: Transition,
                    held: _Held, wrote: bool) -> None:  # fmt: skip
    """A guarded call's pair labels (every two conditions it met, on its path: its first write, or
    none) and a replica's own memory limit met (`wrote`: the call wrote)."""
    resolved = record.resolved
    # a replica with a limit of its own meets the memory limit, obeyed or ignored (where it
    # ignores it, the scripts answer READONLY and the module once answered OOM: case 11)
    replica_limited = held.limited and held.replica_limit is not None
    reply = record.native_reply
    refused = isinstance(reply, ErrorReply) and error_code(reply.message) in GATE_CODES
    path = "first-write" if refused or wrote else "write-nothing"
    conditions = (held.limited, held.denied, bool(result.history.db), held.notified, replica_limited)
    _pair_labels(reached, resolved, transition, conditions, path)
    if resolved.on_replica and replica_limited:
        obeyed = "obeyed" if held.replica_limit == REPLICA_OBEYS else "ignored"
        reached[f"condition:replica-limit:{obeyed}"] += 1


def _pair_labels(reached: Counter[str], resolved: Resolved, transition: Transition,
                 held: tuple[bool, bool, bool, bool, bool], path: str) -> None:  # fmt: skip
    """`pair:<a>+<b>:<verb>` for every two conditions (PAIR_CONDITIONS) this call met at once: the
    memory limit (the primary's, or a replica's own, obeyed or ignored) and writes denied (a call to the
    replica never meets the primary's), the replica, a restricted user, RESP3, a transaction,
    another database, notifications (`held`: limited, denied, db, notified, replica_limited)."""
    limited, denied, db, notified, replica_limited = held
    on_primary = not resolved.on_replica
    memory = (limited and on_primary) or (replica_limited and resolved.on_replica)
    met = (memory, denied and on_primary, resolved.on_replica, resolved.user is not None,
           resolved.protocol == 3, resolved.in_multi, db, notified)  # fmt: skip
    if sum(met) < 2:
        return
    names = [name for name, on in zip(PAIR_CONDITIONS, met, strict=True) if on]
    verb = transition.verb.lower()
    for a, b in itertools.combinations(names, 2):
        reached[f"pair:{a}+{b}:{verb}"] += 1
        reached[f"pair:{a}+{b}:{verb}:{path}"] += 1


def _writing_steps(result: ReplayResult) -> set[int]:
    """The indexes of the steps after which the native keyspace differs from before them (pure; an
    unchanged walk shares its snapshot, so most steps cost an identity check)."""
    wrote: set[int] = set()
    previous: Snapshot = {}
    for observation in result.observations:
        after = observation.native_after
        if not same_keys(after, previous):
            wrote.add(observation.resolved.index)
        previous = after
    return wrote


def _transition_labels(reached: Counter[str], resolved: Resolved, transition: Transition, reply: Reply,
                       condition: str | None, restarted: bool) -> str:  # fmt: skip
    """The labels of one transition call the native side answered (its conditions, its reply's kind,
    and what that reply shows: N1, an extend after a restart, a sweep's verdicts, the invariants it
    exercised); returns the reply's kind."""
    if resolved.guarded is not None and (resolved.protocol == 3 or resolved.in_multi):
        # the call reached both servers under the condition (a refused one never left the Lua host)
        reached[f"condition:{'multi' if resolved.in_multi else 'resp3'}:{transition.verb.lower()}"] += 1
    if resolved.guarded is not None and (condition or resolved.on_replica):
        reached[f"condition:{'replica' if resolved.on_replica else condition}:{transition.verb.lower()}"] += 1
    kind = reply_kind(transition.verb, reply)
    moved = kind == transition.reply_kinds[0]
    reached[f"reply:{transition.verb}:{kind}"] += 1
    if transition.stamps is Stamp.CLAIMED and moved:
        reached["contract:N1"] += 1
    if transition.stamps is Stamp.JOB_ARG and moved and restarted:
        reached["extend-after-restart"] += 1
    if transition.moves is Moves.SWEPT and isinstance(reply, list) and len(reply) == len(SWEEP_VERDICTS):
        for verdict, count in zip(SWEEP_VERDICTS, reply, strict=True):
            if isinstance(count, int) and count > 0:
                reached[f"sweep:{verdict}"] += count
    _invariant_labels(reached, transition.moves, kind, moved)
    return kind


MODEL_JUDGED = "model:judged"
MODEL_UNJUDGED = "model:unjudged:"  # + the kind (difftest/spec/model.py, UNJUDGED_KINDS)


def model_labels(result: ReplayResult) -> Counter[str]:
    """Each replayed step, counted as judged by the spec's model (`model:judged`) or as the kind of
    step it does not predict (`model:unjudged:<kind>`): the campaign reports the share judged."""
    reached: Counter[str] = Counter()
    for record in result.records:
        unjudged = record.verdict.unjudged
        reached[MODEL_UNJUDGED + unjudged if unjudged else MODEL_JUDGED] += 1
    return reached


def model_share(labels: Counter[str]) -> dict[str, object]:
    """The summary's `model` entry: the steps the spec's model judged, of all it was shown, and the
    others by kind (the goal: at least 99% of the default mix)."""
    judged = labels.get(MODEL_JUDGED, 0)
    unjudged = {k[len(MODEL_UNJUDGED) :]: v for k, v in sorted(labels.items()) if k.startswith(MODEL_UNJUDGED) and v}
    steps = judged + sum(unjudged.values())
    return {"judged_steps": judged, "steps": steps, "share": round(judged / steps, 6) if steps else None,
            "unjudged": unjudged}  # fmt: skip


def model_line(labels: Counter[str]) -> str:
    """The model-judged share in words, for the terminal and the page."""
    share = model_share(labels)
    if not share["steps"]:
        return "no step judged"
    unjudged = share["unjudged"]
    assert isinstance(unjudged, dict)
    others = ", ".join(f"{kind} {count:,}" for kind, count in unjudged.items())
    return (f"{share['share']:.2%} ({share['judged_steps']:,} of {share['steps']:,} steps)"
            + (f"; not predicted: {others}" if others else ""))  # fmt: skip


def notify_labels(result: ReplayResult) -> Counter[str]:
    """`condition:notify:<verb>`: a module transition sent while keyspace notifications were on,
    and its events judged (not under a re-synchronising row, whose events are not compared)."""
    reached: Counter[str] = Counter()
    on = False
    for record in result.records:
        resolved = record.resolved
        if isinstance(resolved.step, Notify):
            on = bool(resolved.step.flags)
            continue
        transition = resolved.transition
        if not on or transition is None or not resolved.sends_transition or resolved.via_scripts:
            continue
        if isinstance(record.native_reply, NotSent) or (record.verdict.rule and RULES[record.verdict.rule].resync):
            continue
        reached[f"condition:notify:{transition.verb.lower()}"] += 1
    return reached


def _key_kind(key: bytes) -> str | None:
    """A key's kind as domains names it: a set, meta, "job:*" or "metrics:<which>"."""
    name = parse_key(key)
    if name is None:
        return None
    if name.job is not None:
        return domains.ROWS_KEY
    return name.rest.decode(errors="replace")


def _raw_labels(command: tuple[bytes, ...]) -> tuple[str | None, tuple[str, str] | None]:
    """What a raw write leaves for the next transition: a value label, and (kind, wrong type)."""
    if len(command) < 2:
        return None, None
    verb, key = command[0].upper(), command[1]
    kind = _key_kind(key)
    if kind is None:
        return None, None
    own = domains.key_type(kind)
    value_label = None
    if verb in (b"HSET", b"HDEL") and own == "hash" and len(command) in (3, 4):
        field = command[2].decode(errors="replace")
        if field in FIELD_NAMES:
            value = command[3] if len(command) == 4 else None
            value_label = f"value:{field}:{domains.value_class(value)}"
    if verb == b"ZADD" and own == "zset" and len(command) == 4 and kind in domains.SCORE_READERS:
        classes = {v: k for k, v in domains.SCORE_CLASSES.items()}
        if command[2] in classes:
            value_label = f"value:score:{kind}:{classes[command[2]]}"
    made = {b"SET": "string", b"RPUSH": "list", b"SADD": "set", b"HSET": "hash", b"ZADD": "zset"}.get(verb)
    wrong = None
    if made is not None and made != own:
        wrong = (kind, made if made in ("string", "list", "set") else "other-container")
    return value_label, wrong


def _int_at(raw: bytes) -> int | None:
    try:
        return int(raw)
    except ValueError:
        return None


def class_labels(result: ReplayResult) -> Counter[str]:
    """The labels of the classes (CLASS_LABELS) this replay reached: what each call was sent with,
    as whom, and what the raw writes just before it left (pure, over the records and observations)."""
    reached: Counter[str] = Counter()
    befores: dict[int, Snapshot] = {}
    previous: Snapshot = {}
    for observation in result.observations:
        befores[observation.resolved.index] = previous
        previous = observation.native_after
    value_label: str | None = None
    wrong: tuple[str, str] | None = None
    for record in result.records:
        resolved = record.resolved
        if isinstance(resolved.step, RawWrite):
            label, made = _raw_labels(resolved.step.command)
            value_label, wrong = label or value_label, made or wrong
            continue
        transition, call = resolved.transition, resolved.call
        sent = resolved.sends_transition and not isinstance(record.native_reply, NotSent)
        if transition is None or call is None or not sent or resolved.via_scripts:
            value_label = wrong = None
            continue
        if value_label is not None:
            reached[value_label] += 1
        if wrong is not None and wrong[0] in domains.written_keys(transition):
            reached[f"wrongtype:{transition.verb}:{wrong[0]}"] += 1
            reached[f"wrongtype:as:{wrong[1]}"] += 1
        value_label = wrong = None
        restriction = domains.RESTRICTIONS.get(resolved.user or "")
        if restriction is not None:
            reached.update(domains.acl_reached(transition, restriction))
        reached.update(domains.argument_edges(transition, call.numkeys, call.rest))
        if resolved.refusal is not None:  # two rules broken at once: which refusal wins
            fault = domains.fault_label(transition, call.numkeys, call.rest)
            if fault is not None:
                reached[fault] += 1
        args = call.rest[transition.numkeys :] if call.numkeys == str(transition.numkeys).encode() else ()
        for spec, raw in zip(transition.args, args, strict=False):
            if spec.kind is ArgKind.INT:
                edge = domains.bound_edge(transition.verb, spec.name, raw)
                if edge is not None:
                    reached[f"bound:{transition.verb}:{spec.name}:{edge}"] += 1
            else:
                cls = domains.bytes_class(raw)
                if cls is not None:
                    reached[f"edge:{spec.name if spec.name in ('payload', 'error') else 'id'}:{cls}"] += 1
        _long_labels(reached, resolved, record.native_reply, befores.get(resolved.index, {}))
    return reached


# raw commands that may leave a TTL or a foreign field (a history without any needs no keyspace look)
_TTL_OR_FIELD_WRITES = frozenset((b"PEXPIRE", b"PEXPIREAT", b"EXPIRE", b"EXPIREAT", b"SET", b"HSET", b"HSETEX",
                                  b"HMSET", b"HSETNX", b"RESTORE", b"COPY", b"MOVE", b"SWAPDB"))  # fmt: skip


def _queues_with(snapshot: Snapshot) -> tuple[frozenset[bytes], frozenset[bytes]]:
    """The queues (by base) one of whose keys has a TTL, and those whose meta or a row holds a field
    another writer added (pure). Most keys have neither: a key's name is read only when it might."""
    ttl: set[bytes] = set()
    fields: set[bytes] = set()
    rows, meta = domains.QUEUE_ROW_FIELDS, domains.QUEUE_META_FIELDS
    for key, entry in snapshot.items():
        value = entry.value
        odd = entry.kind == "hash" and isinstance(value, dict) and not value.keys() <= rows
        if entry.pttl <= 0 and not odd:
            continue
        name = parse_key(key)
        if name is None:
            continue
        base = key[: len(key) - len(name.rest)]
        if entry.pttl > 0:
            ttl.add(base)
        in_meta = name.rest == b"meta"
        if odd and isinstance(value, dict) and ((in_meta and not value.keys() <= meta) or name.job is not None):
            fields.add(base)
    return frozenset(ttl), frozenset(fields)


def size_labels(result: ReplayResult) -> Counter[str]:
    """Production's size reached (SIZE_LABELS): each bulk step by its verb and count, the largest
    set of its queue after it (the walk that follows its last call), and each PROMOTE or SWEEP by
    how many members it moved (pure, over the records and observations)."""
    reached: Counter[str] = Counter()
    observations = {observation.resolved.index: observation for observation in result.observations}
    for record in result.records:
        step, resolved = record.step, record.resolved
        if isinstance(step, CallStep) and step.bulk is not None:
            if step.part == 0:
                reached[f"size:bulk:{step.call.verb.lower()}"] += 1
                reached.update(f"size:bulk:{n}" for n in SIZES if step.bulk.count >= n)
            observation = observations.get(resolved.index)
            if resolved.unwalked or resolved.guarded is None or observation is None:
                continue
            layout = resolved.guarded.layout
            largest = max((len(entry.value) for entry in (observation.native_after.get(layout.key(name))
                                                           for name in SETS)
                           if entry is not None and entry.kind == "zset" and isinstance(entry.value, Mapping)),
                          default=0)  # fmt: skip
            reached.update(f"size:queue:{n}" for n in SIZES if largest >= n)
            continue
        verb, reply = resolved.call.verb if resolved.call is not None else None, record.native_reply
        transition, call = resolved.transition, resolved.call
        if transition is not None and call is not None and call.numkeys == str(transition.numkeys).encode():
            for spec, raw in zip(transition.args, call.rest[transition.numkeys :], strict=False):
                if spec.name in ("payload", "error") and len(raw) >= MEGABYTE:
                    reached[f"size:value:{spec.name}:1MiB"] += 1
        if verb == Verb.CLAIM and isinstance(reply, list) and len(reply) > 1 and isinstance(reply[1], bytes):
            reached.update(["size:value:claimed:1MiB"] if len(reply[1]) >= MEGABYTE else [])
        moved = (reply if verb == Verb.PROMOTE and isinstance(reply, int)
                 else sum(n for n in reply[:3] if isinstance(n, int)) if verb == Verb.SWEEP and isinstance(reply, list)
                 else 0)  # fmt: skip
        reached.update(f"size:batch:{str(verb).lower()}:{n}" for n in BATCHES if moved >= n)
    return reached


def _counter(snapshot: Snapshot, key: bytes, field: bytes) -> int | None:
    fields = hash_fields(snapshot, key)
    raw = fields.get(field) if fields is not None else None
    return _int_at(raw) if raw is not None else None


def counter_labels(result: ReplayResult) -> Counter[str]:
    """The counter edges crossed (COUNTER_LABELS): each metrics count a call increments, and the
    attempts of the row a CLAIM answered, read before the call (the keyspace the step before left)
    and after it (pure, over the records and observations)."""
    reached: Counter[str] = Counter()
    previous: Snapshot = {}
    for observation in result.observations:
        before, previous = previous, observation.native_after
        resolved = observation.resolved
        transition, guarded = resolved.transition, resolved.guarded
        if transition is None or guarded is None or not transition.increments or resolved.via_scripts:
            continue
        layout, reply = guarded.layout, observation.native_reply
        counters: list[tuple[bytes, bytes]] = [(layout.metrics(i.metrics), i.field) for i in transition.increments
                                               if i.metrics is not None]  # fmt: skip
        if transition.verb == Verb.CLAIM and isinstance(reply, list) and reply and isinstance(reply[0], bytes):
            counters.append((layout.row(reply[0]), ATTEMPTS))
        for key, field in counters:
            was, now = _counter(before, key, field), _counter(observation.native_after, key, field)
            if was is None or now is None:
                continue
            for edge in domains.crossed_edges(was, now):
                reached[f"counter:crosses:{edge}"] += 1
                reached[f"counter:{field.decode()}:crosses:{edge}"] += 1
    return reached


def advance_class(ms: int) -> str:
    """An advance's class by its size (ADVANCE_CLASSES)."""
    return next(name for name, below in ADVANCE_CLASSES if below is None or ms < below)


def time_labels(result: ReplayResult) -> Counter[str]:
    """`time:*` (TIME_LABELS): where the history's clock started (a start that is no origin's counts
    for none), the class of each advance the replay made, each second count the clock crossed (pure)."""
    reached: Counter[str] = Counter()
    start = result.history.start_ms
    origin = next((name for name, at in CLOCK_ORIGINS.items() if at == start), None)
    if origin is not None:
        reached[f"time:start:{origin}"] += 1
    now = start
    for record in result.records:
        step = record.resolved.step
        if isinstance(step, Advance) and step.ms < 0:
            reached["time:back"] += 1
            now += step.ms
        elif isinstance(step, Advance):
            reached[f"time:advance:{advance_class(step.ms)}"] += 1
            for name, at in CROSSINGS.items():
                if now < at <= now + step.ms:
                    reached[f"time:crosses:{name}"] += 1
            now += step.ms
    return reached


def condition_labels(result: ReplayResult) -> Counter[str]:
    """The `condition:*` labels (CONDITION_LABELS) this replay reached: each transition sent in a
    history on another database; each sent while a key of its queue had a TTL, or its queue's meta or
    a row held a foreign field, in the native keyspace before it (pure)."""
    reached: Counter[str] = Counter()
    db = result.history.db
    look = any(isinstance(s, RawWrite) and s.command[0].upper() in _TTL_OR_FIELD_WRITES for s in result.history.steps)
    if not db and not look:
        return reached
    befores: dict[int, Snapshot] = {}
    previous: Snapshot = {}
    for observation in result.observations:
        befores[observation.resolved.index] = previous
        previous = observation.native_after
    seen: dict[int, tuple[Snapshot, tuple[frozenset[bytes], frozenset[bytes]]]] = {}  # by the snapshot's identity
    for record in result.records:
        resolved = record.resolved
        transition = resolved.transition
        sent = resolved.sends_transition and not isinstance(record.native_reply, NotSent)
        if transition is None or not sent or resolved.via_scripts:
            continue
        verb = transition.verb.lower()
        if db:
            reached[f"condition:db:{verb}"] += 1
        guarded = resolved.guarded
        if not look or guarded is None:
            continue
        before = befores.get(resolved.index, {})
        known = seen.get(id(before))
        if known is None or known[0] is not before:
            known = seen[id(before)] = (before, _queues_with(before))
        ttl, fields = known[1]
        base = guarded.layout.base
        if base in ttl:
            reached[f"condition:ttl:{verb}"] += 1
        if base in fields:
            reached[f"condition:fields:{verb}"] += 1
    return reached


def _long_labels(reached: Counter[str], resolved: Resolved, reply: Reply, before: Snapshot) -> None:
    """Counters and tokens past one digit: a claim of a tenth attempt or more, a fence that held or
    refused a multi-digit token, a sweep of a lease stalled nine times or more."""
    transition, guarded = resolved.transition, resolved.guarded
    if transition is None or guarded is None:
        return
    layout = guarded.layout
    claimed = isinstance(reply, list) and len(reply) == 3 and isinstance(reply[2], int) and reply[2] >= 10
    if Increment(ATTEMPTS) in transition.increments and claimed:  # CLAIM: its reply's attempts
        reached["long:claimed"] += 1
    if transition.fenced and transition.rows is Rows.JOB_ARG:
        token = guarded.args[1]
        stored = (hash_fields(before, layout.row(guarded.job)) or {}).get(b"attempts")
        stored_int = _int_at(stored) if stored is not None else None
        if isinstance(token, int) and stored_int is not None and stored_int >= 10:
            kind = reply_kind(transition.verb, reply)
            if token == stored_int and kind not in ("fenced",) and not kind.startswith(("error", "refused")):
                reached["long:fenced-held"] += 1
            elif token != stored_int and kind == "fenced":
                reached["long:fenced-stale"] += 1
    if Increment(STALLED) in transition.increments:  # SWEEP: the stalled counts of the leases it selects
        for member in zset(before, layout.active) or {}:
            stalled = (hash_fields(before, layout.row(member)) or {}).get(b"stalled")
            if stalled is not None and (_int_at(stalled) or 0) >= 9:
                reached["long:stalled"] += 1
                break


def _invariant_labels(reached: Counter[str], moves: Moves, kind: str, moved: bool) -> None:
    """An invariant counts as exercised when a step gave it something to hold."""
    if moves is Moves.ENQUEUED and moved:
        reached["invariant:placement"] += 1
    if (moves is Moves.COMPLETED and moved) or (moves is Moves.DEAD_LETTERED and kind == "dead"):
        reached["invariant:metrics"] += 1
    if moves is Moves.COMPLETED and moved:
        reached["invariant:done-final"] += 1
    if moves is Moves.REVIVED and moved:
        reached["invariant:revive-dead-only"] += 1


def merge(counters: Iterable[Counter[str]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for counter in counters:
        total.update(counter)
    return total


def missing(reached: Counter[str]) -> list[str]:
    return [label for label in REQUIRED if reached[label] == 0]


TABLE_LABEL_WIDTH = 90


def table(reached: Counter[str]) -> str:
    """The coverage table: every required label with its count, then, as a second section, every
    other label reached (error replies, refusals), one a row: a table that fits a terminal and a
    diff, rather than one line of thousands of characters."""
    extra = sorted(label for label in reached if label not in REQUIRED)
    # labels past TABLE_LABEL_WIDTH are cut (with "…") so that no row is longer than ~100 characters
    width = min(max(len(label) for label in (*REQUIRED, *extra)), TABLE_LABEL_WIDTH)

    def row(label: str, count: int) -> str:
        shown = label if len(label) <= width else label[: width - 1] + "…"
        return f"{shown:<{width}}  {count:>7}"

    lines = [f"{'behaviour':<{width}}  {'count':>7}"]
    lines += [row(label, reached[label]) + ("  MISSING" if reached[label] == 0 else "") for label in REQUIRED]
    if extra:
        lines += ["", f"{'also reached (outside the required set)':<{width}}  {'count':>7}"]
        lines += [row(label, reached[label]) for label in extra]
    return "\n".join(lines)


FOLDED_MISSING = 40  # at most this many missing labels on the terminal; coverage.txt lists them all


def folded(reached: Counter[str]) -> str:
    """The coverage table as the terminal shows it: one line when every required label was reached,
    else that line and the labels not reached (coverage.txt keeps the whole table)."""
    absent = missing(reached)
    others = sum(1 for label in reached if label not in REQUIRED)
    total = len(REQUIRED)
    if not absent:
        return (f"behaviour coverage: all {total:,} required labels reached, and {others:,} others "
                "(the whole table: coverage.txt, or --coverage full)")  # fmt: skip
    lines = [f"behaviour coverage: {total - len(absent):,} of {total:,} required labels reached; "
             f"not reached ({len(absent):,}; the whole table: coverage.txt, or --coverage full):"]  # fmt: skip
    lines += [f"  {label}  MISSING" for label in absent[:FOLDED_MISSING]]
    if len(absent) > FOLDED_MISSING:
        lines.append(f"  ... and {len(absent) - FOLDED_MISSING:,} more (coverage.txt)")
    return "\n".join(lines)
