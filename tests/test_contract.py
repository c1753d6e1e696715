"""The contract's rules as pure functions: each precondition and each exact outcome enforced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from difftest.history.format import Advance, BeginClaim, CallStep, EndClaim, Step
from difftest.history.resolve import resolve
from difftest.judge.contract import ALTERNATIVES, RULES, StepView, Verdict, candidates, lua_number, verdict_of
from difftest.judge.verdicts import JudgeState, expected_epochs
from difftest.judge.verdicts import judge as judge_step
from difftest.replay import observations
from difftest.spec import errors
from difftest.spec.calls import Call
from difftest.spec.replies import ErrorReply, NotSent, Refused, Reply
from difftest.spec.snapshot import Snapshot
from tests.helpers import H, S, Z

NOW = 2000
RUN_ID = b"r" * 40


def ks(**entries: Any) -> Snapshot:
    return {f"emq:{{q}}:{name.replace('__', ':')}".encode(): entry for name, entry in entries.items()}


def view(
    step: Step,
    before: Snapshot,
    lua_reply: Reply,
    native_reply: Reply,
    lua_after: Snapshot | None = None,
    native_after: Snapshot | None = None,
    epochs: dict[bytes, bytes] | None = None,
    paused_read: Reply = None,
    call: Call | None = None,
) -> StepView:
    """One step's view; an end is resolved against a begin of `call` just before it."""
    if isinstance(step, EndClaim):
        assert call is not None
        resolved = resolve((BeginClaim(step.worker, call), step))[1]
    else:
        resolved = resolve((step,))[0]
    return StepView(
        resolved, NOW, RUN_ID, before, epochs or {}, lua_reply, native_reply,
        before if lua_after is None else lua_after, before if native_after is None else native_after,
        paused_read,
    )  # fmt: skip


def judge(view: StepView) -> Verdict:
    return verdict_of(view)


def step(verb: str, *args: object) -> CallStep:
    return CallStep(Call.of(verb, "q", *args))  # type: ignore[arg-type]


def test_every_rule_is_described() -> None:
    assert set(RULES) == {"D1", "D2", "D3", "D4", "D5", "D6", "D7", "D8", "D9", "N1", "N2", "N3", "N4", "N5"}


def as_user(step_view: StepView, user: str, denied: set[tuple[bytes, str]]) -> StepView:
    """The same view, the call made by `user`, who may not touch `denied`."""
    step = step_view.resolved.step
    assert isinstance(step, CallStep)
    resolved = resolve((CallStep(step.call, user),))[0]
    return StepView(**{**step_view.__dict__, "resolved": resolved, "denied": frozenset(denied)})


NOPERM = ErrorReply("NOPERM No permissions to access a key")
PENDING, META = b"emq:{q}:pending", b"emq:{q}:meta"


def test_n3_a_paused_claim_by_a_caller_denied_a_declared_key() -> None:
    state = ks(pending=Z(j1=5), meta=H(paused=b"1"), job__j1=H(payload=b"p"))
    allowed = as_user(view(step("CLAIM", 10), state, [], NOPERM), "u", {(PENDING, "write")})
    assert judge(allowed) == Verdict("allowed", "N3")
    # the native must be refused and write nothing; the Lua host must answer empty
    wrote = as_user(view(step("CLAIM", 10), state, [], NOPERM, native_after={}), "u", {(PENDING, "write")})
    assert judge(wrote).kind == "divergence"
    claimed = as_user(view(step("CLAIM", 10), state, [], [b"j1", b"p", 1]), "u", {(PENDING, "write")})
    assert judge(claimed).kind == "divergence"
    # not paused: the host sends its script, and the server refuses both alike (no rule)
    running = ks(pending=Z(j1=5), job__j1=H(payload=b"p"))
    assert judge(as_user(view(step("CLAIM", 10), running, NOPERM, NOPERM), "u", {(PENDING, "read")})).kind == "match"
    assert judge(as_user(view(step("CLAIM", 10), running, [], NOPERM), "u", {(PENDING, "read")})).kind == "divergence"


