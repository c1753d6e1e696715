"""The history generator: a Hypothesis strategy that draws a whole history up front, step by step.

Drawing the steps first and replaying them after keeps Hypothesis's cost per step low (no state
machine round trip per step) while its shrinker still works on the underlying choices: any
shorter choice sequence still decodes to a valid history (claims stay paired, restarts close them).
Tiny pools of queues, ids, tokens and durations make transitions collide and deadlines meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from difftest.calls import Call
from difftest.commands import MAX_DURATION_MS, TRANSITIONS, base_key, queue_keys
from difftest.history import (
    Advance,
    BeginClaim,
    CallStep,
    EndClaim,
    History,
    RawWrite,
    Restart,
    Step,
)

QUEUES = (b"q", b"r")
IDS = (b"j1", b"j2", b"j3", b"\x00", b"\xff\xfe")
PAYLOADS = (b"p", b"", b"\x00\xff\r\n", "caf\u00e9".encode())
ERRORS = (b"boom", b"", b"\x00")
WORKERS = ("A", "B")
DURATIONS = (1, 5, 10, 50, 100)
ADVANCES = (1, 4, 5, 6, 9, 10, 11, 49, 50, 51, 99, 100, 101, 250)
TOKENS = (1, 1, 2, 2, 3, 0, 4)
I64_MAX = str(2**63 - 1).encode()
BAD_INTEGERS = (b"abc", b"", b"0", b"-1", b"007", b"+5", b"99999999999999999999", str(MAX_DURATION_MS + 1).encode())


def _rules_for(queue: bytes, *suffixes: str) -> tuple[str, ...]:
    base = base_key(queue).decode("latin-1")
    return tuple(f"~{base}{suffix}" for suffix in suffixes)


def _user_rules() -> dict[str, tuple[str, ...]]:
    """ACL users with access to some of each queue's keys and not others."""
    sets = ("pending", "active", "delayed", "dead", "done")
    users: dict[str, tuple[str, ...]] = {}
    for name, suffixes, extra in (
        ("nometa", (*sets, "job:*", "metrics:*"), ()),
        ("norows", (*sets, "meta", "metrics:*"), ()),
        ("readrows", (*sets, "meta", "metrics:*"), ("%R~emq:{{{q}}}:job:*",)),
        ("nometrics", (*sets, "meta", "job:*"), ()),
    ):
        rules: list[str] = []
        for queue in QUEUES:
            rules += _rules_for(queue, *suffixes)
            rules += [e.format(q=queue.decode()) for e in extra]
        users[name] = tuple(rules)
    return users


USERS = _user_rules()


@dataclass(frozen=True)
class HistoryShape:
    """What kinds of steps a history may hold; the defaults reach every contract row."""

    min_steps: int = 1
    max_steps: int = 40
    restarts: bool = True
    crashes: bool = True
    corruption: bool = True
    users: bool = True
    interleaving: bool = True
    malformed: bool = True


def _pick(draw: Any, pool: tuple[Any, ...]) -> Any:
    return draw(st.sampled_from(pool))


def _transition_call(draw: Any, verb: str, queue: bytes) -> Call:
    job = _pick(draw, IDS)
    token = _pick(draw, TOKENS)
    args: tuple[Any, ...]
    if verb == "ENQUEUE":
        args = (job, _pick(draw, PAYLOADS), draw(st.sampled_from((0, 0, 0, *DURATIONS))))
    elif verb == "CLAIM":
        args = (_pick(draw, DURATIONS),)
    elif verb == "EXTEND":
        args = (job, token, _pick(draw, DURATIONS))
    elif verb == "COMPLETE":
        args = (job, token)
    elif verb == "FAIL":
        args = (job, token, _pick(draw, ERRORS), draw(st.integers(1, 3)), draw(st.sampled_from((0, *DURATIONS))))
    elif verb == "PROMOTE":
        args = (draw(st.integers(1, 3)),)
    elif verb == "SWEEP":
        args = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    elif verb == "REVIVE":
        args = (job,)
    else:
        args = ()
    return Call.of(verb, queue, *args)


def _malformed(draw: Any, call: Call) -> Call:
    """The same call with one thing wrong: an integer, the numkeys, the argument count, the layout."""
    transition = TRANSITIONS[call.verb]
    int_positions = [i for i, a in enumerate(transition.args) if a.kind.value == "int"]
    choice = draw(st.sampled_from(("int", "numkeys", "argc", "layout") if int_positions else ("numkeys", "argc", "layout")))
    rest = list(call.rest)
    if choice == "int":
        position = transition.numkeys + draw(st.sampled_from(int_positions))
        rest[position] = _pick(draw, BAD_INTEGERS)
        return Call(call.verb, call.numkeys, tuple(rest))
    if choice == "numkeys":
        return Call(call.verb, str(transition.numkeys + draw(st.sampled_from((-1, 1)))).encode(), call.rest)
    if choice == "argc":
        return Call(call.verb, call.numkeys, (*call.rest, b"extra") if draw(st.booleans()) else call.rest[:-1])
    other = queue_keys(transition, b"other")
    bad_keys = [b"emq:{}:" + k.split(b":", 2)[-1] for k in rest[: transition.numkeys]]
    keys = other[:1] + rest[1 : transition.numkeys] if transition.numkeys > 1 else bad_keys
    return Call(call.verb, call.numkeys, (*keys, *rest[transition.numkeys :]))


