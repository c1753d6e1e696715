"""The judge: a pure fold over what a replay observed, one verdict per step.

`judge(state, observation) -> (state, verdict)`: the state is plain data (the keyspace before the
step, the epochs N1 expects, the Lua host's open `paused?` reads, both sides' ledgers); an
observation is what replay recorded at one step on both servers (replies, snapshots, epochs, the
ACL facts it gathered before judging). Nothing here reads a server: the same observations give the
same verdicts, which is how the judge's tests run without servers (tests/observations/).

Four voters: the pair (the contract's rules over both sides), the spec's model (difftest/spec/model.py:
each side held to what the spec says it does), the healthy-queue invariants and the queue's
accounting (each side's). A divergence's reason names who found it and, where the model judged the
step, which side is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from difftest.history.format import REPLICA_OBEYS
from difftest.history.resolve import Resolved
from difftest.judge.accounting import follow
from difftest.judge.contract import (
    MATCH,
    RULES,
    Denied,
    StepView,
    Verdict,
    meets_no_rule,
    replies_equal,
    same_keyspace,
    verdict_of,
)
from difftest.judge.invariants import INVARIANTS, Ledger, violations
from difftest.spec import model
from difftest.spec.commands import Rows, Stamp
from difftest.spec.replies import Died, ErrorReply, NotSent, Reply
from difftest.spec.snapshot import Epochs, Snapshot, Stamps, diff, written_since


@dataclass(frozen=True)
class Observation:
    """What replay recorded at one step, on both servers (epochs set aside in the snapshots)."""

    resolved: Resolved
    now_ms: int  # the frozen clock at the step
    run_id: bytes  # the native server's run_id at the step
    lua_reply: Reply
    native_reply: Reply
    lua_after: Snapshot
    native_after: Snapshot
    native_epochs: Epochs
    denied: Denied = field(default_factory=frozenset)  # (key, read|write) the step's user may not touch
    # the spec's model's prediction, where it was worked out before the judge (`assumed`)
    prediction: model.Prediction | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Exposure:
    """What a history has done so far that lets a contract row apply (cheap flags)."""

    corrupted: bool = False  # a raw write happened
    restarted: bool = False  # a restart or crash happened
    users: bool = False  # steps run as restricted users
    scripts: bool = False  # steps ran through the Lua scripts on the native server (an upgrade)


PausedReads = tuple[tuple[int, Reply], ...]


@dataclass(frozen=True)
class JudgeState:
    """Everything the judge carries from one step to the next."""

    before: Snapshot = field(default_factory=dict)  # both keyspaces agree on it (the native's, after a re-sync)
    before_epochs: Epochs = field(default_factory=dict)
    expected_epochs: Epochs = field(default_factory=dict)  # N1: the run_id of each row's last stamp
    paused_reads: PausedReads = ()  # each open split claim: (its begin's index, its read's answer)
    exposure: Exposure = field(default_factory=Exposure)
    ledger: Ledger = field(default_factory=Ledger)  # the native side's
    lua_ledger: Ledger = field(default_factory=Ledger)
    limited: bool = False  # the memory limit is on (a `memory` step set it): the model's first-write gate
    writes_denied: bool = False  # the servers deny every write (a `replicas` step): the same gate, before OOM
    # the replicas obey a memory limit of their own (a `memory` step's `replica`: REPLICA_OBEYS)
    replica_limited: bool = False


def may_need_rules(resolved: Resolved, exposure: Exposure) -> bool:
    """False when no alternative rule's precondition can hold: the step must then simply match."""
    if resolved.call is None:
        return False
    if resolved.is_end or exposure.corrupted or exposure.users:
        return True
    transition = resolved.transition
    if (exposure.restarted or exposure.scripts) and transition is not None and transition.rows is Rows.EXPIRED_ACTIVE:
        # a lease that outlived a restart, or one the scripts took (no lease_epoch), is met by the
        # transition that reads expired leases: D7 (a native that counts it like the scripts is wrong)
        return True
    return resolved.refusal is not None