def test_n4_pause_by_a_caller_who_may_write_meta_but_not_read_it() -> None:
    state = ks(pending=Z(j1=5))
    paused = ks(pending=Z(j1=5), meta=H(paused=b"1"))
    allowed = as_user(view(step("PAUSE"), state, 1, NOPERM, lua_after=paused), "u", {(META, "read")})
    assert judge(allowed) == Verdict("allowed", "N4")
    # the native obeys a write-only caller's pause: not the documented outcome
    obeyed = as_user(view(step("PAUSE"), state, 1, 1, lua_after=paused, native_after=paused), "u", {(META, "read")})
    assert judge(obeyed).kind == "divergence"
    # a caller who may not write meta is refused by both
    refused = as_user(view(step("PAUSE"), state, NOPERM, NOPERM), "u", {(META, "write")})
    assert judge(refused).kind == "match"


def test_n5_a_claims_attempts_past_2_53_rounded_only_in_the_scripts_reply() -> None:
    exact = 2**53 + 3  # odd past 2^53: a double holds 2^53 + 4 instead
    before = ks(pending=Z(j1=5), job__j1=H(payload=b"p", attempts=str(exact - 1).encode()))
    after = ks(active=Z(j1=NOW + 10), job__j1=H(payload=b"p", attempts=str(exact).encode(), state=b"active"))
    rounded = [b"j1", b"p", 2**53 + 4]
    assert judge(view(step("CLAIM", 10), before, rounded, [b"j1", b"p", exact], after, after)) == Verdict(
        "allowed", "N5"
    )
    # a native that counted two, or rounded too (a Lua number in the module), is a divergence
    counted_twice = ks(
        active=Z(j1=NOW + 10), job__j1=H(payload=b"p", attempts=str(exact + 1).encode(), state=b"active")
    )
    assert judge(view(step("CLAIM", 10), before, rounded, [b"j1", b"p", exact + 1], after, counted_twice)).kind == (
        "divergence"
    )
    assert judge(view(step("CLAIM", 10), before, rounded, [b"j1", b"p", exact], after, before)).kind == "divergence"
    # a native that rounds like the scripts (a double in the module) does not answer the count
    assert judge(view(step("CLAIM", 10), before, rounded, rounded, after, after)).kind == "divergence"
    # at or below 2^53 a double is exact: any difference there is judged as before
    small = ks(active=Z(j1=NOW + 10), job__j1=H(payload=b"p", attempts=b"8", state=b"active"))
    assert judge(view(step("CLAIM", 10), before, [b"j1", b"p", 7], [b"j1", b"p", 8], small, small)).kind == "divergence"


def test_a_count_as_the_scripts_reply_it_is_a_lua_number() -> None:
    """N5's rounding, which D1's Lua side meets too (a stale claim past 2^53, found by a null run)."""
    assert [lua_number(n) for n in (7, 2**53, -(2**53), 2**53 + 1, 2**53 + 3, -(2**53) - 1)] == [
        7, 2**53, -(2**53), 2**53, 2**53 + 4, -(2**53)
    ]  # fmt: skip


def test_d6_the_server_refuses_a_caller_denied_a_key_before_the_arguments() -> None:
    state = ks(pending=Z(j1=5))
    bad = step("ENQUEUE", "j2", "p", -1)
    refusal = Refused(errors.ARG)
    by_acl = as_user(view(bad, state, refusal, NOPERM), "u", {(PENDING, "write")})
    assert judge(by_acl) == Verdict("allowed", "D6")
    # a caller the server lets through gets the argument error
    assert judge(as_user(view(bad, state, refusal, NOPERM), "u", set())).kind == "divergence"
    assert judge(as_user(view(bad, state, refusal, ErrorReply(errors.ARG)), "u", set())) == Verdict("allowed", "D6")


def test_exact_match_without_a_rule() -> None:
    state = ks(pending=Z(j1=5))
    assert judge(view(step("PROMOTE", 5), state, 0, 0)).kind == "match"
    assert judge(view(Advance(1), state, NotSent(""), NotSent(""))).kind == "match"


def test_a_difference_no_rule_allows_is_a_divergence() -> None:
    state = ks(pending=Z(j1=5))
    verdict = judge(view(step("PROMOTE", 5), state, 0, 1))
    assert verdict.kind == "divergence" and "no contract row" in verdict.reason
    verdict = judge(view(step("PROMOTE", 5), state, 0, 0, native_after={}))
    assert verdict.kind == "divergence" and "keyspaces differ" in verdict.reason


