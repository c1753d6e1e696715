"""The parity contract as data: one `Rule` per row of the spec, each a precondition and an exact outcome.

Every rule is a pure function over a `StepView` (everything observed at one step, with the state
before it) answering None when its precondition does not hold, else whether its exact outcome is
met. The fold in `difftest/judge/verdicts.py` applies them; nothing here reads a server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache

from difftest.history.resolve import Guarded, Resolved
from difftest.spec.commands import COMPLETED, FAILED, SETS, TRANSITIONS, Layout, Rows, Transition, Verb
from difftest.spec.model import (
    OVERFLOW,
    Outcome,
    claim,
    hash_fields,
    kind_of,
    lua_number,
    next_counter,
    select,
    sweep,
    zset,
)
from difftest.spec.replies import Died, ErrorReply, NotSent, Refused, Reply
from difftest.spec.snapshot import Epochs, Members, Snapshot, diff, same_keys

LUA_COUNTER_ERRORS = {
    "NOTINT": "ERR hash value is not an integer",
    "OVERFLOW": "ERR increment or decrement would overflow",
}
NATIVE_ERROR_CODES = {"WRONGTYPE": "WRONGTYPE", "NOTINT": "EMQ NOTINT", "OVERFLOW": "EMQ OVERFLOW",
                      "LANE": "EMQ LANE", "NOPERM": "NOPERM"}  # fmt: skip
READ, WRITE = "read", "write"
Denied = frozenset[tuple[bytes, str]]  # (key, read|write) the step's user may not touch


@dataclass(frozen=True)
class StepView:
    """Everything observed at one step, and the state before it (epochs set aside in snapshots)."""

    resolved: Resolved
    now_ms: int
    run_id: bytes  # the native server's run_id at this step
    before: Snapshot
    before_epochs: Epochs
    lua_reply: Reply
    native_reply: Reply
    lua_after: Snapshot
    native_after: Snapshot
    paused_read: Reply = None  # an end: what the Lua host's `paused?` read at its begin answered
    denied: Denied = field(default_factory=frozenset)
    native_epochs: Epochs = field(default_factory=dict)  # after the step
    expected_epochs: Epochs = field(default_factory=dict)  # what N1 says they must be after it

    @property
    def guarded(self) -> Guarded | None:
        return self.resolved.guarded

    @property
    def transition(self) -> Transition | None:
        return self.resolved.transition

    def verb_is(self, verb: Verb) -> bool:
        return self.resolved.call is not None and self.resolved.call.verb == verb


RuleResult = tuple[bool, str] | None  # None: the precondition does not hold; else (outcome met, why not)
RuleCheck = Callable[[StepView], RuleResult]


@dataclass(frozen=True)
class Rule:
    """One row of the contract: where the native executor may differ, and how exactly."""

    id: str
    verbs: tuple[Verb, ...]  # the transitions it concerns; empty: any
    precondition: str
    lua: str
    native: str
    check: RuleCheck
    resync: bool = True  # after the step the Lua server takes the native's keyspace
    # the Lua side may stop half-way (its writes before the error stay, and are not judged): the
    # invariants are not held on that step
    lua_partial_writes: bool = False
    # held on every step beside the others (N1): its failure is a divergence, it allows nothing
    always: bool = False
    # applies although the server refuses the native command on its declared keys (the caller's
    # ACL): the rows of what the Lua host decides before any script reaches the server (D6, N3, N4)
    host_side: bool = False
    # its place in the spec's own table (docs/contract.md: D1-D6, N1, D7-D9); 0: a row of this
    # project's (N2...: docs/contract-decisions.md), shown after the spec's in its number order (TABLE_ORDER)
    spec_row: int = 0

    @property
    def transitions(self) -> str:
        return ", ".join(self.verbs) if self.verbs else "any"


@dataclass(frozen=True)
class Verdict:
    kind: str  # match, allowed, divergence
    rule: str | None = None
    reason: str = ""
    # a divergence's finding: "" when the executors differ (the pair), SPEC when they agree with each
    # other and not with the spec's model (difftest/spec/model.py): a shared defect, or a defect of the model
    finding: str = field(default="", compare=False)
    # the step the spec's model did not predict: the kind (model.UNJUDGED_KINDS); "" when it did
    unjudged: str = field(default="", compare=False)
    # what the spec's model predicted at a divergence (a model.Prediction), for its report
    prediction: object = field(default=None, compare=False, repr=False)

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


def same_keyspace(left: Snapshot | None, right: Snapshot | None) -> bool:
    """Snapshots as values, an object with itself at once: replay hands back the same snapshot
    while a keyspace does not change, and == walks a dict key by key even against itself; where
    the snapshots say which keys were written between them, only those are compared."""
    if left is right:
        return True
    if left is None or right is None:
        return False
    return same_keys(left, right)


def _error_code(reply: Reply) -> str | None:
    return reply.code if isinstance(reply, ErrorReply) else None


# The server's refusals of a script at its first write (script.c: on a read-only replica, and over
# the memory limit when that write is a deny-oom command): the script stops before it writes
# anything, and the module must refuse at the same point (docs/contract-decisions.md, "The memory limit",
# "A read-only replica as a call target")
# (and NOREPLICAS, MISCONF: a server that denies every write, "Writes the server denies")
FIRST_WRITE_REFUSALS = frozenset({"READONLY", "NOREPLICAS", "MISCONF", "OOM"})


def _refused_at_first_write(view: StepView) -> Verdict | None:
    """A call the server refused at the Lua side's first write: no row about what the script does
    after its reads applies (it never got there, nor did the module), and both sides must answer
    that refusal and write nothing. None when the Lua side was not so refused."""
    code = _error_code(view.lua_reply)
    if code not in FIRST_WRITE_REFUSALS or not view.resolved.sends_transition:
        return None
    if _error_code(view.native_reply) != code:
        return Verdict("divergence", reason=f"the server refused the script at its first write ({code}); the native "
                                            "did not refuse it so: replies differ")  # fmt: skip
    if not (same_keyspace(view.lua_after, view.before) and same_keyspace(view.native_after, view.before)):
        return Verdict("divergence", reason=f"both were refused at the first write ({code}), yet a keyspace changed")
    return MATCH


# -- what a call reaches -------------------------------------------------------------------------


def pending_head(before: Snapshot, layout: Layout) -> bytes | None:
    """The id CLAIM pops: pending's first member, in zset order."""
    pending = zset(before, layout.pending)
    if not pending:
        return None
    if isinstance(pending, Members):
        return pending.ordered()[0][1]
    return min(pending.items(), key=lambda item: (float(item[1]), item[0]))[0]


