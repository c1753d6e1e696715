"""Test helpers: expected keyspaces written compactly, and exact comparison against a server."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from difftest.history.format import DEFAULT_START_MS
from difftest.spec.snapshot import Entry, Snapshot, take_snapshot

T0 = DEFAULT_START_MS
Q = "emq:{q}:"


def b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def Z(members: dict[Any, Any] | None = None, **named: Any) -> Entry:
    merged = {**(members or {}), **named}
    return Entry("zset", {b(k): b(v) for k, v in merged.items()}, -1)


def H(fields: dict[Any, Any] | None = None, **named: Any) -> Entry:
    merged = {**(fields or {}), **named}
    return Entry("hash", {b(k): b(v) for k, v in merged.items()}, -1)


def S(value: Any) -> Entry:
    return Entry("string", b(value), -1)


def keyspace(expected: dict[Any, Entry]) -> Snapshot:
    return {b(k): v for k, v in expected.items()}


def assert_keyspace(client: Any, expected: dict[Any, Entry], ignore_fields: tuple[bytes, ...] = ()) -> None:
    seen = take_snapshot(client)
    if ignore_fields:
        seen = {k: _without(v, ignore_fields) for k, v in seen.items()}
    want = keyspace(expected)
    assert seen == want, _explain(seen, want)


def _without(entry: Entry, fields: tuple[bytes, ...]) -> Entry:
    if entry.kind != "hash" or not isinstance(entry.value, dict):
        return entry
    return Entry(entry.kind, {k: v for k, v in entry.value.items() if k not in fields}, entry.pttl)


def _explain(seen: Snapshot, want: Snapshot) -> str:
    lines = ["keyspace differs:"]
    for key in sorted(seen.keys() | want.keys()):
        if seen.get(key) != want.get(key):
            lines.append(f"  {key!r}: seen {seen.get(key)} want {want.get(key)}")
    return "\n".join(lines)


LUA_DIR = Path(__file__).resolve().parent.parent / "executors" / "lua"


def planted_scripts(directory: Path, script: str, old: str, new: str) -> Path:
    """A copy of the Lua scripts with one defect planted in one script."""
    scripts = directory / "lua"
    shutil.copytree(LUA_DIR, scripts, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    source = (scripts / script).read_text()
    assert old in source, f"{old!r} is no longer in {script}: update the planted defect"
    (scripts / script).write_text(source.replace(old, new))
    return scripts


# compose projects the tests bring up are named so; the leftover check (conftest.py) counts what
# they leave and ignores a pair the user keeps running (project difftest, or one of their own)
TEST_PROJECT_PREFIX = "difftest-test-"


def class_steps(steps: Any) -> set[str]:
    """Which of the generators' classes a history's steps hold: a value other writers leave, a
    wrong-typed key or a long-lived counter right before what reads it (`value`, `wrongtype`,
    `long`), a restricted caller (`acl`), an integer argument at a bound (`bound`)."""
    import itertools

    from difftest.history.format import Advance, CallStep, RawWrite
    from difftest.spec import domains

    seen: set[str] = set()
    for step, after in itertools.pairwise(steps):
        if isinstance(step, RawWrite) and isinstance(after, CallStep | RawWrite | Advance):
            command = step.command
            if command[0] in (b"HSET", b"HDEL") and command[2] in domains.ROW_FIELDS:
                seen.add("value")
            if command[0] in (b"RPUSH", b"SADD"):
                seen.add("wrongtype")
            if command[0] == b"HSET" and command[2] == b"attempts" and command[3] in (b"99", b"100", b"1000"):
                seen.add("long")
    for step in steps:
        if isinstance(step, CallStep):
            if step.user in domains.RESTRICTIONS:
                seen.add("acl")
            if any(arg in (str(2**52).encode(), str(2**63).encode(), b"-1") for arg in step.call.rest):
                seen.add("bound")
    return seen
