"""Behaviour coverage: the labels a replay reached, derived from its records (pure).

Labels name each transition's reply kinds, each sweep verdict, each contract row and each
invariant exercised. A default campaign must reach every label in `REQUIRED`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from difftest.commands import SWEEP_VERDICTS, TRANSITIONS, Moves, Stamp
from difftest.commands import reply_kind as _moved_kind
from difftest.contract import RULES
from difftest.invariants import INVARIANTS
from difftest.replay import ReplayResult
from difftest.replies import ErrorReply, NotSent, Refused, Reply

REPLY_KINDS: dict[str, tuple[str, ...]] = {verb: t.reply_kinds for verb, t in TRANSITIONS.items()}

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
    return _moved_kind(verb, reply)


def labels(result: ReplayResult) -> Counter[str]:
    """Every label the replay reached, counted (the native side's replies; they equal the Lua
    side's except where a contract row was recorded)."""
    reached: Counter[str] = Counter()
    restarted = False
    stale_refused = fenced_success = False
    for record in result.records:
        resolved = record.resolved
        if record.verdict.rule:
            reached[f"contract:{record.verdict.rule}"] += 1
        if resolved.is_restart:
            restarted = True
            continue
        transition = resolved.transition
        if transition is None or not resolved.sends_transition or isinstance(record.native_reply, NotSent):
            continue
        reply = record.native_reply
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
        if transition.fenced:
            fenced_success |= kind != "fenced" and not kind.startswith(("error", "refused"))
            stale_refused |= kind == "fenced"
        _invariant_labels(reached, transition.moves, kind, moved)
    if fenced_success and stale_refused:
        reached["invariant:fence"] += 1
    if result.records and not result.divergence:
        reached["invariant:attempts-monotonic"] += int(reached["reply:CLAIM:claimed"] > 1)
    return reached


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