def reached_rows(transition: Transition, guarded: Guarded, before: Snapshot, now_ms: int) -> list[bytes]:
    """The job rows a call reaches besides its declared keys (every due or expired member's, past
    the call's limit too: a ghost's row does not exist, yet reaching it needs the permission)."""
    layout = guarded.layout
    match transition.rows:
        case Rows.JOB_ARG:
            return [layout.row(guarded.job)]
        case Rows.PENDING_HEAD:
            head = pending_head(before, layout)
            return [] if head is None else [layout.row(head)]
        case Rows.DUE_DELAYED | Rows.EXPIRED_ACTIVE:
            source = layout.delayed if transition.rows is Rows.DUE_DELAYED else layout.active
            return [layout.row(member) for member, _ in select(zset(before, source) or {}, now_ms, 2**62)]
    return []


def touched_keys(view: StepView) -> list[tuple[bytes, str]]:
    """Keys this call may touch, with the type each must have (zset, hash, or any)."""
    transition, guarded = view.transition, view.guarded
    assert transition is not None and guarded is not None
    layout = guarded.layout
    touched = [(layout.key(s), "hash" if s == "meta" else "zset") for s in transition.keys if s]
    # ENQUEUE asks only whether its row exists: a row of any type is a duplicate
    row_kind = "any" if transition.rows is Rows.JOB_ARG and transition.verb is Verb.ENQUEUE else "hash"
    touched += [(layout.metrics(which), "hash") for which in transition.metrics]
    if transition.reads_meta:
        touched.append((layout.meta, "hash"))
    touched += [(row, row_kind) for row in reached_rows(transition, guarded, view.before, view.now_ms)]
    return touched


def checked_keys(resolved: Resolved) -> list[bytes]:
    """The keys the server checks against the caller's ACL before the native command runs: its
    fixed key positions (first 2, last 1 + the table's numkeys), whatever the call's numkeys says;
    none when the call is too short to hold them (the command then answers its own SHAPE error)."""
    transition, call = resolved.transition, resolved.call
    if transition is None or call is None or len(call.rest) < transition.numkeys:
        return []
    return list(call.rest[: transition.numkeys])


def acl_probe_keys(resolved: Resolved, before: Snapshot) -> tuple[bytes, ...]:
    """The derived keys whose permissions the judge may ask about for this step's user: the queue's
    meta and metrics, every row the keyspace holds for it, the rows of every member of its sets, and
    the id argument's row. Replay asks the server (ACL DRYRUN) before judging, at every step: a
    tuple, so that the common answer (no user: none) is the empty tuple, not a new list."""
    guarded = resolved.guarded
    if resolved.user is None:
        return ()
    if guarded is None:  # refused by the host: the server still checks the native command's keys
        return tuple(dict.fromkeys(checked_keys(resolved)))
    layout = guarded.layout
    transition = resolved.transition
    verb = None if transition is None else transition.verb
    keys = [*_fixed_probe_keys(layout.queue, verb), *_rows_in(before, layout)]
    if transition is not None and transition.rows is Rows.JOB_ARG:
        keys.append(layout.row(guarded.job))
    return tuple(dict.fromkeys(keys))


