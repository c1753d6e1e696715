"""The parity contract as data: one rule per row of the spec, each a precondition and an outcome.

`judge` is pure: it takes everything observed at one step and returns a verdict. A step matches
exactly, or matches the expected outcome of one rule (D1–D9; N1 is handled by setting epochs
aside and checking them), or is a divergence with the reason spelled out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from difftest import errors
from difftest.calls import Call
from difftest.commands import TRANSITIONS, base_key
from difftest.guards import GuardError, check_call
from difftest.history import BeginClaim, EndClaim, RawWrite, Step
from difftest.model import (
    OVERFLOW,
    Outcome,
    claim,
    hash_fields,
    kind_of,
    next_counter,
    select,
    sweep,
    zset,
)
from difftest.replies import ErrorReply, NotSent, Refused, Reply
from difftest.snapshot import Epochs, Snapshot

LUA_COUNTER_ERRORS = {
    "NOTINT": "ERR hash value is not an integer",
    "OVERFLOW": "ERR increment or decrement would overflow",
}
NATIVE_ERROR_CODES = {"WRONGTYPE": "WRONGTYPE", "NOTINT": "EMQ NOTINT", "OVERFLOW": "EMQ OVERFLOW",
                      "LANE": "EMQ LANE", "NOPERM": "NOPERM"}  # fmt: skip


@dataclass(frozen=True)
class Rule:
    """One row of the contract: where the native executor may differ, and how exactly."""

    id: str
    transitions: str
    precondition: str
    lua: str
    native: str
    resync: bool = True


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "D1",
            "CLAIM",
            "PAUSE or RESUME lands between the Lua host's paused? read and its script",
            "decides on the stale read",
            "decides atomically on the state at its single round trip",
        ),
        Rule(
            "D2",
            "CLAIM",
            "meta answers the paused read with an error (WRONGTYPE, NOPERM)",
            "empty, nothing written",
            "that error, nothing written",
        ),
        Rule(
            "D3",
            "any",
            "a key the transition touches is wrong-typed (or denied) and the script reaches it only after a write",
            "partial writes, then the error",
            "the error, nothing written",
        ),
        Rule(
            "D4",
            "any",
            "a counter the transition increments is not an integer or +1 overflows",
            "partial writes, then the error",
            "EMQ NOTINT / EMQ OVERFLOW, nothing written",
        ),
        Rule(
            "D5",
            "CLAIM",
            "active is not a zset",
            "pop, attempts+1, state active, then WRONGTYPE",
            "WRONGTYPE, nothing written",
        ),
        Rule(
            "D6",
            "any",
            "arguments out of shape, layout or range",
            "refused by the host before sending",
            "EMQ SHAPE/LAYOUT/ARG/NOTINT/OVERFLOW, nothing written",
            resync=False,
        ),
        Rule("N1", "CLAIM, EXTEND", "-", "no lease_epoch", "lease_epoch = the server's run_id", resync=False),
        Rule(
            "N2",
            "EXTEND",
            "the caller may read but not write the row (project decision, docs/decisions.md)",
            "extends: the script never writes the row",
            "NOPERM, nothing written: re-stamping lease_epoch writes the row",
        ),
        Rule(
            "D7",
            "SWEEP",
            "an expired member's lease_epoch is missing or not the current run_id",
            "counted: stalled+1, may dead-letter",
            "exempt: back to pending at 0, counted in exempt",
        ),
        Rule(
            "D8",
            "SWEEP",
            "a selected member's row is not a hash, has a group field, or a bad stalled",
            "processes members in order, errors at the first bad one",
            "refuses the whole sweep",
        ),
        Rule(
            "D9",
            "PROMOTE",
            "a due member's row exists but is not a hash",
            "processes members in order, errors at the first bad one",
            "WRONGTYPE, nothing written",
        ),
    )
}


@dataclass(frozen=True)
class StepView:
    """Everything observed at one step (epochs set aside in the snapshots)."""

    index: int
    step: Step
    call: Call | None  # the transition call this step sends (an EndClaim: its begun call)
    user: str | None
    now_ms: int
    run_id: bytes
    before: Snapshot
    before_epochs: Epochs
    lua_reply: Reply
    native_reply: Reply
    lua_after: Snapshot
    native_after: Snapshot
    paused_read: Reply = None  # an EndClaim: what the Lua host's read at the begin answered
    denied: frozenset[tuple[bytes, str]] = field(default_factory=frozenset)  # (key, read|write)


@dataclass(frozen=True)
class Verdict:
    kind: str  # match, allowed, divergence
    rule: str | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.kind != "divergence"


MATCH = Verdict("match")


def replies_equal(left: Reply, right: Reply) -> bool:
    """Replies as values; error replies by their code (a script's error carries its location)."""
    if isinstance(left, ErrorReply) and isinstance(right, ErrorReply):
        return left.code == right.code
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(replies_equal(a, b) for a, b in zip(left, right, strict=True))
    return left == right


def _error_code(reply: Reply) -> str | None:
    return reply.code if isinstance(reply, ErrorReply) else None


# -- rules: each returns None when its precondition does not hold, else (outcome ok, detail) ------

RuleCheck = Callable[[StepView], tuple[bool, str] | None]


def _guarded(view: StepView) -> tuple[bytes, list[int | bytes]] | None:
    if view.call is None:
        return None
    try:
        return check_call(view.call.verb, view.call.numkeys, view.call.rest)
    except GuardError:
        return None


def _native_refused(view: StepView, code: str) -> tuple[bool, str]:
    got = _error_code(view.native_reply)
    if got != code:
        return False, f"native should answer {code}, answered {view.native_reply!r}"
    if view.native_after != view.before:
        return False, "native should write nothing, but its keyspace changed"
    return True, ""


def _lua_error_after_writes(view: StepView, code: str) -> tuple[bool, str]:
    if _error_code(view.lua_reply) != code:
        return False, f"lua should fail with {code}, answered {view.lua_reply!r}"
    return True, ""


def _both(*checks: tuple[bool, str]) -> tuple[bool, str]:
    for ok, detail in checks:
        if not ok:
            return False, detail
    return True, ""


def _exact(side: str, reply: Reply, after: Snapshot, expected: Outcome) -> tuple[bool, str]:
    if not replies_equal(reply, expected.reply):  # type: ignore[arg-type]
        return False, f"{side} should answer {expected.reply!r}, answered {reply!r}"
    if after != expected.after:
        return False, f"{side}'s keyspace is not the one the rule expects"
    return True, ""


def rule_d6(view: StepView) -> tuple[bool, str] | None:
    if view.call is None or isinstance(view.step, BeginClaim):
        return None
    try:
        check_call(view.call.verb, view.call.numkeys, view.call.rest)
        return None
    except GuardError as refusal:
        message = refusal.message
    if view.lua_reply != Refused(message):
        return False, f"the lua host should refuse with {message!r}, answered {view.lua_reply!r}"
    if not (isinstance(view.native_reply, ErrorReply) and view.native_reply.message == message):
        return False, f"native should answer {message!r}, answered {view.native_reply!r}"
    if view.native_after != view.before or view.lua_after != view.before:
        return False, "a refused call must write nothing"
    return True, ""


def _meta_problem(view: StepView, queue: bytes) -> str | None:
    meta = base_key(queue) + b"meta"
    if (meta, "read") in view.denied:
        return "NOPERM"
    if kind_of(view.before, meta) not in ("none", "hash"):
        return "WRONGTYPE"
    return None


def _paused_now(view: StepView, queue: bytes) -> bool:
    return b"paused" in (hash_fields(view.before, base_key(queue) + b"meta") or {})


def rule_d2(view: StepView) -> tuple[bool, str] | None:
    guarded = _guarded(view)
    if guarded is None or view.call is None or view.call.verb != "CLAIM" or isinstance(view.step, BeginClaim):
        return None
    queue, (lease, *_) = guarded
    problem = _meta_problem(view, queue)
    if problem is None:
        return None
    if isinstance(view.step, EndClaim) and view.paused_read is None:
        # the host read nil before meta went bad: it sends the script, which never reads meta
        lua_ok = _exact("lua", view.lua_reply, view.lua_after, claim(view.before, queue, int(lease), view.now_ms))
    else:
        lua_ok = (
            view.lua_reply == [] and view.lua_after == view.before,
            f"lua should answer empty and write nothing, answered {view.lua_reply!r}",
        )
    return _both(lua_ok, _native_refused(view, problem))


def rule_d1(view: StepView) -> tuple[bool, str] | None:
    guarded = _guarded(view)
    if not isinstance(view.step, EndClaim) or guarded is None or _meta_problem(view, guarded[0]):
        return None
    queue, (lease, *_) = guarded
    stale, current = view.paused_read is not None, _paused_now(view, queue)
    if stale == current:
        return None
    claimed = claim(view.before, queue, int(lease), view.now_ms)
    empty = Outcome([], view.before)
    if stale:  # the host read "paused": the Lua side answers empty; the native claims
        lua_check = _exact("lua", view.lua_reply, view.lua_after, empty)
        if claimed.error is not None:  # its claim meets a bad key: the native outcome of D3-D5
            return _both(lua_check, _native_refused(view, NATIVE_ERROR_CODES[claimed.error]))
        return _both(lua_check, _exact("native", view.native_reply, view.native_after, claimed))
    # the host read "not paused" and sent the script; the native sees the pause and answers empty
    native_check = _exact("native", view.native_reply, view.native_after, empty)
    return _both(_lua_class_or_exact(view, claimed), native_check)


def _claim_reaches_pop(view: StepView) -> bytes | None:
    """The queue, when this CLAIM gets past the pause check on both sides."""
    guarded = _guarded(view)
    if guarded is None or view.call is None or view.call.verb != "CLAIM" or isinstance(view.step, BeginClaim):
        return None
    queue = guarded[0]
    if _meta_problem(view, queue) or _paused_now(view, queue):
        return None
    if isinstance(view.step, EndClaim) and view.paused_read is not None:
        return None
    return queue


def _pending_head_row(before: Snapshot, queue: bytes) -> bytes | None:
    pending = zset(before, base_key(queue) + b"pending")
    if not pending:
        return None
    head = min(pending.items(), key=lambda item: (float(item[1]), item[0]))[0]
    return base_key(queue) + b"job:" + head


def rule_d5(view: StepView) -> tuple[bool, str] | None:
    queue = _claim_reaches_pop(view)
    if queue is None or kind_of(view.before, base_key(queue) + b"active") in ("none", "zset"):
        return None
    row = _pending_head_row(view.before, queue)
    fields = hash_fields(view.before, row) if row else None
    if fields is None or isinstance(next_counter(fields.get(b"attempts")), str):
        return None
    return _both(_lua_error_after_writes(view, "WRONGTYPE"), _native_refused(view, "WRONGTYPE"))


def _sweep_args(view: StepView) -> tuple[bytes, int, int] | None:
    guarded = _guarded(view)
    if guarded is None or view.call is None or view.call.verb != "SWEEP":
        return None
    queue, (max_stalled, limit) = guarded
    return queue, int(max_stalled), int(limit)


def _lua_refused_by_acl(view: StepView) -> bool:
    """The script stopped at a key the caller may not touch (its partial writes are not judged,
    as in D3): an ACL refusal, and a denied key among those this call may touch."""
    guarded = _guarded(view)
    if guarded is None or _error_code(view.lua_reply) != "NOPERM":
        return False
    return any((key, perm) in view.denied for key, _ in _touched_keys(view, guarded[0]) for perm in ("read", "write"))


def _lua_class_or_exact(view: StepView, expected: Outcome) -> tuple[bool, str]:
    if _lua_refused_by_acl(view):
        return True, ""
    if expected.error is None:
        return _exact("lua", view.lua_reply, view.lua_after, expected)
    reply = view.lua_reply
    if expected.error in LUA_COUNTER_ERRORS:
        text = LUA_COUNTER_ERRORS[expected.error]
        ok = isinstance(reply, ErrorReply) and reply.message.startswith(text)
        return ok, "" if ok else f"lua should fail with {text!r}, answered {reply!r}"
    return _lua_error_after_writes(view, expected.error)


def _has_exempt(view: StepView, queue: bytes, limit: int) -> bool:
    """Whether the native's verdicts, in member order, reach an Exempt before any refusal."""
    active = zset(view.before, base_key(queue) + b"active") or {}
    for member, _ in select(active, view.now_ms, limit):
        row = base_key(queue) + b"job:" + member
        fields = hash_fields(view.before, row)
        if kind_of(view.before, row) == "none":
            continue
        if fields is None or b"group" in fields:
            return False
        if view.before_epochs.get(row) != view.run_id:
            return True
        if isinstance(next_counter(fields.get(b"stalled")), str):
            return False
    return False


def rule_d7(view: StepView) -> tuple[bool, str] | None:
    args = _sweep_args(view)
    if args is None or not _has_exempt(view, args[0], args[2]):
        return None
    native = sweep(view.before, view.before_epochs, *args, view.now_ms, view.run_id)
    lua = sweep(view.before, view.before_epochs, *args, view.now_ms, None)
    if native.error is not None:
        # an exempt member goes back to pending: a wrong-typed pending (or a bad metrics count
        # for a member that dies) refuses the sweep as in D3/D4, where the scripts count it
        native_check = _native_refused(view, NATIVE_ERROR_CODES[native.error])
    else:
        native_check = _exact("native", view.native_reply, view.native_after, native)
    return _both(_lua_class_or_exact(view, lua), native_check)


def rule_d8(view: StepView) -> tuple[bool, str] | None:
    args = _sweep_args(view)
    if args is None:
        return None
    queue, _, limit = args
    active = zset(view.before, base_key(queue) + b"active") or {}
    bad_member = False
    for member, _ in select(active, view.now_ms, limit):
        row = base_key(queue) + b"job:" + member
        fields = hash_fields(view.before, row)
        if kind_of(view.before, row) not in ("none", "hash") or (
            fields is not None and (b"group" in fields or isinstance(next_counter(fields.get(b"stalled")), str))
        ):
            bad_member = True
    native = sweep(view.before, view.before_epochs, *args, view.now_ms, view.run_id)
    if not bad_member or native.error is None:
        return None
    lua = sweep(view.before, view.before_epochs, *args, view.now_ms, None)
    return _both(_lua_class_or_exact(view, lua), _native_refused(view, NATIVE_ERROR_CODES[native.error]))


def rule_d9(view: StepView) -> tuple[bool, str] | None:
    guarded = _guarded(view)
    if guarded is None or view.call is None or view.call.verb != "PROMOTE":
        return None
    queue, (limit,) = guarded
    delayed = zset(view.before, base_key(queue) + b"delayed") or {}
    rows = [base_key(queue) + b"job:" + m for m, _ in select(delayed, view.now_ms, int(limit))]
    if not any(kind_of(view.before, row) not in ("none", "hash") for row in rows):
        return None
    return _both(_lua_error_after_writes(view, "WRONGTYPE"), _native_refused(view, "WRONGTYPE"))


def rule_n2(view: StepView) -> tuple[bool, str] | None:
    guarded = _guarded(view)
    if guarded is None or view.call is None or view.call.verb != "EXTEND":
        return None
    queue, (job, *_) = guarded
    row = base_key(queue) + b"job:" + bytes(job)
    if (row, "write") not in view.denied or (row, "read") in view.denied or view.lua_reply != 1:
        return None
    return _native_refused(view, "NOPERM")


def _counters(view: StepView, queue: bytes) -> list[bytes | None]:
    """The stored values of the counters this call would increment (before any write)."""
    assert view.call is not None
    base = base_key(queue)
    verb = view.call.verb
    if verb == "CLAIM":
        row = _pending_head_row(view.before, queue)
        fields = hash_fields(view.before, row) if row else None
        return [fields.get(b"attempts")] if fields is not None else []
    metrics = {"COMPLETE": b"metrics:completed", "FAIL": b"metrics:failed", "SWEEP": b"metrics:failed"}
    if verb in metrics:
        return [(hash_fields(view.before, base + metrics[verb]) or {}).get(b"count")]
    return []


def rule_d4(view: StepView) -> tuple[bool, str] | None:
    guarded = _guarded(view)
    if guarded is None or view.call is None or isinstance(view.step, BeginClaim):
        return None
    if view.call.verb == "CLAIM" and _claim_reaches_pop(view) is None:
        return None
    bad = [c for c in map(next_counter, _counters(view, guarded[0])) if isinstance(c, str)]
    if not bad:
        return None
    error = bad[0]
    text = LUA_COUNTER_ERRORS[error]
    # the reference's reply tells whether its script got as far as the counter (past the fence)
    if not (isinstance(view.lua_reply, ErrorReply) and view.lua_reply.message.startswith(text)):
        return None
    return _native_refused(view, "EMQ OVERFLOW" if error == OVERFLOW else "EMQ NOTINT")


def _touched_keys(view: StepView, queue: bytes) -> list[tuple[bytes, str]]:
    """Keys this call may touch with the type each must have (zset or hash)."""
    assert view.call is not None
    transition = TRANSITIONS[view.call.verb]
    base = base_key(queue)
    touched = [(base + s.encode(), "hash" if s == "meta" else "zset") for s in transition.keys if s]
    args = view.call.rest[transition.numkeys :]
    verb = transition.verb
    if verb in ("EXTEND", "COMPLETE", "FAIL", "REVIVE"):
        touched.append((base + b"job:" + args[0], "hash"))
    if verb in ("COMPLETE",):
        touched.append((base + b"metrics:completed", "hash"))
    if verb in ("FAIL", "SWEEP"):
        touched.append((base + b"metrics:failed", "hash"))
    if verb == "CLAIM":
        touched.append((base + b"meta", "hash"))
        row = _pending_head_row(view.before, queue)
        if row:
            touched.append((row, "hash"))
    for verb_name, set_name in (("PROMOTE", b"delayed"), ("SWEEP", b"active")):
        if verb == verb_name:
            members = zset(view.before, base + set_name) or {}
            touched += [(base + b"job:" + m, "hash") for m, _ in select(members, view.now_ms, 2**62)]
    return touched


def rule_d3(view: StepView) -> tuple[bool, str] | None:
    guarded = _guarded(view)
    if guarded is None or view.call is None or isinstance(view.step, BeginClaim):
        return None
    touched = _touched_keys(view, guarded[0])
    wrong = any(kind_of(view.before, key) not in ("none", kind) for key, kind in touched)
    denied = any((key, perm) in view.denied for key, _ in touched for perm in ("read", "write"))
    code = _error_code(view.lua_reply)
    if not ((wrong and code == "WRONGTYPE") or (denied and code == "NOPERM")):
        return None
    if view.lua_after == view.before:
        return None  # failed on a read, before any write: both must simply match
    assert code is not None
    return _native_refused(view, code)


RULE_CHECKS: tuple[tuple[str, RuleCheck], ...] = (
    ("D6", rule_d6), ("D2", rule_d2), ("D1", rule_d1), ("D5", rule_d5), ("D7", rule_d7),
    ("D8", rule_d8), ("D9", rule_d9), ("D4", rule_d4), ("D3", rule_d3), ("N2", rule_n2),
)  # fmt: skip


def judge(view: StepView) -> Verdict:
    """A rule whose precondition holds and whose exact outcome is met allows the step; rules whose
    preconditions hold but whose outcomes are not met make it a divergence; where no rule's
    precondition holds, the two executors must match exactly. Pure.

    A rule is checked even when both sides agree: a native that quietly does what the scripts
    do where the contract demands its own outcome is a defect too.
    """
    if isinstance(view.step, RawWrite):
        # the harness's own write: its reply is not executor behaviour (a lease_epoch field the
        # Lua rows never had makes HSET answer 1 there and 0 on the native); keyspaces must match
        same = view.lua_after == view.native_after
        return MATCH if same else Verdict("divergence", reason="keyspaces differ after a raw write")
    failures = []
    for rule_id, check in RULE_CHECKS:
        result = check(view)
        if result is None:
            continue
        ok, detail = result
        if ok:  # preconditions can overlap (an ACL refusal inside an exempting sweep): one must hold
            return Verdict("allowed", rule_id)
        failures.append((rule_id, f"{rule_id} applies but {detail}"))
    if failures:
        return Verdict("divergence", failures[0][0], "; ".join(reason for _, reason in failures))
    same_reply = isinstance(view.native_reply, NotSent) or replies_equal(view.lua_reply, view.native_reply)
    if same_reply and view.lua_after == view.native_after:
        return MATCH
    what = "replies differ" if not same_reply else "keyspaces differ"
    return Verdict("divergence", reason=f"{what} and no contract row allows it")


@dataclass
class Exposure:
    """What a history has done so far that lets a contract row apply (cheap flags)."""

    corrupted: bool = False  # a raw write happened
    restarted: bool = False  # a restart or crash happened
    users: bool = False  # steps run as restricted users


def may_need_rules(step: Step, call: Call | None, exposure: Exposure) -> bool:
    """False when no rule's precondition can hold: the step must then simply match (fast path)."""
    if call is None:
        return False
    if isinstance(step, EndClaim) or exposure.corrupted or exposure.users:
        return True
    if exposure.restarted and call.verb == "SWEEP":
        return True
    try:
        check_call(call.verb, call.numkeys, call.rest)
    except GuardError:
        return True
    return False


def native_error_text(code: str) -> str:
    return errors.BY_CODE.get(code, code)
