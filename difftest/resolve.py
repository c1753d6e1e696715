"""A history resolved once: every step with the call it sends, its user, its guards' verdict, and
for a split CLAIM's end the begin it closes. One pairing rule for workers, used by the loader, the
shrinker and the replay alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from difftest.calls import Call
from difftest.commands import TRANSITIONS, Layout, Transition
from difftest.guards import GuardError, check_call
from difftest.history import SCRIPTS, Advance, BeginClaim, CallStep, EndClaim, RawWrite, Restart, Step


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
    """One step of a history, resolved against the steps before it."""

    index: int
    step: Step
    call: Call | None = None  # the transition call this step sends (an end: its begin's call)
    user: str | None = None
    guarded: Guarded | None = None  # the call passed the guards
    refusal: str | None = None  # the call failed them: the error text (contract row D6)
    begun_at: int | None = None  # an end: the index of its begin
    executor: str | None = None  # SCRIPTS: the native server runs the Lua scripts for it too (an end: its begin's)

    @property
    def transition(self) -> Transition | None:
        return TRANSITIONS[self.call.verb] if self.call is not None else None

    @property
    def via_scripts(self) -> bool:
        """The call runs through the Lua scripts (the host adapter) on the native server too."""
        return self.executor == SCRIPTS

    @property
    def is_begin(self) -> bool:
        return isinstance(self.step, BeginClaim)

    @property
    def is_end(self) -> bool:
        return isinstance(self.step, EndClaim)

    @property
    def sends_transition(self) -> bool:
        """The step runs a whole transition on the native side (a begin only reads, on the Lua side)."""
        return self.call is not None and not self.is_begin

    @property
    def is_raw(self) -> bool:
        return isinstance(self.step, RawWrite)

    @property
    def is_restart(self) -> bool:
        return isinstance(self.step, Restart)

    @property
    def is_advance(self) -> bool:
        return isinstance(self.step, Advance)


def guard(call: Call) -> Guarded | str:
    """The argument rules, once: the call's layout and arguments, or the refusal's text."""
    try:
        queue, args = check_call(call.verb, call.numkeys, call.rest)
    except GuardError as refusal:
        return refusal.message
    return Guarded(Layout(queue), tuple(args))


def resolve(steps: Sequence[Step]) -> tuple[Resolved, ...]:
    """Every step resolved (the steps must be well paired: a loaded history is)."""
    begun: dict[str, Resolved] = {}
    out: list[Resolved] = []
    for index, step in enumerate(steps):
        if isinstance(step, CallStep | BeginClaim):
            outcome = guard(step.call)
            resolved = Resolved(
                index,
                step,
                step.call,
                step.user,
                outcome if isinstance(outcome, Guarded) else None,
                outcome if isinstance(outcome, str) else None,
                executor=step.executor,
            )
            if isinstance(step, BeginClaim):
                begun[step.worker] = resolved
        elif isinstance(step, EndClaim):
            opened = begun.pop(step.worker)
            resolved = Resolved(index, step, opened.call, opened.user, opened.guarded, opened.refusal, opened.index,
                                opened.executor)  # fmt: skip
        else:
            resolved = Resolved(index, step)
        out.append(resolved)
    return tuple(out)