@lru_cache(maxsize=1024)
def _fixed_probe_keys(queue: bytes, verb: str | None) -> tuple[bytes, ...]:
    """What acl_probe_keys asks about whatever the keyspace holds (a pure function of the queue and
    the verb, cached): the queue's derived keys, then the verb's declared keys but the base (the
    server checks those before either executor runs)."""
    layout = Layout(queue)
    keys = layout.derived()
    if verb is not None:
        keys += [key for key in layout.declared(TRANSITIONS[verb]) if key != layout.base]
    return tuple(keys)


# the last keyspace's rows of one queue, by the snapshot's identity: a restricted caller's steps come
# in runs on one queue while the keyspace does not change (replay then hands back the same snapshot)
_rows_of: tuple[Snapshot | None, bytes, tuple[bytes, ...]] = (None, b"", ())


def _rows_in(before: Snapshot, layout: Layout) -> tuple[bytes, ...]:
    """The queue's rows the keyspace holds, then the rows of its sets' members (in that order,
    duplicates kept: acl_probe_keys drops them)."""
    global _rows_of
    last, queue, rows = _rows_of
    if last is before and queue == layout.queue:
        return rows
    found = [k for k in before if k.startswith(layout.row_prefix)]
    for name in SETS:
        entry = before.get(layout.key(name))
        if entry is not None and isinstance(entry.value, Mapping):
            found += [layout.row(member) for member in entry.value]
    rows = tuple(found)
    _rows_of = (before, layout.queue, rows)
    return rows


# -- outcome checks ------------------------------------------------------------------------------


def _native_refused(view: StepView, code: str) -> tuple[bool, str]:
    got = _error_code(view.native_reply)
    if got != code:
        return False, f"native should answer {code}, answered {view.native_reply!r}"
    if not same_keyspace(view.native_after, view.before):
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
    if not same_keyspace(after, expected.after):
        return False, f"{side}'s keyspace is not the one the rule expects"
    return True, ""


def _lua_refused_by_acl(view: StepView) -> bool:
    """The script stopped at a key the caller may not touch (its partial writes are not judged,
    as in D3): an ACL refusal, and a denied key among those this call may touch."""
    if view.guarded is None or _error_code(view.lua_reply) != "NOPERM" or not view.denied:
        return False
    return any((key, perm) in view.denied for key, _ in touched_keys(view) for perm in (READ, WRITE))


def _lua_class_or_exact(view: StepView, expected: Outcome) -> tuple[bool, str]:
    """The Lua side's outcome: exact when the reference script succeeds; when it fails, the error's
    class only (its partial writes are the retired scripts' behaviour, not judged)."""
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


def _native_outcome(view: StepView, expected: Outcome, reads: list[bytes]) -> tuple[bool, str]:
    """The native side's predicted outcome, held to the caller's permissions: the refusal the
    prediction names (D3-D5, D8); NOPERM with nothing written when it would read a key the caller
    may not read or write one the caller may not write (the native checks every derived key before
    its first write); else the exact outcome."""
    if expected.error is not None:
        return _native_refused(view, NATIVE_ERROR_CODES[expected.error])
    written = [] if expected.after is None else list(diff(view.before, expected.after))
    if view.guarded is not None:
        # a metrics count moves by HINCRBY, which reads the hash it writes: a caller who may only
        # write it is refused, by the native as by the script's HINCRBY (a sweep that exempts one
        # member and dead-letters another, by a user with %W on metrics:failed: null run, seed 8)
        counts = {view.guarded.layout.metrics(which) for which in (FAILED, COMPLETED)}
        reads = [*reads, *(key for key in written if key in counts)]
    if any((key, READ) in view.denied for key in reads) or any((key, WRITE) in view.denied for key in written):
        return _native_refused(view, "NOPERM")
    return _exact("native", view.native_reply, view.native_after, expected)


def _native_claims(view: StepView, expected: Outcome) -> tuple[bool, str]:
    """The native side's CLAIM on the state at its round trip (it reads meta and the head's row)."""
    assert view.guarded is not None
    layout = view.guarded.layout
    head = pending_head(view.before, layout)
    return _native_outcome(view, expected, [layout.meta, *([layout.row(head)] if head is not None else [])])


# -- the CLAIM's pause decision, on each side ------------------------------------------------------


def meta_problem(view: StepView) -> str | None:
    """What a read of meta answers the caller with now, if it is an error: NOPERM, WRONGTYPE."""
    assert view.guarded is not None
    meta = view.guarded.layout.meta
    if (meta, READ) in view.denied:
        return "NOPERM"
    if kind_of(view.before, meta) not in ("none", "hash"):
        return "WRONGTYPE"
    return None


def _paused_now(view: StepView) -> bool:
    assert view.guarded is not None
    return b"paused" in (hash_fields(view.before, view.guarded.layout.meta) or {})


def _claim_call(view: StepView) -> bool:
    """A CLAIM that runs now on the native side (a whole call, or a split claim's end)."""
    return view.guarded is not None and view.verb_is(Verb.CLAIM) and view.resolved.sends_transition


def _lua_read(view: StepView) -> Reply:
    """What the Lua host's `paused?` read answered: at the begin for a split claim; for a whole
    call the read and the native's round trip see the same state (nil, or the flag, or the error)."""
    if view.resolved.is_end:
        return view.paused_read
    problem = meta_problem(view)
    if problem is not None:
        return ErrorReply(problem)
    return b"1" if _paused_now(view) else None