def _stamped_row(resolved: Resolved, reply: Reply) -> bytes | None:
    """The row a successful CLAIM or EXTEND stamps with the run_id (N1)."""
    transition, guarded = resolved.transition, resolved.guarded
    if transition is None or transition.stamps is Stamp.NONE:
        return None  # (most transitions: asked first)
    if guarded is None or not resolved.sends_transition or resolved.via_scripts:
        return None  # (the scripts never stamp, on either server)
    if transition.stamps is Stamp.CLAIMED and isinstance(reply, list) and reply and isinstance(reply[0], bytes):
        return guarded.layout.row(reply[0])
    if transition.stamps is Stamp.JOB_ARG and reply == 1:
        return guarded.layout.row(guarded.job)
    return None


def expected_epochs(state: JudgeState, observation: Observation) -> Epochs:
    """N1's expectation after the step: a raw write may plant any epoch; a stamp sets the run_id;
    a row that is no longer a hash holds none. Where nothing changes it is the state's own dict,
    not a copy (a state's dicts are values, never written to: most steps keep the expectation)."""
    resolved = observation.resolved
    if resolved.is_raw:
        return dict(observation.native_epochs)
    expected = state.expected_epochs
    stamped = _stamped_row(resolved, observation.native_reply)
    if stamped is not None:
        held = expected if isinstance(expected, Stamps) else Stamps(expected)
        expected = held.with_stamp(stamped, observation.run_id)  # (one more stamp, not a copy of every one)
    if not expected:
        return expected  # (most steps: no lease held)
    after = observation.native_after
    written = written_since(after, state.before)
    # (only a key written since can have stopped holding an epoch: where known, those alone looked at)
    for key in expected if written is None or len(written) > len(expected) else (k for k in written if k in expected):
        entry = after.get(key)
        if entry is None or entry.kind != "hash":
            return {k: v for k, v in expected.items() if k in after and after[k].kind == "hash"}
    return expected


def _exposure(exposure: Exposure, resolved: Resolved) -> Exposure:
    if resolved.via_scripts and not exposure.scripts:
        exposure = replace(exposure, scripts=True)  # and maybe a user: both flags
    if resolved.is_raw and not exposure.corrupted:
        return replace(exposure, corrupted=True)
    if resolved.is_restart and not exposure.restarted:
        return replace(exposure, restarted=True)
    if resolved.user is not None and not exposure.users:
        return replace(exposure, users=True)
    return exposure


def _lua_stopped_half_way(before: Snapshot, observation: Observation) -> bool:
    """The script answered an error after it had written (its keyspace moved)."""
    return isinstance(observation.lua_reply, ErrorReply) and not same_keyspace(observation.lua_after, before)


def _scripts_stopped_half_way(before: Snapshot, observation: Observation) -> bool:
    """The scripts ran on both servers for the step (an upgrade's Lua-era worker) and answered an
    error after they had written: the same partial writes on both, the retired scripts' behaviour."""
    return (
        observation.resolved.via_scripts
        and isinstance(observation.native_reply, ErrorReply)
        and not same_keyspace(observation.native_after, before)
    )


def _moved(ledger: Ledger, resolved: Resolved, scripts_half_way: bool, before: Snapshot, after: Snapshot) -> Ledger:
    """One side's ledger after a raw write or a script that stopped half-way: what it touched is
    tainted (a transition is recorded instead, in the judge)."""
    if resolved.is_raw:
        assert resolved.step is not None
        return ledger.taint(resolved.step.command)  # type: ignore[union-attr]
    assert scripts_half_way
    # what the scripts wrote before their error is no longer held to the invariants, on either
    # server (as after a raw write of those keys)
    return ledger.taint((b"EVALSHA", *diff(before, after)))


