"""The known-findings file in `difftest run`: its stale entries found, its findings printed."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from difftest.findings.known import DIVERGENCE, EXPIRED, KNOWN, STALE, KnownFindings


def stale_entries(args: argparse.Namespace, known: KnownFindings, meetings: Mapping[str, Any]) -> list[str]:
    """The file's divergence entries this run did not meet whose history, replayed on the build under
    test, no longer ends in their finding (fixed? remove the entry)."""
    from difftest.cli.arguments import backend_of
    from difftest.findings.signature import signature
    from difftest.history.format import loads
    from difftest.replay.replayer import Replayer

    candidates = [e for e in known.entries if e.kind == DIVERGENCE and e.history is not None and e.key not in meetings]
    if not candidates:
        return []
    stale = []
    with Replayer(args.module, lua_scripts=args.lua_scripts, backend=backend_of(args)) as replayer:
        for entry in candidates:
            assert entry.history is not None
            result = replayer.replay(loads(entry.history.read_text()))
            if result.divergence is None or signature(result) != entry.key:
                stale.append(entry.key)
    return stale


def print_findings(document: Mapping[str, Any], known: KnownFindings) -> None:
    """The terminal's lines on findings that are not new divergences (those are printed with their
    artifacts): each known one met, each expired, each stale entry."""
    for entry in document.get("findings", []):
        status, name = entry["status"], entry["signature"]
        if status == KNOWN:
            print(f"\nKNOWN FINDING divergence:{name}, met {entry['count']:,} time(s): accepted by "
                  f"{entry['accepted_by']} until {entry['expires']} ({entry['known_reason']})")  # fmt: skip
        elif status == EXPIRED:
            print(f"\nEXPIRED: divergence:{name} was accepted until {entry['expires']} ({entry['known_reason']}): "
                  f"it fails like a new finding; fix it, or renew the entry in {known.path}")  # fmt: skip
        elif status == STALE:
            print(f"\nSTALE: divergence:{name} no longer reproduces from its history on this build: fixed? "
                  f"remove its entry from {known.path}")  # fmt: skip
