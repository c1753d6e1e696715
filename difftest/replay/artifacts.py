"""A divergence saved as a replayable artifact: the history up to the failing step and its report.

The artifact directory holds `history.jsonl` (a history whose header records the verdict it must
reproduce), `report.txt` for people and `report.json` for tools. `difftest replay` reads either the
directory or the history file.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypedDict

from difftest.base.files import write_atomically
from difftest.history import format as hist
from difftest.history.format import JSON, BeginClaim, CallStep, EndClaim, History, RawWrite, Step
from difftest.judge.events import show
from difftest.replay.replayer import Divergence, ReplayResult
from difftest.replay.sides import CONDITIONS
from difftest.spec import model
from difftest.spec.calls import Call
from difftest.spec.replies import Reply
from difftest.spec.snapshot import Entry, Snapshot, diff

EXPECT_FIELD = "expect"


def _text(value: bytes) -> str:
    return shlex.quote(value.decode("utf-8", errors="backslashreplace"))


def _show(value: Reply | Entry | None) -> str:
    return repr(value)


def key_diff(left: Snapshot, right: Snapshot) -> list[dict[str, str]]:
    """The keys whose entries differ, each a row of its name and both sides' entries (`lua`: left's)."""
    rows = []
    for key, (lua, native) in diff(left, right).items():
        rows.append({"key": key.decode("utf-8", errors="backslashreplace"), "lua": _show(lua), "native": _show(native)})
    return rows


def expected_text(expected: model.Expected) -> str:
    """What the spec's model expects of one side, in words."""
    if not expected.reply_judged:
        said = "its reply not judged (the harness's step)"
    elif expected.errors:
        said = f"an error: {' or '.join(expected.errors)}"
    else:
        said = f"reply {expected.reply!r}"
    unjudged = "; its keyspace not judged (the scripts' writes before their error)"
    return said + (unjudged if expected.after is None else "")


class SpecSide(TypedDict):
    """What the spec's model expects of one side, and the keys where that side departs from it."""

    expects: str
    keys: list[dict[str, str]]


def spec_view(divergence: Divergence) -> dict[str, SpecSide] | None:
    """What the spec's model said each side does at the divergence's step, and the keys where each
    side's keyspace departs from it (None: the model did not predict the step)."""
    prediction = divergence.prediction
    if not isinstance(prediction, model.Prediction):
        return None
    view: dict[str, SpecSide] = {}
    for side, expected, after in (("lua", prediction.lua, divergence.lua_after),
                                  ("native", prediction.native, divergence.native_after)):  # fmt: skip
        keys = [] if expected.after is None else key_diff(expected.after, after)
        view[side] = {"expects": expected_text(expected), "keys": [{"key": r["key"], "spec": r["lua"],
                                                                     side: r["native"]} for r in keys]}  # fmt: skip
    return view


def by_hand(history: History) -> list[str]:
    """Command lines that replay the history by hand against the two servers (valkey-cli form)."""
    lines = [f"# both servers frozen at {history.start_ms} ms (the frozen clock); for each user:"]
    if history.db:
        lines.insert(
            0, f"# every connection on database {history.db}: SELECT {history.db} (valkey-cli -n {history.db})"
        )
    for user, rules in history.users.items():
        lines.append(f"ACL SETUSER {user} reset on >difftest +@all {' '.join(rules)}")
    begun: dict[str, Call] = {}
    for number, step in enumerate(history.steps):
        prefix = f"# step {number}: "
        if isinstance(step, CallStep | BeginClaim | EndClaim):
            call = step.call if not isinstance(step, EndClaim) else begun.pop(step.worker)
            if isinstance(step, BeginClaim):
                begun[step.worker] = call
            step_user = None if isinstance(step, EndClaim) else step.user
            as_user = f" (as {step_user})" if step_user else ""
            native = " ".join(_text(p) for p in call.command())
            script = f"EVALSHA <sha1 of executors/lua/{call.verb.lower()}.lua> " + " ".join(
                _text(p) for p in (call.numkeys, *call.rest)
            )
            kind = {BeginClaim: "begin (lua: HGET meta paused)", EndClaim: "end"}.get(type(step), "call")
            if isinstance(step, CallStep) and step.target is not None:
                kind += " on each server's read-only replica"
            lines.append(f"{prefix}{kind}{as_user}\n  native: {native}\n  lua:    {script}")
        elif isinstance(step, RawWrite):
            lines.append(f"{prefix}both: " + " ".join(_text(p) for p in step.command))
        elif isinstance(step, hist.MemoryLimit | hist.ReplicasRequired):
            switched_on, switched_off = CONDITIONS[step.condition]  # what the replay sends, word for word
            words = " ".join(word.decode() for word in (switched_on if step.on else switched_off))
            lines.append(f"{prefix}both: CONFIG SET {words}")
        else:
            lines.append(f"{prefix}{hist.step_to_json(step)}")
    return lines