def _accounted(state: JudgeState, observation: Observation, ledger: Ledger,
               lua_ledger: Ledger) -> tuple[Ledger, Ledger, list[str]]:  # fmt: skip
    """Each side's accounting of a transition (difftest/judge/accounting.py): both ledgers with their
    new accounts, and each side's findings. The native side's lease epochs before the step let a
    sweep exempt a lease of another run (D7); the scripts, on either server, exempt none."""
    resolved, before = observation.resolved, state.before
    native_after, lua_after = observation.native_after, observation.lua_after
    late = resolved.is_end  # the Lua host's split claim decided on its earlier paused? read (D1)
    epochs = None if resolved.via_scripts else state.before_epochs
    accounts, found = follow(ledger.accounts, ledger.followed, resolved, before, observation.native_reply, native_after,
                             observation.now_ms, exempt=epochs, run_id=observation.run_id,
                             decided_late=late and resolved.via_scripts)  # fmt: skip
    owed = [f"native: {f}" for f in found]
    if _lua_stopped_half_way(before, observation):
        lua_accounts = lua_ledger.accounts  # (its writes tainted what they touched: see _moved)
    elif (
        lua_ledger.accounts is ledger.accounts
        and not late
        and (lua_after is native_after or lua_after == native_after)
        and (observation.lua_reply == observation.native_reply)
        and lua_ledger.held_as(ledger)
    ):
        # the same accounts, step, reply and keyspace: the same outcome (most steps; the two sides'
        # accounts stay one object while they agree)
        lua_accounts = accounts
        owed += [f"lua: {f}" for f in found]
    else:
        lua_accounts, lua_found = follow(lua_ledger.accounts, lua_ledger.followed, resolved, before,
                                         observation.lua_reply, lua_after, observation.now_ms,
                                         decided_late=late)  # fmt: skip
        owed += [f"lua: {f}" for f in lua_found]
    return ledger.accounted(accounts), lua_ledger.accounted(lua_accounts), owed


# -- the spec's model as a third voter ------------------------------------------------------------

SPEC = "spec"  # a divergence's finding: the executors agree with each other, not with the spec's model
NATIVE_WRONG = "the module differs from the spec and from the scripts"
LUA_WRONG = "the scripts differ from the spec and from the module"
BOTH_WRONG = "both executors differ from the spec, and from each other"
SHARED = "shared defect: both executors differ from the spec in the same way"
NATIVE_OFF_SPEC = "the module differs from the spec"  # (the contract allowed the pair: a row's outcome)
LUA_OFF_SPEC = "the scripts differ from the spec"
BOTH_OFF_SPEC = "both executors differ from the spec, each its own way"
VOTERS = ("model", "accounting", "invariants", "pair")  # who can find a divergence at a step
# the spec's model on (the default); off only where bench/bench_replay.py --model measures its cost
# against the same histories without it (a step then counts as unjudged, kind "off")
MODEL_ON = True


def spec_prediction(state: JudgeState, observation: Observation, paused_read: Reply,
                    limited: bool, writes_denied: bool = False,
                    replica_limited: bool = False) -> model.Prediction | str:  # fmt: skip
    """What the spec's model says each executor does at the step, or the kind of step it does not
    predict (model.UNJUDGED_KINDS). `paused_read`: a split claim's end, the Lua host's read at its begin."""
    resolved, before = observation.resolved, state.before
    if isinstance(observation.native_reply, Died):
        return "died"
    if resolved.is_raw:
        command = resolved.step.command  # type: ignore[union-attr]
        if writes_denied:
            return "raw-writes-denied"
        return model.raw_prediction(command, before, observation.now_ms, limited, state.before_epochs)
    if resolved.is_advance:
        return model.advanced(before, resolved.step.ms)  # type: ignore[union-attr]
    transition, call = resolved.transition, resolved.call
    if transition is None or call is None:
        return model.unchanged(before)  # a restart, a condition switched, MULTI, EXEC
    if resolved.aborted:  # the transaction was refused whole when it queued a command
        return model.discarded(before, resolved.refusal, resolved.via_scripts)
    if resolved.at_exec is not None:  # a condition switched inside its transaction: those at EXEC
        limited, writes_denied = resolved.at_exec
    guarded = resolved.guarded
    facts = model.CallFacts(
        transition.verb,
        None if guarded is None else guarded.layout,
        () if guarded is None else guarded.args,
        resolved.refusal,
        tuple(call.rest[: transition.numkeys]) if len(call.rest) >= transition.numkeys else (),
        observation.denied,
        "begin" if resolved.is_begin else "end" if resolved.is_end else "call",
        paused_read,
        resolved.via_scripts,
        _gates(resolved.on_replica, writes_denied, limited, replica_limited),
    )
    return model.predict(facts, before, state.before_epochs, observation.now_ms, observation.run_id)


