"""A divergence's signature: what tells one finding from another (its step, rule and differing keys).

Two minimal histories of one defect end at the same kind of step (the operation and verb), under
the same contract rule (or none), with the same keys differing once queue names and job ids are set
aside; the signature is a short hash of those, plus the kind of the divergence and, when no key
differs (an invariant or the accounting caught it on both sides), the reason with its values blanked.
Where the spec's model predicted the step, the keys are those where a side departs from it: a defect
of the scripts is one finding whether the pair met it (the scripts against the module) or both
servers ran the scripts (an upgrade's Lua-era worker: a shared defect, kind `spec`, counted as a
divergence here).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from difftest.history.format import step_to_json
from difftest.replay.replayer import ReplayResult
from difftest.spec import model
from difftest.spec.commands import parse_key
from difftest.spec.snapshot import diff

_VALUES = re.compile(r"b'[^']*'|b\"[^\"]*\"|'[^']*'|\"[^\"]*\"|\d+")


def key_shape(key: bytes) -> str:
    """A key with its queue and job id set aside: `emq:{*}:job:*`, `emq:{*}:metrics:completed`."""
    parsed = parse_key(key)
    if parsed is None:
        return "(not a queue's key)"
    rest = parsed.rest.decode("utf-8", errors="backslashreplace")
    return "emq:{*}:" + ("job:*" if parsed.job is not None else rest)


def parts(result: ReplayResult) -> dict[str, Any]:
    """The signature's parts for a replay that diverged (plain data: kept with the finding)."""
    divergence = result.divergence
    assert divergence is not None
    shape = step_to_json(divergence.step)
    rule = None
    if divergence.index < len(result.records):
        rule = result.records[divergence.index].verdict.rule
    keys = sorted({key_shape(key) for key in _departing(divergence)})
    kind = "divergence" if divergence.kind == "spec" else divergence.kind
    found: dict[str, Any] = {"kind": kind, "op": shape.get("op"), "verb": shape.get("verb", ""),
                             "rule": rule, "keys": keys}  # fmt: skip
    if not keys:
        found["reason"] = _VALUES.sub("_", divergence.reason)[:200]
    return found


def _departing(divergence: Any) -> list[bytes]:
    """The keys where a side departs from the spec's model, where it predicted both sides' keyspaces
    and one departs; else the keys where the two sides differ."""
    prediction = divergence.prediction
    if isinstance(prediction, model.Prediction):
        sides = ((prediction.lua, divergence.lua_after), (prediction.native, divergence.native_after))
        found = {key for expected, after in sides if expected.after is not None for key in diff(expected.after, after)}
        if found:
            return sorted(found)
    return list(diff(divergence.lua_after, divergence.native_after))


def signature(result: ReplayResult) -> str:
    """Twelve hex digits naming the finding (the same defect met twice gives the same ones)."""
    text = json.dumps(parts(result), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def describe(found: dict[str, Any]) -> str:
    """The parts in one line, for people: `COMPLETE (call), rule none, keys emq:{*}:metrics:completed`."""
    step = f"{found.get('verb') or found.get('op')} ({found.get('op')})"
    keys = ", ".join(found.get("keys", [])) or f"no key; {found.get('reason', '')}"
    return f"{step}, rule {found.get('rule') or 'none'}, {found.get('kind')}: {keys}"
