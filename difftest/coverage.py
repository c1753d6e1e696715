"""Behaviour coverage: the labels a replay reached, derived from its records (pure).

Labels name each transition's reply kinds, each sweep verdict, each contract row and each
invariant exercised. A default campaign must reach every label in `REQUIRED`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from difftest.calls import Call
from difftest.contract import RULES
from difftest.guards import GuardError, check_call
from difftest.history import BeginClaim, CallStep, EndClaim, Restart
from difftest.invariants import INVARIANTS
from difftest.replay import ReplayResult
from difftest.replies import ErrorReply, NotSent, Refused, Reply

REPLY_KINDS: dict[str, tuple[str, ...]] = {
    "ENQUEUE": ("added", "duplicate"),
    "CLAIM": ("claimed", "empty"),
    "EXTEND": ("extended", "fenced"),
    "COMPLETE": ("completed", "fenced"),
    "FAIL": ("dead", "retry", "fenced"),
    "PROMOTE": ("promoted", "none-due"),
    "SWEEP": ("swept", "none-expired"),
    "REVIVE": ("revived", "not-dead"),
    "PAUSE": ("paused", "already"),
    "RESUME": ("resumed", "already"),
}
SWEEP_VERDICTS = ("recover", "die", "ghost", "exempt")

REQUIRED: tuple[str, ...] = (
    *(f"reply:{verb}:{kind}" for verb, kinds in REPLY_KINDS.items() for kind in kinds),
    *(f"sweep:{verdict}" for verdict in SWEEP_VERDICTS),
    *(f"contract:{rule}" for rule in RULES),
    *(f"invariant:{name}" for name in INVARIANTS),
)


def reply_kind(verb: str, reply: Reply) -> str:
    """A reply's kind for coverage: errors and refusals by their code."""
    if isinstance(reply, ErrorReply):
        return f"error:{reply.code}"
    if isinstance(reply, Refused):
        return f"refused:{reply.code}"
    if verb == "ENQUEUE":
        return "added" if reply == 1 else "duplicate"
    if verb == "CLAIM":
        return "claimed" if reply else "empty"
    if verb in ("EXTEND", "COMPLETE"):
        return {"EXTEND": "extended", "COMPLETE": "completed"}[verb] if reply == 1 else "fenced"
    if verb == "FAIL":
        return {b"dead": "dead", b"retry": "retry"}.get(reply, "fenced") if isinstance(reply, bytes) else "fenced"
    if verb == "PROMOTE":
        return "promoted" if isinstance(reply, int) and reply > 0 else "none-due"
    if verb == "SWEEP":
        return "swept" if isinstance(reply, list) and any(reply) else "none-expired"
    if verb == "REVIVE":
        return "revived" if reply == 1 else "not-dead"
    return {"PAUSE": "paused", "RESUME": "resumed"}[verb] if reply == 1 else "already"


def _queue_job(call: Call) -> tuple[bytes, bytes] | None:
    try:
        queue, args = check_call(call.verb, call.numkeys, call.rest)
    except GuardError:
        return None
    return (queue, bytes(args[0])) if args and isinstance(args[0], bytes) else (queue, b"")


def labels(result: ReplayResult) -> Counter[str]:
    """Every label the replay reached, counted (the native side's replies; they equal the Lua
    side's except where a contract row was recorded)."""
    reached: Counter[str] = Counter()
    begun: dict[str, Call] = {}
    restarted = False
    stale_refused = fenced_success = False
    for record in result.records:
        step = record.step
        if record.verdict.rule:
            reached[f"contract:{record.verdict.rule}"] += 1
        if isinstance(step, Restart):
            restarted = True
            continue
        if isinstance(step, BeginClaim):
            begun[step.worker] = step.call
            continue
        call = (
            begun.pop(step.worker) if isinstance(step, EndClaim) else step.call if isinstance(step, CallStep) else None
        )
        if call is None or isinstance(record.native_reply, NotSent):
            continue
        reply = record.native_reply
        kind = reply_kind(call.verb, reply)
        reached[f"reply:{call.verb}:{kind}"] += 1
        if call.verb == "CLAIM" and kind == "claimed":
            reached["contract:N1"] += 1
        if call.verb == "EXTEND" and kind == "extended" and restarted:
            reached["extend-after-restart"] += 1
        if call.verb == "SWEEP" and isinstance(reply, list) and len(reply) == 4:
            for verdict, count in zip(SWEEP_VERDICTS, reply, strict=True):
                if isinstance(count, int) and count > 0:
                    reached[f"sweep:{verdict}"] += count
        if call.verb in ("EXTEND", "COMPLETE", "FAIL"):
            fenced_success |= kind not in ("fenced",) and not kind.startswith(("error", "refused"))
            stale_refused |= kind == "fenced"
        _invariant_labels(reached, call, kind)
    if fenced_success and stale_refused:
        reached["invariant:fence"] += 1
    if result.records and not result.divergence:
        reached["invariant:attempts-monotonic"] += int(reached["reply:CLAIM:claimed"] > 1)
    return reached


def _invariant_labels(reached: Counter[str], call: Call, kind: str) -> None:
    """An invariant counts as exercised when a step gave it something to hold."""
    if call.verb == "ENQUEUE" and kind == "added":
        reached["invariant:placement"] += 1
    if (call.verb, kind) in (("COMPLETE", "completed"), ("FAIL", "dead")):
        reached["invariant:metrics"] += 1
    if call.verb == "COMPLETE" and kind == "completed":
        reached["invariant:done-final"] += 1
    if call.verb == "REVIVE" and kind == "revived":
        reached["invariant:revive-dead-only"] += 1


def merge(counters: Iterable[Counter[str]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for counter in counters:
        total.update(counter)
    return total


def missing(reached: Counter[str]) -> list[str]:
    return [label for label in REQUIRED if reached[label] == 0]


def table(reached: Counter[str]) -> str:
    """The coverage table: every required label with its count, then anything else reached."""
    width = max(len(label) for label in REQUIRED)
    lines = [f"{'behaviour':<{width}}  {'count':>7}"]
    for label in REQUIRED:
        count = reached[label]
        lines.append(f"{label:<{width}}  {count:>7}" + ("  MISSING" if count == 0 else ""))
    extra = sorted(label for label in reached if label not in REQUIRED)
    if extra:
        lines.append("also reached: " + ", ".join(f"{label}×{reached[label]}" for label in extra))
    return "\n".join(lines)