def _render(divergence: Divergence, history: History, reproduce: str, build: Mapping[str, object]) -> str:
    step_json = json.dumps(hist.step_to_json(divergence.step), ensure_ascii=False)
    kind = {"propagation": "PROPAGATION DIVERGENCE", "events": "EVENTS DIVERGENCE",
            "spec": "SPEC DIVERGENCE"}.get(divergence.kind, "DIVERGENCE")  # fmt: skip
    out = [
        f"{kind} at step {divergence.index}: {step_json}",
        f"reason: {divergence.reason}",
        f"lua reply:    {divergence.lua_reply!r}",
        f"native reply: {divergence.native_reply!r}",
        "",
    ]
    if divergence.kind == "spec":
        out += ["the executors agree with each other and not with the spec's model (difftest/spec/model.py): a defect",
                "both share, or, on unmodified executors, a defect of the model or of the spec itself", ""]  # fmt: skip
    view = spec_view(divergence)
    if view is not None:
        out.append("what the spec's model says at this step:")
        for side in ("lua", "native"):
            out.append(f"  {side}: {view[side]['expects']}")
            out += [f"    {r['key']}\n      spec:   {r['spec']}\n      {side}:{' ' * (7 - len(side))}{r[side]}"
                    for r in view[side]["keys"]]  # fmt: skip
        out.append("")
    found = divergence.propagation
    if found is not None:  # a replica that does not hold its primary's keyspace (difftest/replay/replicas.py)
        out += [f"checked at the end of the segment this step closes: keys that differ between the {found.side} "
                "server and its replica (lease_epoch included):"]  # fmt: skip
        rows = key_diff(found.primary, found.replica)
        out += [f"  {r['key']}\n    primary: {r['lua']}\n    replica: {r['native']}" for r in rows] or ["  (none)"]
        out += ["", "keys that differ after the step (lua vs native, lease_epoch set aside):"]
    else:
        if divergence.kind == "events":  # the keyspace notifications each server fired at the step, in order
            out += ["events the lua server fired at this step:", *(f"  {e}" for e in show(divergence.lua_events))]
            out += ["events the native server fired at this step:",
                    *(f"  {e}" for e in show(divergence.native_events)), ""]  # fmt: skip
        out += ["keys that differ after the step (lua vs native, lease_epoch set aside):"]
    rows = key_diff(divergence.lua_after, divergence.native_after)
    out += [f"  {r['key']}\n    lua:    {r['lua']}\n    native: {r['native']}" for r in rows] or ["  (none)"]
    out += ["", "keys the native changed in this step:"]
    changed = key_diff(divergence.before, divergence.native_after)
    out += [f"  {r['key']}\n    before: {r['lua']}\n    after:  {r['native']}" for r in changed] or ["  (none)"]
    out += ["", f"native lease_epoch fields: {divergence.native_epochs!r}", "", "the history up to this step:"]
    out += ["  " + json.dumps(hist.step_to_json(s), ensure_ascii=False) for s in history.steps]
    out += ["", f"to reproduce: {reproduce}", *_built_with(build), "by hand:", *by_hand(history)]
    return "\n".join(out) + "\n"


def _built_with(build: Mapping[str, object]) -> list[str]:
    if not build:
        return []
    return [f"found on: module {build.get('module')} (sha256 {build.get('module_sha256')})",
            f"          Lua scripts {build.get('lua_scripts_dir')} (sha256 {build.get('lua_scripts_sha256')})",
            f"          Valkey {build.get('valkey') or 'unknown'}",
            "(replay uses these unless --module, --lua-scripts or --valkey say otherwise)"]  # fmt: skip