def _native_decision(view: StepView) -> str:
    """The native CLAIM's pause check on the state at its single round trip: error, paused or free."""
    if meta_problem(view) is not None:
        return "error"
    return "paused" if _paused_now(view) else "free"


# -- the rules ---------------------------------------------------------------------------------------


def rule_d6(view: StepView) -> RuleResult:
    resolved = view.resolved
    if resolved.refusal is None or not resolved.sends_transition:
        return None
    message = resolved.refusal
    if view.lua_reply != Refused(message):
        return False, f"the lua host should refuse with {message!r}, answered {view.lua_reply!r}"
    # the host's guards run before anything is sent; the server checks the caller's ACL on the
    # native command's keys before the command's own argument rules (docs/contract-decisions.md)
    refused_by_acl = any((key, perm) in view.denied for key in checked_keys(resolved) for perm in (READ, WRITE))
    if refused_by_acl:
        if _error_code(view.native_reply) != "NOPERM":
            return False, f"native should be refused by the server (NOPERM), answered {view.native_reply!r}"
    elif resolved.aborted:  # queued in a transaction the server discarded: the command never ran
        if _error_code(view.native_reply) != "EXECABORT":
            return False, f"native's transaction was discarded (EXECABORT), answered {view.native_reply!r}"
    elif not (isinstance(view.native_reply, ErrorReply) and view.native_reply.message == message):
        return False, f"native should answer {message!r}, answered {view.native_reply!r}"
    if not same_keyspace(view.native_after, view.before) or not same_keyspace(view.lua_after, view.before):
        return False, "a refused call must write nothing"
    return True, ""


def rule_d2(view: StepView) -> RuleResult:
    """The Lua host's read itself answered an error (any non-nil reply reads as paused), and the
    native meets the same error on its round trip."""
    if not _claim_call(view):
        return None
    if not isinstance(_lua_read(view), ErrorReply):
        return None
    problem = meta_problem(view)
    if problem is None:
        return None  # a split claim whose meta was mended after the read: D1's case
    lua_ok = (
        view.lua_reply == [] and same_keyspace(view.lua_after, view.before),
        f"lua should answer empty and write nothing, answered {view.lua_reply!r}",
    )
    return _both(lua_ok, _native_refused(view, problem))


def _as_the_script_replies(expected: Outcome) -> Outcome:
    """A CLAIM's outcome as the script gives it: its reply's attempts a Lua number, the rows alike."""
    reply = expected.reply
    if isinstance(reply, list) and len(reply) == 3 and isinstance(reply[2], int):
        return replace(expected, reply=[reply[0], reply[1], lua_number(reply[2])])
    return expected


def rule_d1(view: StepView) -> RuleResult:
    """A split claim whose Lua read (at its begin) decided otherwise than the native decides on the
    state at its end: a PAUSE, a RESUME or a write to meta landed between."""
    if not _claim_call(view) or not view.resolved.is_end:
        return None
    stale_paused = view.paused_read is not None
    native = _native_decision(view)
    if (stale_paused and native == "paused") or (not stale_paused and native == "free"):
        return None  # both decide alike: no interleaving mattered
    if isinstance(view.paused_read, ErrorReply) and native == "error":
        return None  # D2's case
    assert view.guarded is not None
    (lease, *_) = view.guarded.args
    claimed = claim(view.before, view.guarded.layout, int(lease), view.now_ms)
    empty = Outcome([], view.before)
    lua_check = (
        _exact("lua", view.lua_reply, view.lua_after, empty)
        if stale_paused
        else _lua_class_or_exact(view, _as_the_script_replies(claimed))  # past 2^53: N5's rounding
    )
    if native == "error":
        problem = meta_problem(view)
        assert problem is not None
        native_check = _native_refused(view, problem)
    elif native == "paused":
        native_check = _exact("native", view.native_reply, view.native_after, empty)
    else:
        native_check = _native_claims(view, claimed)
    return _both(lua_check, native_check)


def _claim_reaches_pop(view: StepView) -> bool:
    """This CLAIM gets past the pause check on both sides."""
    if not _claim_call(view) or meta_problem(view) or _paused_now(view):
        return False
    return not (view.resolved.is_end and view.paused_read is not None)


def rule_d5(view: StepView) -> RuleResult:
    if not _claim_reaches_pop(view):
        return None
    assert view.guarded is not None
    layout = view.guarded.layout
    if kind_of(view.before, layout.active) in ("none", "zset"):
        return None
    head = pending_head(view.before, layout)
    fields = hash_fields(view.before, layout.row(head)) if head is not None else None
    if fields is None or isinstance(next_counter(fields.get(b"attempts")), str):
        return None
    return _both(_lua_error_after_writes(view, "WRONGTYPE"), _native_refused(view, "WRONGTYPE"))


