"""The scripted scenario the main job runs until the campaign exists: every transition once or more."""

from __future__ import annotations

from dataclasses import dataclass

from difftest.calls import Call


@dataclass(frozen=True)
class Advance:
    ms: int


@dataclass(frozen=True)
class Restart:
    crash: bool = False


ScenarioStep = Call | Advance | Restart

SCENARIO: tuple[ScenarioStep, ...] = (
    Call.of("ENQUEUE", "q", "j1", "payload-1", 0),
    Call.of("ENQUEUE", "q", "j2", b"\x00binary\xff", 0),
    Call.of("ENQUEUE", "q", "j3", "later", 250),
    Call.of("ENQUEUE", "q", "j1", "duplicate", 0),
    Advance(10),
    Call.of("CLAIM", "q", 100),
    Call.of("EXTEND", "q", "j1", 1, 200),
    Call.of("CLAIM", "q", 100),
    Call.of("COMPLETE", "q", "j1", 1),
    Call.of("FAIL", "q", "j2", 1, "boom", 2, 50),
    Advance(50),
    Call.of("PROMOTE", "q", 10),
    Call.of("PAUSE", "q"),
    Call.of("CLAIM", "q", 100),
    Call.of("RESUME", "q"),
    Call.of("CLAIM", "q", 100),
    Advance(200),
    Call.of("PROMOTE", "q", 10),
    Call.of("CLAIM", "q", 30),
    Advance(30),
    Call.of("SWEEP", "q", 1, 10),
    Call.of("REVIVE", "q", "j2"),
    Call.of("CLAIM", "q", 30),
    Restart(),
    Advance(20),
    Call.of("COMPLETE", "q", "j2", 3),
    Call.of("ENQUEUE", "q", "j4", "after restart", 0),
    Restart(crash=True),
    Call.of("CLAIM", "q", 0),
    Call.of("CLAIM", "q", 30),
)