def assumed(state: JudgeState, observation: Observation) -> Observation | None:
    """A bulk's call before its last, which no walk follows: the observation with each side's
    keyspace after it the spec's model's (the walk after the bulk's last call holds every write
    to the model's). None where the model does not say what a side's keyspace is (the scripts
    stopped half-way, a step it does not predict): that call must be walked."""
    _, _, paused_read, limited, writes_denied, replica_limited = _carried(state, observation)
    prediction = spec_prediction(state, observation, paused_read, limited, writes_denied, replica_limited)
    if isinstance(prediction, str):
        return None
    lua_after, native_after = prediction.lua.after, prediction.native.after
    if lua_after is None or native_after is None:
        return None
    if lua_after is not native_after and lua_after == native_after:
        lua_after = native_after  # (one snapshot: each side's checks then look at it once)
    observation = replace(observation, lua_after=lua_after, native_after=native_after, prediction=prediction)
    return replace(observation, native_epochs=expected_epochs(state, observation))


def spec_departures(prediction: model.Prediction, observation: Observation) -> tuple[str | None, str | None]:
    """How each executor departs from the spec's prediction (lua, native): None where it does not."""
    lua = model.departure(prediction.lua, observation.lua_reply, observation.lua_after)
    if (
        prediction.native is prediction.lua
        and observation.native_reply == observation.lua_reply
        and (observation.native_after is observation.lua_after)
    ):
        return lua, lua  # (the scripts on both servers, alike: one check)
    return lua, model.departure(prediction.native, observation.native_reply, observation.native_after)


def _spec_parts(lua: str | None, native: str | None) -> list[str]:
    return [*([f"model: native: {native}"] if native else []), *([f"model: lua: {lua}"] if lua else [])]


def _blamed(verdict: Verdict, lua: str | None, native: str | None, prediction: object) -> Verdict:
    """A divergence of the pair, with which side the spec's model says is wrong."""
    if not (lua or native):
        return replace(verdict, prediction=prediction)  # the model allows both outcomes: the pair alone
    headline = NATIVE_WRONG if not lua else LUA_WRONG if not native else BOTH_WRONG
    reason = "; ".join([f"{headline}: pair: {verdict.reason}", *_spec_parts(lua, native)])
    return Verdict("divergence", verdict.rule, reason, prediction=prediction)


def _spec_headline(verdict: Verdict, lua: str | None, native: str | None, observation: Observation) -> str:
    """Where the pair agrees (or a contract row allowed its difference) and the model does not."""
    if lua and native:
        # the same departure from each side's own prediction, or the same reply and keyspace
        alike = lua == native or (
            replies_equal(observation.lua_reply, observation.native_reply)
            and same_keyspace(observation.lua_after, observation.native_after)
        )
        return SHARED if alike else BOTH_OFF_SPEC
    headline = NATIVE_OFF_SPEC if native else LUA_OFF_SPEC
    return f"{headline} (the contract's {verdict.rule} allowed the pair)" if verdict.rule else headline


