"""The scripted scenario the main job runs until the campaign exists: every transition, a split
CLAIM that a PAUSE lands inside (D1), a restart that exempts a lease (D7), and a refused call (D6)."""

from __future__ import annotations

from difftest.history.format import Advance, BeginClaim, EndClaim, History, Restart, Step, call_step
from difftest.spec.calls import Call

SCENARIO_STEPS: tuple[Step, ...] = (
    call_step("ENQUEUE", "q", "j1", "payload-1", 0),
    call_step("ENQUEUE", "q", "j2", b"\x00binary\xff", 0),
    call_step("ENQUEUE", "q", "j3", "later", 250),
    call_step("ENQUEUE", "q", "j1", "duplicate", 0),
    Advance(10),
    call_step("CLAIM", "q", 100),
    call_step("EXTEND", "q", "j1", 1, 200),
    call_step("CLAIM", "q", 100),
    call_step("COMPLETE", "q", "j1", 1),
    call_step("FAIL", "q", "j2", 1, "boom", 2, 50),
    Advance(50),
    call_step("PROMOTE", "q", 10),
    call_step("PAUSE", "q"),
    call_step("CLAIM", "q", 100),
    BeginClaim("A", Call.of("CLAIM", "q", 100)),
    call_step("RESUME", "q"),
    EndClaim("A"),
    call_step("CLAIM", "q", 100),
    Advance(200),
    call_step("PROMOTE", "q", 10),
    call_step("CLAIM", "q", 30),
    Advance(30),
    call_step("SWEEP", "q", 1, 10),
    call_step("REVIVE", "q", "j2"),
    call_step("CLAIM", "q", 30),
    Restart(),
    Advance(20),
    call_step("COMPLETE", "q", "j2", 3),
    call_step("ENQUEUE", "q", "j4", "after restart", 0),
    call_step("CLAIM", "q", 5),
    Restart(crash=True),
    Advance(10),
    call_step("SWEEP", "q", 3, 10),
    call_step("CLAIM", "q", 0),
)

SCENARIO = History(SCENARIO_STEPS, note="the scripted scenario of the main job")