def _sweep_args(view: StepView) -> tuple[Layout, int, int] | None:
    if view.guarded is None or not view.verb_is(Verb.SWEEP):
        return None
    max_stalled, limit = view.guarded.args
    return view.guarded.layout, int(max_stalled), int(limit)


def _has_exempt(view: StepView, layout: Layout, limit: int) -> bool:
    """Whether the native's verdicts, in member order, reach an Exempt before any refusal."""
    for member, _ in select(zset(view.before, layout.active) or {}, view.now_ms, limit):
        row = layout.row(member)
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


def rule_d7(view: StepView) -> RuleResult:
    args = _sweep_args(view)
    if args is None or not _has_exempt(view, args[0], args[2]):
        return None
    native = sweep(view.before, view.before_epochs, *args, view.now_ms, view.run_id)
    lua = sweep(view.before, view.before_epochs, *args, view.now_ms, None)
    # an exempt member goes back to pending: a wrong-typed pending (or a bad metrics count for a
    # member that dies) refuses the sweep as in D3/D4, where the scripts count it; and the caller
    # must be allowed what the exemption reads and writes
    reads = reached_rows(TRANSITIONS[Verb.SWEEP], view.guarded, view.before, view.now_ms) if view.guarded else []
    native_check = _native_outcome(view, native, reads)
    return _both(_lua_class_or_exact(view, lua), native_check)


def rule_d8(view: StepView) -> RuleResult:
    args = _sweep_args(view)
    if args is None:
        return None
    layout, _, limit = args
    bad_member = False
    for member, _ in select(zset(view.before, layout.active) or {}, view.now_ms, limit):
        row = layout.row(member)
        fields = hash_fields(view.before, row)
        if kind_of(view.before, row) not in ("none", "hash") or (
            fields is not None and (b"group" in fields or isinstance(next_counter(fields.get(b"stalled")), str))
        ):
            bad_member = True
    if not bad_member:
        return None  # (before predicting the sweep: it matters only with a bad member)
    native = sweep(view.before, view.before_epochs, *args, view.now_ms, view.run_id)
    if native.error is None:
        return None
    lua = sweep(view.before, view.before_epochs, *args, view.now_ms, None)
    return _both(_lua_class_or_exact(view, lua), _native_refused(view, NATIVE_ERROR_CODES[native.error]))


def rule_d9(view: StepView) -> RuleResult:
    if view.guarded is None or not view.verb_is(Verb.PROMOTE):
        return None
    layout = view.guarded.layout
    (limit,) = view.guarded.args
    rows = [layout.row(m) for m, _ in select(zset(view.before, layout.delayed) or {}, view.now_ms, int(limit))]
    if not any(kind_of(view.before, row) not in ("none", "hash") for row in rows):
        return None
    return _both(_lua_error_after_writes(view, "WRONGTYPE"), _native_refused(view, "WRONGTYPE"))


def rule_n2(view: StepView) -> RuleResult:
    transition = view.transition
    if view.guarded is None or transition is None or transition.verb is not Verb.EXTEND:
        return None
    row = view.guarded.layout.row(view.guarded.job)
    if (row, WRITE) not in view.denied or (row, READ) in view.denied or view.lua_reply != 1:
        return None
    return _native_refused(view, "NOPERM")


def _declared_denied(view: StepView) -> bool:
    """The server refuses the native command itself: the caller may not read or write one of its
    declared keys (a module command's keys need both; the base key is granted to every caller)."""
    transition, guarded = view.transition, view.guarded
    assert transition is not None and guarded is not None
    if not view.denied:
        return False
    layout = guarded.layout
    declared = [key for key in layout.declared(transition) if key != layout.base]
    return any((key, perm) in view.denied for key in declared for perm in (READ, WRITE))


def rule_n3(view: StepView) -> RuleResult:
    """A CLAIM whose caller the server refuses a declared key, where the Lua host's `paused?` read
    answered something (paused, or an error): the host answers empty without sending its script,
    the native command is refused before it runs."""
    if not _claim_call(view) or not _declared_denied(view) or _lua_read(view) is None:
        return None
    lua_ok = (
        view.lua_reply == [] and same_keyspace(view.lua_after, view.before),
        f"lua should answer empty and write nothing, answered {view.lua_reply!r}",
    )
    return _both(lua_ok, _native_refused(view, "NOPERM"))


def rule_n4(view: StepView) -> RuleResult:
    """PAUSE or RESUME by a caller who may write meta but not read it: the Lua host's HSET / HDEL
    need only the write permission; the native command's declared key needs both."""
    transition, guarded = view.transition, view.guarded
    if guarded is None or transition is None or transition.scripted or not view.resolved.sends_transition:
        return None
    meta = guarded.layout.meta
    if (meta, READ) not in view.denied or (meta, WRITE) in view.denied:
        return None
    return _native_refused(view, "NOPERM")