def voters_of(reason: str) -> list[str]:
    """Which voters a divergence's reason names: the spec's model ("model: ..."), the queue's
    accounting ("<side>: accounting:..."), the healthy-queue invariants ("<side>: <invariant>: ..."),
    the comparison of the pair ("pair: ...", or a reason none of the others wrote)."""
    found = [
        *(["model"] if "model: " in reason else []),
        *(["accounting"] if "accounting:" in reason else []),
        *(["invariants"] if any(f"{side}: {name}:" in reason for side in ("native", "lua") for name in INVARIANTS)
          else []),
    ]  # fmt: skip
    if "pair: " in reason or not found:
        found.append("pair")
    return found


def judge(state: JudgeState, observation: Observation) -> tuple[JudgeState, Verdict]:
    """One step judged: the contract's rules and N1 (the pair), each side held to the spec's model,
    then each side's invariants and accounting. On a divergence the state is returned as it was (the
    history stops there)."""
    resolved = observation.resolved
    exposure, paused_reads, paused_read, limited, writes_denied, replica_limited = _carried(state, observation)
    epochs = _epochs_after(state, observation)
    verdict = _pair_verdict(state, observation, exposure, paused_read, epochs)
    # the spec's model, held to each side (a step it does not predict is the pair's alone)
    prediction = _prediction(state, observation, paused_read, limited, writes_denied, replica_limited)
    if isinstance(prediction, str):
        lua_off = native_off = None
        verdict = replace(verdict, unjudged=prediction)
    else:
        lua_off, native_off = spec_departures(prediction, observation)
    if not verdict.ok:
        return state, _blamed(verdict, lua_off, native_off, prediction)
    rule = RULES[verdict.rule] if verdict.rule else None
    scripts_half_way = resolved.via_scripts and _scripts_stopped_half_way(state.before, observation)
    # the Lua side is checked only where it differs, and not where its script stopped half-way:
    # a rule that allows partial writes, or an error after writes (an ACL refusal on the
    # counted path of D7, say): the retired scripts' behaviour, not judged
    partial = scripts_half_way or bool(rule and rule.lua_partial_writes)
    ledger, lua_ledger = _recorded(state, observation, scripts_half_way)
    broken: list[str] | None = _spec_parts(lua_off, native_off) if (lua_off or native_off) else None
    if not partial:
        ledger, lua_ledger, found = _checked(state, observation, ledger, lua_ledger)
        if found:
            broken = [*(broken or ()), *found]
    if broken:
        return state, _off(verdict, broken, lua_off, native_off, observation, prediction)
    if rule is not None and rule.resync:
        lua_ledger = ledger  # the Lua server takes the native's ground
    after = _state_after(state, observation, epochs, paused_reads, exposure, ledger, lua_ledger, limited,
                         writes_denied, replica_limited)  # fmt: skip
    return after, verdict


def _prediction(state: JudgeState, observation: Observation, paused_read: Reply, limited: bool,
                writes_denied: bool, replica_limited: bool) -> model.Prediction | str:  # fmt: skip
    """The spec's model's prediction of the step, or the kind of step it does not judge ("off": the model off)."""
    if not MODEL_ON:
        return "off"
    if observation.prediction is not None:
        return observation.prediction  # (a bulk's call: worked out for its keyspace, `assumed`)
    return spec_prediction(state, observation, paused_read, limited, writes_denied, replica_limited)


def _state_after(state: JudgeState, observation: Observation, epochs: Epochs, paused_reads: PausedReads,
                 exposure: Exposure, ledger: Ledger, lua_ledger: Ledger, limited: bool, writes_denied: bool,
                 replica_limited: bool) -> JudgeState:  # fmt: skip
    """The state after a step judged sound: `state` itself where nothing it holds changed (most steps
    change nothing: no new one)."""
    native_epochs, native_after = observation.native_epochs, observation.native_after
    if (
        native_after is state.before
        and native_epochs is state.before_epochs
        and epochs is state.expected_epochs
        and paused_reads is state.paused_reads
        and exposure is state.exposure
        and ledger is state.ledger
        and lua_ledger is state.lua_ledger
        and limited is state.limited
        and writes_denied is state.writes_denied
        and replica_limited is state.replica_limited
    ):
        return state
    return JudgeState(native_after, native_epochs, epochs, paused_reads, exposure, ledger, lua_ledger,
                      limited, writes_denied, replica_limited)  # fmt: skip


