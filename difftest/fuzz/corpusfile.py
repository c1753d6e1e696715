"""The service's corpus as a file: `difftest fuzz export` writes it, `difftest fuzz import` adds it to a store.

The nightly workflow carries the corpus from one night to the next this way (an artifact), and a
service on a machine that cannot reach the shared database can hand its corpus over. The file is
JSON Lines: a header line `{"format": "difftest-corpus 1", ...}`, then one line per history
(`history`, the history format's text; `reached`, what it reached first; `at`; `by`). Importing
checks every history against this difftest's history format: a history it refuses is counted and
named, never added, and the others still are (a corpus written by an older difftest keeps what
still loads). The digest of an entry is the one the workers give it, so an import of the same
corpus twice, or of a corpus the store already holds, adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

from difftest.base.files import write_atomically
from difftest.base.problems import SetupProblem
from difftest.fuzz.records import CorpusEntry

FORMAT = "difftest-corpus"
VERSION = 1


class CorpusStore(Protocol):
    """What the file needs of a store (difftest/fuzz/store.py's Store)."""

    def corpus(self) -> list[CorpusEntry]: ...

    def add_corpus(self, digest: str, entry: CorpusEntry) -> bool: ...


def digest_of(text: str) -> str:
    """A corpus entry's key: the same for the same history text, whoever keeps it."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def export_text(entries: list[CorpusEntry], source: str) -> str:
    """The file's text for these corpus entries (oldest first, as the store lists them)."""
    header = {"format": f"{FORMAT} {VERSION}", "histories": len(entries), "exported_at": round(time.time(), 3),
              "from": source}  # fmt: skip
    lines = [json.dumps(header)]
    for entry in entries:
        fields: dict[str, object] = dict(entry)
        lines.append(json.dumps({name: fields.get(name) for name in ("history", "reached", "at", "by")}))
    return "\n".join(lines) + "\n"


def export_corpus(store: CorpusStore, path: Path, source: str) -> int:
    """Write the store's corpus to `path` (whole or not at all); returns how many histories it holds."""
    entries = store.corpus()
    if path.is_dir():
        raise SetupProblem(f"{path} is a directory: give the corpus file's path, e.g. {path / 'corpus.jsonl'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, export_text(entries, source))
    return len(entries)


@dataclass
class Read:
    """A corpus file read and checked: the entries to add, and the lines refused with why."""

    entries: list[tuple[str, CorpusEntry]] = field(default_factory=list)  # (digest, entry)
    refused: list[str] = field(default_factory=list)  # "line N: why"


def read_corpus(text: str, origin: str) -> Read:
    """Check a corpus file's text: its header (else SetupProblem, one line), then each history."""
    from difftest.history.format import HistoryError, dumps, loads

    lines = text.splitlines()
    try:
        header = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        header = None
    stamp = f"{FORMAT} {VERSION}"
    if not isinstance(header, dict) or header.get("format") != stamp:
        found = header.get("format") if isinstance(header, dict) else None
        raise SetupProblem(f"{origin} is not a corpus file of this difftest (its first line should say format "
                           f"{stamp!r}, it says {found!r}): give a file `difftest fuzz export` wrote")  # fmt: skip
    read = Read()
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict) or not isinstance(entry.get("history"), str):
                raise ValueError("no history text")
            history = loads(entry["history"])
        except (ValueError, HistoryError) as problem:
            read.refused.append(f"line {number}: {str(problem).splitlines()[0] if str(problem) else 'unreadable'}")
            continue
        text_now = dumps(history)  # this difftest's text of it: the digest its workers would give it
        # the file's own fields, as export_text wrote them (a hand-made file's shape is its own)
        kept = cast(CorpusEntry, {"history": text_now, "reached": entry.get("reached") or {},
                                  "at": entry.get("at") or time.time(), "by": entry.get("by") or "import"})  # fmt: skip
        read.entries.append((digest_of(text_now), kept))
    return read


def import_corpus(store: CorpusStore, read: Read) -> int:
    """Add the read entries the store does not hold; returns how many were new."""
    return sum(store.add_corpus(digest, entry) for digest, entry in read.entries)


__all__ = ["FORMAT", "VERSION", "Read", "digest_of", "export_corpus", "export_text", "import_corpus", "read_corpus"]
