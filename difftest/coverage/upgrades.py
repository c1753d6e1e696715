"""Upgrade coverage: what a replay did across the scripts-to-module upgrade (pure, over its records).

A step marked `executor: "lua"` runs through the Lua scripts on the native server too: an upgrade's
Lua-era prefix, or a worker of a mixed fleet that still calls the scripts (docs/contract-decisions.md,
"Upgrades and the mixed fleet"). The labels say which of the upgrade's situations the module met:

- `upgrade:lua-prefix`: a history whose first transitions ran through the scripts on both
  servers, then the module's;
- `upgrade:lua-row-in:<set>`: a module transition met a row the scripts wrote on the native server
  that carries no `lease_epoch`, while its id was in that set (pending, active, delayed, dead, done);
- `upgrade:mixed-fleet`: a scripts call on the native server after a module call;
- `upgrade:d7-lua-lease`: a module SWEEP exempted an expired lease the scripts took (D7, "taken by
  the Lua scripts before the upgrade").
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from difftest.history.resolve import Guarded, Resolved
from difftest.judge.contract import pending_head
from difftest.spec.commands import SETS, Layout, Rows, Verb, parse_key
from difftest.spec.model import select, zset
from difftest.spec.replies import NotSent, Reply
from difftest.spec.snapshot import Epochs, Snapshot, diff

if TYPE_CHECKING:
    from difftest.replay.replayer import ReplayResult

UPGRADE_LABELS: tuple[str, ...] = (
    "upgrade:lua-prefix",
    *(f"upgrade:lua-row-in:{name}" for name in SETS),
    "upgrade:mixed-fleet",
    "upgrade:d7-lua-lease",
)


def _met_rows(resolved: Resolved, guarded: Guarded, before: Snapshot, now_ms: int, reply: Reply) -> list[bytes]:
    """The rows a module transition read: the id argument's, the head CLAIM popped, the due or
    expired members within the call's limit."""
    transition = resolved.transition
    assert transition is not None
    layout = guarded.layout
    match transition.rows:
        case Rows.JOB_ARG:
            return [layout.row(guarded.job)]
        case Rows.PENDING_HEAD:
            head = pending_head(before, layout)
            claimed = isinstance(reply, list) and bool(reply)
            return [layout.row(head)] if head is not None and claimed else []
        case Rows.DUE_DELAYED | Rows.EXPIRED_ACTIVE:
            source = layout.delayed if transition.rows is Rows.DUE_DELAYED else layout.active
            limit = guarded.args[-1]
            assert isinstance(limit, int)
            return [layout.row(m) for m, _ in select(zset(before, source) or {}, now_ms, limit)]
    return []


def _home(before: Snapshot, layout: Layout, row: bytes) -> str | None:
    name = parse_key(row)
    job = name.job if name is not None else None
    return next((s for s in SETS if job is not None and job in (zset(before, layout.key(s)) or {})), None)


def _leased_row(resolved: Resolved, guarded: Guarded, reply: Reply) -> bytes | None:
    """The row whose lease a successful CLAIM or EXTEND took or renewed."""
    verb = resolved.call.verb if resolved.call is not None else None
    if verb == Verb.CLAIM and isinstance(reply, list) and reply and isinstance(reply[0], bytes):
        return guarded.layout.row(reply[0])
    if verb == Verb.EXTEND and reply == 1:
        return guarded.layout.row(guarded.job)
    return None


def upgrade_labels(result: ReplayResult) -> Counter[str]:
    """The upgrade labels this replay reached (the native side's keyspace and epochs before each step)."""
    reached: Counter[str] = Counter()
    before: Snapshot = {}
    epochs: Epochs = {}
    scripts_rows: set[bytes] = set()  # rows the scripts wrote on the native server
    scripts_leases: set[bytes] = set()  # rows whose lease the scripts took or renewed last
    scripts_called = module_called = False
    for record, observation in zip(result.records, result.observations, strict=False):
        resolved, reply = record.resolved, record.native_reply
        guarded = resolved.guarded
        sent = resolved.sends_transition and guarded is not None and not isinstance(reply, NotSent)
        if sent and guarded is not None and resolved.via_scripts:
            if module_called:
                reached["upgrade:mixed-fleet"] += 1
            scripts_called = True
            after = observation.native_after
            scripts_rows.update(key for key in diff(before, after) if key.startswith(guarded.layout.row_prefix))
            leased = _leased_row(resolved, guarded, reply)
            if leased is not None:
                scripts_leases.add(leased)
        elif sent and guarded is not None:
            if scripts_called and not module_called:
                reached["upgrade:lua-prefix"] += 1
            module_called = True
            layout = guarded.layout
            for row in _met_rows(resolved, guarded, before, observation.now_ms, reply):
                entry = before.get(row)
                if row in scripts_rows and entry is not None and entry.kind == "hash" and row not in epochs:
                    home = _home(before, layout, row)
                    if home is not None:
                        reached[f"upgrade:lua-row-in:{home}"] += 1
            if resolved.call is not None and resolved.call.verb == Verb.SWEEP and isinstance(reply, list):
                exempt = reply[-1] if len(reply) == 4 else 0
                swept = _met_rows(resolved, guarded, before, observation.now_ms, reply)
                if (
                    isinstance(exempt, int)
                    and exempt > 0
                    and any(row in scripts_leases and epochs.get(row) != observation.run_id for row in swept)
                ):
                    reached["upgrade:d7-lua-lease"] += 1
            leased = _leased_row(resolved, guarded, reply)
            if leased is not None:
                scripts_leases.discard(leased)  # the module stamped it
        before, epochs = observation.native_after, observation.native_epochs
    return reached


__all__ = ["UPGRADE_LABELS", "upgrade_labels"]