def _counters(view: StepView) -> list[bytes | None]:
    """The stored values of the counters this call would increment (before any write): each
    metrics hash's count, and CLAIM's head row's attempts (a swept member's `stalled` is D8's)."""
    transition, guarded = view.transition, view.guarded
    assert transition is not None and guarded is not None
    layout = guarded.layout
    stored: list[bytes | None] = []
    for increment in transition.increments:
        if increment.metrics is not None:
            stored.append((hash_fields(view.before, layout.metrics(increment.metrics)) or {}).get(increment.field))
        elif transition.rows is Rows.PENDING_HEAD:
            head = pending_head(view.before, layout)
            fields = hash_fields(view.before, layout.row(head)) if head is not None else None
            if fields is not None:
                stored.append(fields.get(increment.field))
    return stored


_LUA_COUNTER_TEXTS = tuple(LUA_COUNTER_ERRORS.values())


def rule_d4(view: StepView) -> RuleResult:
    if view.guarded is None or not view.resolved.sends_transition:
        return None
    lua = view.lua_reply
    if not (isinstance(lua, ErrorReply) and lua.message.startswith(_LUA_COUNTER_TEXTS)):
        return None  # whatever the counters hold, the check below needs one of these texts
    if view.verb_is(Verb.CLAIM) and not _claim_reaches_pop(view):
        return None
    bad = [c for c in map(next_counter, _counters(view)) if isinstance(c, str)]
    if not bad:
        return None
    text = LUA_COUNTER_ERRORS[bad[0]]
    # the reference's reply tells whether its script got as far as the counter (past the fence)
    if not (isinstance(view.lua_reply, ErrorReply) and view.lua_reply.message.startswith(text)):
        return None
    return _native_refused(view, "EMQ OVERFLOW" if bad[0] == OVERFLOW else "EMQ NOTINT")


_D3_FAULTS = frozenset({"WRONGTYPE", "NOPERM"})  # the error codes a D3 fault can answer


def rule_d3(view: StepView) -> RuleResult:
    if view.guarded is None or not view.resolved.sends_transition:
        return None
    code = _error_code(view.lua_reply)
    if code not in _D3_FAULTS:
        return None  # the faults below are only ever these two: no key need be looked at
    touched = touched_keys(view)
    wrong = any(
        kind not in ("any", "none") and kind_of(view.before, key) not in ("none", kind) for key, kind in touched
    )
    denied = bool(view.denied) and any((key, perm) in view.denied for key, _ in touched for perm in (READ, WRITE))
    faults = {code for code, present in (("WRONGTYPE", wrong), ("NOPERM", denied)) if present}
    if code not in faults:
        return None
    if same_keyspace(view.lua_after, view.before):
        return None  # failed on a read, before any write: both must simply match
    # a key both wrong-typed and denied: the script stops at the ACL check of its first command
    # on it, the native (the seed's order) at the row's type on its first read; either error
    # names a fault that holds, and the native must still write nothing (docs/contract-decisions.md)
    native_code = _error_code(view.native_reply)
    return _native_refused(view, native_code if native_code in faults else code)


def rule_n5(view: StepView) -> RuleResult:
    """The retired CLAIM returns `attempts` through a Lua number (docs/contract-decisions.md, "Lua number
    precision"): past 2^53 its reply is the double nearest the count, while the row, incremented by
    HINCRBY in the server, holds the exact count on both sides. The native replies exactly (also a
    native that rounds like the scripts is a divergence: the contract asks for the count)."""
    if not _claim_call(view):
        return None
    lua, native = view.lua_reply, view.native_reply
    if not (isinstance(lua, list) and len(lua) == 3 and isinstance(lua[0], bytes) and isinstance(lua[2], int)):
        return None
    assert view.guarded is not None
    counted = (hash_fields(view.lua_after, view.guarded.layout.row(lua[0])) or {}).get(b"attempts", b"")
    count = int(counted) if counted.lstrip(b"-").isdigit() else None
    if count is None or lua_number(count) == count or lua[2] != lua_number(count):
        return None  # a count a double holds, or a reply rounding does not explain: judged as before
    if not (isinstance(native, list) and len(native) == 3 and native[2] == count):
        return False, f"native should answer attempts {count} exactly, answered {native!r}"
    if not replies_equal(lua[:2], native[:2]) or not same_keyspace(view.lua_after, view.native_after):
        return False, "beside attempts' rounding, the replies or the keyspaces differ"
    return True, ""