def test_d6_exact_and_violated() -> None:
    claim0 = step("CLAIM", 0)
    ok = view(claim0, {}, Refused(errors.ARG), ErrorReply(errors.ARG))
    assert judge(ok).rule == "D6" and judge(ok).ok
    wrong_text = view(claim0, {}, Refused(errors.ARG), ErrorReply(errors.NOTINT))
    assert not judge(wrong_text).ok
    wrote = view(claim0, {}, Refused(errors.ARG), ErrorReply(errors.ARG), native_after=ks(meta=H(x=1)))
    assert not judge(wrote).ok


def test_d2_native_must_answer_the_error() -> None:
    before = ks(meta=S("junk"), pending=Z(j1=5), job__j1=H(payload="p"))
    claim = step("CLAIM", 100)
    assert judge(view(claim, before, [], ErrorReply("WRONGTYPE Operation"))).rule == "D2"
    # a native that quietly does what the host did is a defect
    quiet = judge(view(claim, before, [], []))
    assert quiet.kind == "divergence" and quiet.rule == "D2"


def test_d3_native_writes_nothing() -> None:
    before = ks(pending=Z(j9=5), job__j9=S("junk"))
    claim = step("CLAIM", 100)
    lua_after = ks(job__j9=S("junk"))  # the lost id
    ok = view(claim, before, ErrorReply("WRONGTYPE x script"), ErrorReply("WRONGTYPE y"), lua_after=lua_after)
    assert judge(ok).rule == "D3" and judge(ok).ok
    same_as_lua = view(claim, before, ErrorReply("WRONGTYPE x"), ErrorReply("WRONGTYPE y"),
                       lua_after=lua_after, native_after=lua_after)  # fmt: skip
    assert not judge(same_as_lua).ok


def test_d3_read_errors_before_writes_must_match() -> None:
    before = ks(active=S("junk"))
    extend = step("EXTEND", "j1", 1, 10)
    assert judge(view(extend, before, ErrorReply("WRONGTYPE a"), ErrorReply("WRONGTYPE b"))).kind == "match"


def test_d4_maps_error_classes() -> None:
    before = ks(pending=Z(j1=5), job__j1=H(payload="p", attempts="abc"))
    claim = step("CLAIM", 100)
    lua_after = ks(job__j1=H(payload="p", attempts="abc"))
    lua_error = ErrorReply("ERR hash value is not an integer script: ...")
    assert judge(view(claim, before, lua_error, ErrorReply(errors.NOTINT), lua_after=lua_after)).rule == "D4"
    assert not judge(view(claim, before, lua_error, ErrorReply(errors.OVERFLOW), lua_after=lua_after)).ok


def test_d5_active_not_a_zset() -> None:
    before = ks(active=S("x"), pending=Z(j1=5), job__j1=H(payload="p"))
    lua_after = ks(active=S("x"), job__j1=H(payload="p", attempts=1, state="active"))
    ok = view(step("CLAIM", 100), before, ErrorReply("WRONGTYPE"), ErrorReply("WRONGTYPE"), lua_after=lua_after)
    assert judge(ok).rule == "D5" and judge(ok).ok


def test_d7_exact_outcomes_on_both_sides() -> None:
    row = b"emq:{q}:job:j1"
    before = ks(active=Z(j1=1100), job__j1=H(payload="p", attempts=1, state="active"))
    lua_after = ks(dead=Z(j1=0), metrics__failed=H(count=1),
                   job__j1=H(payload="p", attempts=1, state="dead", stalled=1, last_error="stalled"))  # fmt: skip
    native_after = ks(pending=Z(j1=0), job__j1=H(payload="p", attempts=1, state="pending"))
    sweep = step("SWEEP", 1, 10)
    foreign = {row: b"o" * 40}
    good = view(sweep, before, [0, 1, 0, 0], [0, 0, 0, 1], lua_after, native_after, foreign)
    assert judge(good).rule == "D7" and judge(good).ok
    # the exemption must leave stalled alone
    counted = ks(pending=Z(j1=0), job__j1=H(payload="p", attempts=1, state="pending", stalled=1))
    assert not judge(view(sweep, before, [0, 1, 0, 0], [0, 0, 0, 1], lua_after, counted, foreign)).ok
    # with the current run_id the lease is counted: both must match exactly
    current = {row: RUN_ID}
    assert judge(view(sweep, before, [0, 1, 0, 0], [0, 0, 0, 1], lua_after, native_after, current)).kind == "divergence"