def _off(verdict: Verdict, broken: list[str], lua_off: str | None, native_off: str | None, observation: Observation,
         prediction: model.Prediction | str) -> Verdict:  # fmt: skip
    """A divergence of a side from the spec's model, its invariants or its accounting (the pair agreed,
    or a contract row allowed its difference): headed by how the sides stand to the model, if it voted."""
    if lua_off or native_off:
        headline = _spec_headline(verdict, lua_off, native_off, observation)
        return Verdict("divergence", verdict.rule, f"{headline}: {'; '.join(broken)}", finding=SPEC,
                       prediction=prediction)  # fmt: skip
    return Verdict("divergence", verdict.rule, "; ".join(broken), prediction=prediction)


def _epochs_after(state: JudgeState, observation: Observation) -> Epochs:
    """N1's expected epochs after the step, worked out only where one is held or the step may stamp one."""
    resolved, transition = observation.resolved, observation.resolved.transition
    if resolved.is_raw or state.expected_epochs or (transition is not None and transition.stamps is not Stamp.NONE):
        return expected_epochs(state, observation)
    return state.expected_epochs  # (nothing held, nothing stamped: what expected_epochs answers)


def _carried(state: JudgeState, observation: Observation) -> tuple[Exposure, PausedReads, Reply, bool, bool, bool]:
    """What the state carries past the step: the exposure to other writers, the split claims' pause
    reads still open (and, at a claim's end, the read its begin made), whether the memory limit is on."""
    resolved = observation.resolved
    exposure = state.exposure
    if resolved.via_scripts or resolved.is_raw or resolved.is_restart or resolved.user is not None:
        exposure = _exposure(exposure, resolved)  # (no other step exposes anything)
    paused_reads = state.paused_reads
    paused_read: Reply = None
    limited, writes_denied, replica_limited = state.limited, state.writes_denied, state.replica_limited
    if resolved.is_memory:
        limited = bool(resolved.step.limit)  # type: ignore[union-attr]
        replica_limited = resolved.step.replica == REPLICA_OBEYS  # type: ignore[union-attr]
    elif resolved.is_replicas:
        writes_denied = bool(resolved.step.required)  # type: ignore[union-attr]
    if resolved.is_begin:
        paused_reads = (*paused_reads, (resolved.index, observation.lua_reply))
    elif resolved.is_end:
        paused_read = next((read for begun, read in paused_reads if begun == resolved.begun_at), None)
        paused_reads = tuple((begun, read) for begun, read in paused_reads if begun != resolved.begun_at)
    return exposure, paused_reads, paused_read, limited, writes_denied, replica_limited


def _gates(on_replica: bool, writes_denied: bool, limited: bool, replica_limited: bool = False) -> model.Gates:
    """The server conditions on at a call, which refuse a script at its first write: a call sent to
    the read-only replica meets the replica's (its own memory limit where it obeys one, never the
    primary's; it never lacks replicas), any other the primary's, writes denied and the memory limit
    together."""
    if on_replica:
        return _ON_LIMITED_REPLICA if replica_limited else _ON_REPLICA
    return _PRIMARY_GATES[writes_denied, limited]


_ON_REPLICA: model.Gates = frozenset({model.REPLICA})
_ON_LIMITED_REPLICA: model.Gates = frozenset({model.REPLICA, model.MEMORY})
_PRIMARY_GATES: dict[tuple[bool, bool], model.Gates] = {
    (denied, limited): frozenset({model.WRITES_DENIED} if denied else ()) | frozenset({model.MEMORY} if limited else ())
    for denied in (False, True) for limited in (False, True)
}  # fmt: skip


