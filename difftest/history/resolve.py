"""A history resolved once: every step with the call it sends, its user, its guards' verdict, and
for a split CLAIM's end the begin it closes. One pairing rule for workers, used by the loader, the
shrinker and the replay alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from difftest.history.format import (
    SCRIPTS,
    Advance,
    BeginClaim,
    CallStep,
    EndClaim,
    Exec,
    MemoryLimit,
    Multi,
    Notify,
    RawWrite,
    ReplicasRequired,
    Restart,
    Step,
    unwalked_at,
)
from difftest.spec.calls import Call
from difftest.spec.commands import TRANSITIONS, Layout, Transition
from difftest.spec.guards import GuardError, check_call


@dataclass(frozen=True)
class Guarded:
    """A call the argument rules accept: its queue's layout and its parsed arguments."""

    layout: Layout
    args: tuple[int | bytes, ...]

    @property
    def job(self) -> bytes:
        """The id argument (only for verbs whose first argument is an id)."""
        job = self.args[0]
        assert isinstance(job, bytes)
        return job


@dataclass(frozen=True)
class Resolved:
    """One step of a history, resolved against the steps before it.

    What the step is (a begin, a raw write, ...) and its transition are worked out once, when it is
    made: the judge asks them dozens of times a step, and as properties each was a call. They are
    not fields for equality, hashing or repr, and `replace` works them out again."""

    index: int
    step: Step
    call: Call | None = None  # the transition call this step sends (an end: its begin's call)
    user: str | None = None
    guarded: Guarded | None = None  # the call passed the guards
    refusal: str | None = None  # the call failed them: the error text (contract row D6)
    begun_at: int | None = None  # an end: the index of its begin
    executor: str | None = None  # SCRIPTS: the native server runs the Lua scripts for it too (an end: its begin's)
    protocol: int = 2  # 3: sent on the worker's RESP3 connection (an end: its begin's)
    in_multi: bool = False  # a call between a 'multi' and its 'exec': an element of the transaction
    on_replica: bool = False  # a call sent to each server's read-only replica (`target`)
    # an element of a transaction the server discards whole (EXECABORT): a command it holds was
    # refused when queued (`queue_time_refusal`)
    aborted: bool = False
    # a call in a transaction that switches a condition: the conditions on when its EXEC runs
    # (memory limit, writes denied), which its first write meets; None: those at its own step
    at_exec: tuple[bool, bool] | None = None
    # a bulk's call before its last: no walk follows it (the keyspace then is the spec's model's)
    unwalked: bool = False
    transition: Transition | None = field(init=False, repr=False, compare=False)
    # the call runs through the Lua scripts (the host adapter) on the native server too
    via_scripts: bool = field(init=False, repr=False, compare=False)
    is_begin: bool = field(init=False, repr=False, compare=False)
    is_end: bool = field(init=False, repr=False, compare=False)
    # the step runs a whole transition on the native side (a begin only reads, on the Lua side)
    sends_transition: bool = field(init=False, repr=False, compare=False)
    is_raw: bool = field(init=False, repr=False, compare=False)
    is_restart: bool = field(init=False, repr=False, compare=False)
    is_advance: bool = field(init=False, repr=False, compare=False)
    is_notify: bool = field(init=False, repr=False, compare=False)  # keyspace notifications switched
    is_memory: bool = field(init=False, repr=False, compare=False)  # the memory limit set or lifted
    is_replicas: bool = field(init=False, repr=False, compare=False)  # writes denied for want of replicas, or not
    # a server condition switched (the memory limit, the replicas required): a segment of its own
    is_condition: bool = field(init=False, repr=False, compare=False)
    is_multi: bool = field(init=False, repr=False, compare=False)
    is_exec: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        step, call = self.step, self.call
        derive = object.__setattr__  # (frozen)
        derive(self, "transition", TRANSITIONS[call.verb] if call is not None else None)
        derive(self, "via_scripts", self.executor == SCRIPTS)
        derive(self, "is_begin", isinstance(step, BeginClaim))
        derive(self, "is_end", isinstance(step, EndClaim))
        derive(self, "sends_transition", call is not None and not isinstance(step, BeginClaim))
        derive(self, "is_raw", isinstance(step, RawWrite))
        derive(self, "is_restart", isinstance(step, Restart))
        derive(self, "is_advance", isinstance(step, Advance))
        derive(self, "is_notify", isinstance(step, Notify))
        derive(self, "is_memory", isinstance(step, MemoryLimit))
        derive(self, "is_replicas", isinstance(step, ReplicasRequired))
        derive(self, "is_condition", self.is_memory or self.is_replicas)
        derive(self, "is_multi", isinstance(step, Multi))
        derive(self, "is_exec", isinstance(step, Exec))


def guard(call: Call) -> Guarded | str:
    """The argument rules, once: the call's layout and arguments, or the refusal's text."""
    try:
        queue, args = check_call(call.verb, call.numkeys, call.rest)
    except GuardError as refusal:
        return refusal.message
    return Guarded(Layout(queue), tuple(args))