def rule_n1(view: StepView) -> RuleResult:
    """Every lease_epoch is the run_id of the native's last CLAIM or EXTEND of that row."""
    if view.native_epochs == view.expected_epochs:
        return True, ""
    wrong = sorted(set(view.native_epochs.items()) ^ set(view.expected_epochs.items()))
    return False, (f"lease_epoch fields {dict(view.native_epochs)!r} differ from the expected "
                   f"{dict(view.expected_epochs)!r} ({wrong!r})")  # fmt: skip


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule("D6", (), "arguments out of shape, layout or range", "refused by the host before sending",
             "EMQ SHAPE/LAYOUT/ARG/NOTINT/OVERFLOW, nothing written", rule_d6, resync=False, host_side=True,
             spec_row=6),
        Rule("D2", (Verb.CLAIM,), "meta answers the paused read with an error (WRONGTYPE, NOPERM)",
             "empty, nothing written", "that error, nothing written", rule_d2, spec_row=2),
        Rule("D1", (Verb.CLAIM,), "PAUSE or RESUME (or a write to meta) lands between the Lua host's paused? read and "
             "its script", "decides on the stale read", "decides atomically on the state at its single round trip",
             rule_d1, spec_row=1),
        Rule("D5", (Verb.CLAIM,), "active is not a zset", "pop, attempts+1, state active, then WRONGTYPE",
             "WRONGTYPE, nothing written", rule_d5, lua_partial_writes=True, spec_row=5),
        Rule("D7", (Verb.SWEEP,), "an expired member's lease_epoch is missing or not the current run_id",
             "counted: stalled+1, may dead-letter", "exempt: back to pending at 0, counted in exempt", rule_d7,
             spec_row=8),
        Rule("D8", (Verb.SWEEP,), "a selected member's row is not a hash, has a group field, or a bad stalled",
             "processes members in order, errors at the first bad one", "refuses the whole sweep", rule_d8,
             lua_partial_writes=True, spec_row=9),
        Rule("D9", (Verb.PROMOTE,), "a due member's row exists but is not a hash",
             "processes members in order, errors at the first bad one", "WRONGTYPE, nothing written", rule_d9,
             lua_partial_writes=True, spec_row=10),
        Rule("D4", (), "a counter the transition increments is not an integer or +1 overflows",
             "partial writes, then the error", "EMQ NOTINT / EMQ OVERFLOW, nothing written", rule_d4,
             lua_partial_writes=True, spec_row=4),
        Rule("D3", (),
             "a key the transition touches is wrong-typed (or denied) and the script reaches it only after a write",
             "partial writes, then the error", "the error, nothing written", rule_d3, lua_partial_writes=True,
             spec_row=3),
        Rule("N2", (Verb.EXTEND,),
             "the caller may read but not write the row (project decision, docs/contract-decisions.md)",
             "extends: the script never writes the row",
             "NOPERM, nothing written: re-stamping lease_epoch writes the row", rule_n2),
        Rule("N3", (Verb.CLAIM,), "the caller is denied a declared key and the host's paused? read answered "
             "(paused, or an error) (project decision, docs/contract-decisions.md)",
             "empty, nothing written: the host sends no script", "NOPERM, nothing written: the server refuses it",
             rule_n3, host_side=True),
        Rule("N4", (Verb.PAUSE, Verb.RESUME), "the caller may write meta but not read it (project decision, "
             "docs/contract-decisions.md)", "HSET / HDEL run: they need only write", "NOPERM, nothing written", rule_n4,
             host_side=True),
        Rule("N5", (Verb.CLAIM,), "the claimed row's attempts pass 2^53 (project decision, docs/contract-decisions.md)",
             "replies the double nearest attempts (a Lua number)", "replies attempts exactly; rows alike",
             rule_n5, resync=False),
        # (under keyspace notifications the EXTEND re-stamp also fires one hset on the row:
        # difftest/judge/events.py, expected_native)
        Rule("N1", (Verb.CLAIM, Verb.EXTEND), "always (no precondition): every CLAIM or EXTEND stamps the row it "
             "leases", "no lease_epoch", "lease_epoch = the server's run_id (EXTEND: one more hset event on the row)",
             rule_n1, resync=False, always=True, spec_row=7),
    )
}  # fmt: skip
# the rows as the contract's table shows them (the spec's, then the project's own by number): where a
# report lists them. Not the order they are tried in, which is RULES' own (below).
TABLE_ORDER: tuple[Rule, ...] = tuple(sorted(
    RULES.values(), key=lambda rule: (rule.spec_row == 0, rule.spec_row, rule.id[0], int(rule.id[1:]))))  # fmt: skip
# the order the alternatives are tried in (the first whose outcome is met allows the step)
ALTERNATIVES: tuple[Rule, ...] = tuple(rule for rule in RULES.values() if not rule.always)
ALWAYS: tuple[Rule, ...] = tuple(rule for rule in RULES.values() if rule.always)
# The alternatives a step can meet, worked out once: a rule that names its verbs answers None for
# any other (each check tests the verb first), and a few checks ask one more thing first, answering
# None without it: D3 and D4 a Lua reply that is an error, D6 the host's refusal, D1 a split claim's
# end, N2, N3 and N4 a key denied to the caller. Leaving out a rule that answers None changes no
# verdict (tests/test_contract.py holds each rule to it on every recorded step); the order stays
# ALTERNATIVES'. By verb (None: no call), then by those four facts as the bits of an index.
_NEEDS = (("D3", "D4"), ("D6",), ("D1",), ("N2", "N3", "N4"))  # error, refusal, end, denial: bits 3..0


def _may_apply(rule: Rule, verb: str | None, bits: int) -> bool:
    if rule.verbs and verb not in rule.verbs:
        return False
    return all(bits & (8 >> i) or rule.id not in needs for i, needs in enumerate(_NEEDS))