def _pair_verdict(state: JudgeState, observation: Observation, exposure: Exposure, paused_read: Reply,
                  epochs: Epochs) -> Verdict:  # fmt: skip
    """The pair compared under the contract: MATCH at once where both sides are equal and no rule
    can apply (the common step), else the contract's rules decide."""
    resolved = observation.resolved
    lua_reply, native_reply = observation.lua_reply, observation.native_reply
    lua_after, native_after = observation.lua_after, observation.native_after
    same_reply = (
        isinstance(native_reply, NotSent)
        or resolved.is_raw
        or lua_reply == native_reply
        or replies_equal(lua_reply, native_reply)
    )
    if (
        same_reply
        and (lua_after is native_after or lua_after == native_after)
        and observation.native_epochs == epochs
        and (
            not may_need_rules(resolved, exposure)
            # a call of a transaction the server discarded whole ran on neither side: no row's
            # precondition on what it would have met applies (the model holds it to EXECABORT)
            or resolved.aborted
            or meets_no_rule(resolved, lua_reply, native_reply, observation.denied)
        )
    ):
        return MATCH
    view = StepView(resolved, observation.now_ms, observation.run_id, state.before, state.before_epochs,
                    lua_reply, native_reply, lua_after, native_after, paused_read,
                    observation.denied, observation.native_epochs, epochs)  # fmt: skip
    return verdict_of(view)


def _recorded(state: JudgeState, observation: Observation, scripts_half_way: bool) -> tuple[Ledger, Ledger]:
    """Each side's ledger after the step (the native's, the Lua side's): a transition's moves
    recorded, or what a raw write or a script stopped half-way touched, tainted."""
    resolved, before = observation.resolved, state.before
    if resolved.is_raw or scripts_half_way:
        return (_moved(state.ledger, resolved, scripts_half_way, before, observation.native_after),
                _moved(state.lua_ledger, resolved, scripts_half_way, before, observation.lua_after))  # fmt: skip
    if resolved.sends_transition:
        return (state.ledger.record(resolved, observation.native_reply, observation.native_after),
                state.lua_ledger.record(resolved, observation.lua_reply, observation.lua_after))  # fmt: skip
    return state.ledger, state.lua_ledger


def _checked(state: JudgeState, observation: Observation, ledger: Ledger,
             lua_ledger: Ledger) -> tuple[Ledger, Ledger, list[str]]:  # fmt: skip
    """Each side held to the invariants, then to the queue's accounting: the ledgers after (a ledger
    after a full check that found nothing is settled; `held`: nothing moved since the last check)
    and what each side broke, the native's first."""
    resolved, before = observation.resolved, state.before
    native_after, lua_after = observation.native_after, observation.lua_after
    broken: list[str] = []
    held = native_after is before and ledger.settled
    found = violations(ledger, resolved, before, observation.native_reply, native_after, held)
    if found:
        broken += (f"native: {v}" for v in found)
    elif not held:
        ledger = ledger.checked(native_after)
    if lua_after is not native_after and not _lua_stopped_half_way(before, observation):
        held = lua_after is before and lua_ledger.settled
        found = violations(lua_ledger, resolved, before, observation.lua_reply, lua_after, held)
        if found:
            broken += (f"lua: {v}" for v in found)
        elif not held:
            lua_ledger = lua_ledger.checked(lua_after)
    if resolved.sends_transition or resolved.is_raw:
        ledger, lua_ledger, owed = _accounted(state, observation, ledger, lua_ledger)
        broken += owed
    return ledger, lua_ledger, broken


def judge_all(observations: Iterable[Observation], state: JudgeState | None = None) -> list[Verdict]:
    """Every step's verdict, stopping after the first divergence (as a replay does)."""
    state = JudgeState() if state is None else state
    verdicts = []
    for observation in observations:
        state, verdict = judge(state, observation)
        verdicts.append(verdict)
        if not verdict.ok:
            break
    return verdicts


__all__ = [
    "SPEC",
    "VOTERS",
    "Exposure",
    "JudgeState",
    "Observation",
    "expected_epochs",
    "judge",
    "judge_all",
    "spec_prediction",
    "voters_of",
]