def queue_time_refusal(verb: str, memory_limit: bool, writes_denied: bool, on_replica: bool = False) -> bool:
    """Whether the server refuses a transition's command when a transaction queues it: the host's
    plain commands (PAUSE's HSET, deny-oom; RESUME's HDEL), which the module's PAUSE and RESUME are
    registered as, under the memory limit (deny-oom only) or where writes are denied. EVALSHA and
    the module's other commands are neither `write` nor `deny-oom`: queued, they meet the
    condition inside EXEC, at their first write (docs/contract-decisions.md, "Two refusals at once").
    On a read-only replica (`on_replica`: the primary's conditions do not hold there) a write command
    is refused when queued (READONLY)."""
    transition = TRANSITIONS[verb]
    if transition.scripted:
        return False
    if on_replica:
        return True
    return writes_denied or (memory_limit and transition.first_write_grows)


def _transactions(resolved: Sequence[Resolved]) -> tuple[set[int], dict[int, tuple[bool, bool]]]:
    """The server's verdicts on transactions (pure): the indexes of the calls in transactions it
    discards whole, and for each call in a transaction that switches a condition, the conditions on
    at its EXEC. A transaction is discarded when a command it queues is refused when queued (a
    `queue_time_refusal` under the conditions on then), or at EXEC, which the server checks against
    the conditions on then for every command queued (a deny-oom one over the memory limit, a write
    where writes are denied). A call the Lua host's guards refuse is never sent by it, so it
    refuses nothing. A history that ends inside a transaction runs it there."""
    memory_limit = writes_denied = False
    opened: list[Resolved] | None = None
    refused = switched = False
    discarded: set[int] = set()
    at_exec: dict[int, tuple[bool, bool]] = {}
    for r in resolved:
        if r.is_memory or r.is_replicas:
            if r.is_memory:
                memory_limit = r.step.limit  # type: ignore[union-attr]
            else:
                writes_denied = r.step.required  # type: ignore[union-attr]
            switched = switched or opened is not None
        elif r.is_multi:
            opened, refused, switched = [], False, False
        elif r.in_multi and r.call is not None and opened is not None:
            opened.append(r)
            refused = refused or (
                r.guarded is not None and queue_time_refusal(r.call.verb, memory_limit, writes_denied, r.on_replica)
            )
        if opened is not None and (r.is_exec or r is resolved[-1]):
            sent = [call for call in opened if call.guarded is not None]
            refused = refused or any(queue_time_refusal(c.call.verb, memory_limit, writes_denied, c.on_replica)  # type: ignore[union-attr]
                                     for c in sent)  # fmt: skip
            if refused:
                discarded.update(call.index for call in opened)
            elif switched:
                at_exec.update((call.index, (memory_limit, writes_denied)) for call in opened)
            opened = None if r.is_exec else opened
    return discarded, at_exec


def resolve(steps: Sequence[Step]) -> tuple[Resolved, ...]:
    """Every step resolved (the steps must be well paired: a loaded history is)."""
    begun: dict[str, Resolved] = {}
    out: list[Resolved] = []
    in_multi = multi_on_replica = False
    multi_protocol = 2  # the open transaction's connection's
    for index, step in enumerate(steps):
        if isinstance(step, Multi | Exec):
            in_multi = isinstance(step, Multi)
            # a transaction on the replicas: its MULTI and EXEC marked so too (one segment with its calls)
            on_replica = step.target is not None if isinstance(step, Multi) else multi_on_replica
            protocol = step.protocol if isinstance(step, Multi) else multi_protocol
            out.append(Resolved(index, step, on_replica=on_replica, protocol=protocol))
            multi_on_replica = in_multi and on_replica
            multi_protocol = protocol if in_multi else 2
            continue
        if isinstance(step, MemoryLimit | ReplicasRequired) and in_multi:
            out.append(Resolved(index, step, in_multi=True))  # switched between MULTI and EXEC
            continue
        if isinstance(step, CallStep | BeginClaim):
            outcome = guard(step.call)
            unwalked = isinstance(step, CallStep) and step.bulk is not None and unwalked_at(steps, index)
            resolved = Resolved(
                index,
                step,
                step.call,
                step.user,
                outcome if isinstance(outcome, Guarded) else None,
                outcome if isinstance(outcome, str) else None,
                executor=step.executor,
                protocol=multi_protocol if in_multi else step.protocol,
                in_multi=in_multi,
                on_replica=(isinstance(step, CallStep) and step.target is not None) or (in_multi and multi_on_replica),
                unwalked=unwalked,
            )
            if isinstance(step, BeginClaim):
                begun[step.worker] = resolved
        elif isinstance(step, EndClaim):
            opened = begun.pop(step.worker)
            resolved = Resolved(index, step, opened.call, opened.user, opened.guarded, opened.refusal, opened.index,
                                opened.executor, opened.protocol)  # fmt: skip
        else:
            resolved = Resolved(index, step)
        out.append(resolved)
    if any(r.is_memory or r.is_replicas or (r.is_multi and r.on_replica) for r in out):
        discarded, at_exec = _transactions(out)
        out = [replace(r, aborted=True) if r.index in discarded
               else replace(r, at_exec=at_exec[r.index]) if r.index in at_exec else r
               for r in out]  # fmt: skip
    return tuple(out)