def test_d8_group_field() -> None:
    before = ks(active=Z(a=1000), job__a=H(payload="p", attempts=1, state="active", group="g"))
    sweep = step("SWEEP", 5, 10)
    lua_after = ks(pending=Z(a=0), job__a=H(payload="p", attempts=1, state="pending", group="g", stalled=1))
    ok = view(sweep, before, [1, 0, 0, 0], ErrorReply(errors.LANE), lua_after=lua_after,
              epochs={b"emq:{q}:job:a": RUN_ID})  # fmt: skip
    assert judge(ok).rule == "D8" and judge(ok).ok
    # the scripts ignore the group: their outcome is exact
    assert not judge(view(sweep, before, [0, 0, 0, 0], ErrorReply(errors.LANE), lua_after=lua_after,
                          epochs={b"emq:{q}:job:a": RUN_ID})).ok  # fmt: skip


def test_d9_promote() -> None:
    before = ks(delayed=Z(bad=1500), job__bad=S("junk"))
    lua_after = ks(pending=Z(bad=1500), job__bad=S("junk"))
    ok = view(step("PROMOTE", 10), before, ErrorReply("WRONGTYPE"), ErrorReply("WRONGTYPE"), lua_after=lua_after)
    assert judge(ok).rule == "D9"
    wrote = view(step("PROMOTE", 10), before, ErrorReply("WRONGTYPE"), ErrorReply("WRONGTYPE"),
                 lua_after=lua_after, native_after=lua_after)  # fmt: skip
    assert not judge(wrote).ok


def test_d1_stale_read_against_atomic_decision() -> None:
    begun = Call.of("CLAIM", "q", 100)
    before = ks(meta=H(paused=1), pending=Z(j1=5), job__j1=H(payload="p"))
    end = EndClaim("A")
    claimed = ks(meta=H(paused=1), active=Z(j1=NOW + 100), job__j1=H(payload="p", attempts=1, state="active"))
    ok = view(end, before, [b"j1", b"p", 1], [], lua_after=claimed, paused_read=None, call=begun)
    assert judge(ok).rule == "D1" and judge(ok).ok
    wrong = view(end, before, [b"j1", b"p", 2], [], lua_after=claimed, paused_read=None, call=begun)
    assert not judge(wrong).ok


def test_n2_extend_without_row_write_permission() -> None:
    row = b"emq:{q}:job:j1"
    before = ks(active=Z(j1=2050), job__j1=H(payload="p", attempts=1, state="active"))
    lua_after = ks(active=Z(j1=NOW + 100), job__j1=H(payload="p", attempts=1, state="active"))
    extend = step("EXTEND", "j1", 1, 100)
    denied = frozenset({(row, "write")})
    ok = view(extend, before, 1, ErrorReply(errors.NOPERM), lua_after=lua_after)
    ok = StepView(**{**ok.__dict__, "denied": denied})
    assert judge(ok).rule == "N2" and judge(ok).ok
    wrote = StepView(**{**ok.__dict__, "native_after": lua_after})
    assert not judge(wrote).ok
    # a caller who may write the row gets no allowance: both must extend
    allowed = StepView(**{**ok.__dict__, "denied": frozenset()})
    assert judge(allowed).kind == "divergence"


def test_a_rule_left_out_of_a_steps_candidates_answers_none() -> None:
    """The judge tries only a step's candidate rules (contract.candidates: those of its verb, and
    D3/D4 only after a Lua error, D6 only after a refusal, D1 only at a split claim's end): every
    rule left out must answer None, here at every step of the recorded observations
    (tests/observations/), judged in turn."""
    tried = 0
    for path in sorted((Path(__file__).parent / "observations").glob("*.jsonl")):
        _, steps, _ = observations.load(path)
        state = JudgeState()
        for o in steps:
            step_view = StepView(o.resolved, o.now_ms, o.run_id, state.before, state.before_epochs, o.lua_reply,
                                 o.native_reply, o.lua_after, o.native_after, None, o.denied, o.native_epochs,
                                 expected_epochs(state, o))  # fmt: skip
            for rule in ALTERNATIVES:
                if rule not in candidates(step_view):
                    assert rule.check(step_view) is None, (path.name, o.resolved.index, rule.id)
                    tried += 1
            state, verdict = judge_step(state, o)
            assert verdict.ok
    assert tried > 1000