def _corruption(draw: Any, queue: bytes) -> RawWrite:
    base = base_key(queue)
    row = base + b"job:" + _pick(draw, IDS)
    kind = draw(st.sampled_from((
        "set-wrong-type", "row-counter", "metrics-counter", "group", "ghost", "drop-row", "foreign-epoch",
    )))  # fmt: skip
    if kind == "set-wrong-type":
        key = draw(st.sampled_from((*(base + s for s in (b"pending", b"active", b"delayed", b"dead", b"done", b"meta")), row)))
        return RawWrite((b"SET", key, b"junk"))
    if kind == "row-counter":
        field = draw(st.sampled_from((b"attempts", b"stalled")))
        return RawWrite((b"HSET", row, field, draw(st.sampled_from((b"abc", I64_MAX, b"7")))))
    if kind == "metrics-counter":
        which = draw(st.sampled_from((b"metrics:failed", b"metrics:completed")))
        return RawWrite((b"HSET", base + which, b"count", draw(st.sampled_from((b"x", I64_MAX)))))
    if kind == "group":
        return RawWrite((b"HSET", row, b"group", b"g"))
    if kind == "ghost":
        key = draw(st.sampled_from((b"pending", b"active", b"delayed", b"dead")))
        return RawWrite((b"ZADD", base + key, b"0", b"ghost-" + _pick(draw, IDS)))
    if kind == "drop-row":
        return RawWrite((b"DEL", row))
    return RawWrite((b"HSET", row, b"lease_epoch", b"0" * 40))


# Weights per thousand steps. A restart costs ~40 ms of server start-up and an advance ~1 ms until
# the servers read the new time, against ~0.1 ms for a call: both are kept rare enough that a
# campaign spends its time on transitions, often enough that a default campaign reaches D7.
STEP_WEIGHTS = (
    ("call", 630), ("advance", 110), ("begin", 50), ("end", 50), ("corrupt", 45),
    ("user", 45), ("malformed", 45), ("restart", 25),
)  # fmt: skip


def _weighted(kinds: tuple[tuple[str, int], ...]) -> st.SearchStrategy[str]:
    """A kind drawn by weight; it shrinks towards the first (a plain call)."""
    total = sum(w for _, w in kinds)

    def pick(n: int) -> str:
        for kind, weight in kinds:
            if n < weight:
                return kind
            n -= weight
        return kinds[-1][0]

    return st.integers(0, total - 1).map(pick)


@st.composite
def histories(draw: Any, shape: HistoryShape = HistoryShape()) -> History:
    """A whole history: transitions on two queues, clock advances across deadlines, restarts and
    crashes, corruptions, restricted users, split CLAIMs with steps between, malformed calls."""
    count = draw(st.integers(shape.min_steps, shape.max_steps))
    steps: list[Step] = []
    open_claims: list[str] = []
    enabled = {
        "restart": shape.restarts or shape.crashes,
        "corrupt": shape.corruption,
        "user": shape.users,
        "begin": shape.interleaving,
        "end": shape.interleaving,
        "malformed": shape.malformed,
    }
    kinds = _weighted(tuple((k, w) for k, w in STEP_WEIGHTS if enabled.get(k, True)))
    verbs = tuple(TRANSITIONS)
    for _ in range(count):
        kind = draw(kinds)
        queue = _pick(draw, QUEUES)
        if kind == "advance":
            ms = _pick(draw, ADVANCES)
            if steps and isinstance(steps[-1], Advance):  # one wait for the clock, not two
                ms += steps.pop().ms
            steps.append(Advance(ms))
        elif kind == "restart":
            steps += [EndClaim(w) for w in open_claims]
            open_claims.clear()
            crash = shape.crashes and (not shape.restarts or draw(st.booleans()))
            steps.append(Restart(crash=crash))
        elif kind == "corrupt":
            steps.append(_corruption(draw, queue))
        elif kind == "begin":
            idle = [w for w in WORKERS if w not in open_claims]
            if idle:
                worker = _pick(draw, tuple(idle))
                open_claims.append(worker)
                steps.append(BeginClaim(worker, _transition_call(draw, "CLAIM", queue)))
        elif kind == "end":
            if open_claims:
                worker = _pick(draw, tuple(open_claims))
                open_claims.remove(worker)
                steps.append(EndClaim(worker))
        else:
            verb = draw(st.sampled_from(verbs))
            call = _transition_call(draw, verb, queue)
            if kind == "malformed":
                call = _malformed(draw, call)
            user = _pick(draw, tuple(USERS)) if kind == "user" else None
            steps.append(CallStep(call, user))
    steps += [EndClaim(w) for w in open_claims]
    return History(tuple(steps), users=dict(USERS) if shape.users else {})