_CANDIDATES: dict[str | None, tuple[tuple[Rule, ...], ...]] = {
    verb: tuple(tuple(rule for rule in ALTERNATIVES if _may_apply(rule, verb, bits)) for bits in range(16))
    for verb in (*Verb, None)
}


def candidates_of(resolved: Resolved, lua_reply: Reply, denied: Denied) -> tuple[Rule, ...]:
    """The alternatives whose preconditions can hold at a step, in ALTERNATIVES' order."""
    call = resolved.call
    by_bits = _CANDIDATES.get(None if call is None else call.verb)
    if by_bits is None:
        return ALTERNATIVES
    error, refused = isinstance(lua_reply, ErrorReply), resolved.refusal is not None
    return by_bits[(error << 3) | (refused << 2) | (resolved.is_end << 1) | bool(denied)]


def candidates(view: StepView) -> tuple[Rule, ...]:
    return candidates_of(view.resolved, view.lua_reply, view.denied)


def meets_no_rule(resolved: Resolved, lua_reply: Reply, native_reply: Reply, denied: Denied) -> bool:
    """Whether verdict_of can only answer by comparing the two sides (and N1): no alternative can
    apply, and the step is neither a death, a step through the scripts nor a raw write (which it
    judges apart). Then a step whose replies, keyspaces and epochs agree is a MATCH."""
    if resolved.via_scripts or resolved.is_raw or isinstance(native_reply, Died):
        return False
    return not candidates_of(resolved, lua_reply, denied)


def verdict_of(view: StepView) -> Verdict:
    """A rule whose precondition holds and whose exact outcome is met allows the step; rules whose
    preconditions hold but whose outcomes are not met make it a divergence; where no rule's
    precondition holds, the two executors must match exactly. Then the rules held always (N1).

    A rule is checked even when both sides agree: a native that quietly does what the scripts
    do where the contract demands its own outcome is a defect too.
    """
    verdict = _alternatives(view)
    if not verdict.ok:
        return verdict
    for rule in ALWAYS:
        result = rule.check(view)
        if result is not None and not result[0]:
            return Verdict("divergence", rule.id, f"{rule.id}: {result[1]}")
    return verdict


def _alternatives(view: StepView) -> Verdict:
    if isinstance(view.native_reply, Died):
        # no row allows an executor to die: the scripts answered (or were refused) where it crashed
        return Verdict("divergence", reason=f"the native server died at this step ({view.native_reply.why})")
    if view.resolved.via_scripts:
        # an upgrade's Lua-era worker: the scripts ran on both servers, on equal ground; no row
        # allows a difference (docs/contract-decisions.md, "Upgrades and the mixed fleet")
        same = replies_equal(view.lua_reply, view.native_reply) and same_keyspace(view.lua_after, view.native_after)
        what = "replies differ" if not replies_equal(view.lua_reply, view.native_reply) else "keyspaces differ"
        return MATCH if same else Verdict("divergence", reason=f"the scripts ran on both servers, yet {what}")
    if view.resolved.is_raw:
        # the harness's own write: its reply is not executor behaviour (a lease_epoch field the
        # Lua rows never had makes HSET answer 1 there and 0 on the native); keyspaces must match
        same = same_keyspace(view.lua_after, view.native_after)
        return MATCH if same else Verdict("divergence", reason="keyspaces differ after a raw write")
    # a native command the server refuses on the caller's ACL never runs, nor does a script the
    # host sends: only what the host decides before sending can differ (N3, N4: the host's plain
    # HSET may meet the memory limit where the native command never ran)
    refused_by_server = (
        bool(view.denied) and view.guarded is not None and view.resolved.sends_transition and _declared_denied(view)
    )
    refused = None if refused_by_server else _refused_at_first_write(view)
    if refused is not None:
        return refused
    failures: list[tuple[str, str]] | None = None  # (made only when a rule fails: most steps meet none)
    for rule in candidates(view):
        if refused_by_server and not rule.host_side:
            continue
        result = rule.check(view)
        if result is None:
            continue
        ok, detail = result
        if ok:  # preconditions can overlap (an ACL refusal inside an exempting sweep): one must hold
            return Verdict("allowed", rule.id)
        if failures is None:
            failures = []
        failures.append((rule.id, f"{rule.id} applies but {detail}"))
    if failures:
        return Verdict("divergence", failures[0][0], "; ".join(reason for _, reason in failures))
    same_reply = (
        isinstance(view.native_reply, NotSent)
        or view.lua_reply == view.native_reply  # (equal values are equal replies: asked first, cheaper)
        or replies_equal(view.lua_reply, view.native_reply)
    )
    if same_reply and same_keyspace(view.lua_after, view.native_after):
        return MATCH
    what = "replies differ" if not same_reply else "keyspaces differ"
    return Verdict("divergence", reason=f"{what} and no contract row allows it")


__all__ = ["ALTERNATIVES", "MATCH", "RULES", "Rule", "StepView", "Verdict", "acl_probe_keys", "verdict_of"]