# (`build` as Any: difftest/replay/build.py's record, which its replay_command takes so)
def save_divergence(result: ReplayResult, directory: Path, build: dict[str, Any] | None = None) -> Path:
    """Write the artifact for the result's divergence; returns the directory. Never overwrites.
    `build`: what it was found on (difftest/replay/build.py's record), which its replay uses again."""
    from difftest.replay.build import BUILD_FIELD, replay_command

    divergence = result.divergence
    assert divergence is not None
    build = build or {}
    directory.mkdir(parents=True, exist_ok=False)
    prefix: tuple[Step, ...] = hist.cut_after(result.history.steps, divergence.index)
    trimmed = hist.only_users_called(replace(result.history, steps=prefix))
    expect = {"verdict": "divergence", "step": divergence.index, "reason": divergence.reason}
    if divergence.kind != "divergence":
        expect["kind"] = divergence.kind
    if result.replicas:  # replay runs as recorded: a replica beside each server (absent: none)
        expect["replicas"] = True
    hist.save(trimmed, directory / "history.jsonl", {EXPECT_FIELD: expect, **({BUILD_FIELD: build} if build else {})})
    reproduce = replay_command(directory.absolute(), build, result.replicas)
    write_atomically(directory / "report.txt", _render(divergence, trimmed, reproduce, build))
    report = {
        "step": divergence.index,
        "step_json": hist.step_to_json(divergence.step),
        "reason": divergence.reason,
        "kind": divergence.kind,
        "lua_reply": repr(divergence.lua_reply),
        "native_reply": repr(divergence.native_reply),
        "key_diff": key_diff(divergence.lua_after, divergence.native_after),
        "rules_hit": dict(result.rules_hit),
        "reproduce": reproduce,
        BUILD_FIELD: build,
        "replicas": result.replicas,
    }
    view = spec_view(divergence)
    if view is not None:
        report["model"] = view
    if divergence.kind == "events":
        report["lua_events"] = show(divergence.lua_events)
        report["native_events"] = show(divergence.native_events)
    write_atomically(directory / "report.json", json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return directory


def history_path(target: Path) -> Path:
    return target / "history.jsonl" if target.is_dir() else target


def expected_verdict(path: Path) -> dict[str, object] | None:
    """The verdict an artifact's header says it reproduces, if any."""
    first = history_path(path).read_text(encoding="utf-8").splitlines()[0]
    header = json.loads(first)
    expect = header.get(EXPECT_FIELD)
    return expect if isinstance(expect, dict) else None


# what summary.json (and so report.html) shows of a divergence inline: each text cut to this many
# characters and at most this many keys; report.txt and report.json hold them whole
BRIEF_CHARS, BRIEF_KEYS = 300, 12


def _cut(text: str) -> str:
    extra = len(text) - BRIEF_CHARS
    return text if extra <= 0 else f"{text[:BRIEF_CHARS]}… ({extra:,} more characters)"


def _cut_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{name: _cut(str(value)) for name, value in row.items()} for row in rows[:BRIEF_KEYS]]


def brief(divergence: Divergence) -> dict[str, JSON]:
    """A divergence in brief, for a campaign's summary: the step, both replies and the keys that
    differ after it with both sides' values (and, for a replica that lost its primary's writes, the
    keys that differ between them; for keyspace notifications, the events each server fired), each
    cut to a sane size."""
    keys = key_diff(divergence.lua_after, divergence.native_after)
    entry: dict[str, JSON] = {
        "step": divergence.index,
        "kind": divergence.kind,
        "call": _cut(json.dumps(hist.step_to_json(divergence.step), ensure_ascii=False)),
        "lua_reply": _cut(repr(divergence.lua_reply)),
        "native_reply": _cut(repr(divergence.native_reply)),
        "keys": _cut_rows(keys),
        "keys_differing": len(keys),
    }
    view = spec_view(divergence)
    if view is not None:  # what the spec's model said each side does, and where each departs from it
        entry["model"] = {side: {"expects": _cut(v["expects"]), "keys": _cut_rows(v["keys"])}
                          for side, v in view.items()}  # fmt: skip
    found = divergence.propagation
    if found is not None:
        rows = [{"key": r["key"], "primary": r["lua"], "replica": r["native"]}
                for r in key_diff(found.primary, found.replica)]  # fmt: skip
        entry["replica"] = {"side": found.side, "keys": _cut_rows(rows), "keys_differing": len(rows)}
    if divergence.kind == "events":  # the keyspace notifications each server fired at the step, in order
        fired = {"lua": divergence.lua_events, "native": divergence.native_events}
        entry["events"] = {side: [_cut(e) for e in show(events)[:BRIEF_KEYS]] for side, events in fired.items()}
        entry["events_fired"] = {side: len(events) for side, events in fired.items()}
    return entry
