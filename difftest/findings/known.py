"""The known-findings file: findings accepted while their fix is open, each with its reason, who and until when.

One reviewed TOML file (`known-findings.toml` at the repository's root, docs/known-findings.md)
serves `run`, `merge`, the fuzz service and the mutation gate alike. Each `[[known]]` entry names
one finding by its signature: `divergence:<12 hex digits>` (the signature `run`, `merge` and `fuzz`
print, difftest/findings/signature.py) or `survivor:<mutant id>` (a mutant the gate accepts as not
yet caught). A run that meets only accepted findings says so with a verdict and an exit code of
its own (6); an entry past its `expires` date accepts nothing: its finding fails like an unknown
one. Every entry is checked before anything runs: a signature of another form, an empty reason or
accepted_by, a missing or malformed expiry, an unknown field or a signature twice is one line
naming the file, the entry and the fix (exit 2).
"""

from __future__ import annotations

import argparse
import datetime
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from difftest.base.problems import SetupProblem

FILE_NAME = "known-findings.toml"  # the default: in the directory a command runs from, when it is there
DIVERGENCE, SURVIVOR = "divergence", "survivor"
_FORMS = {DIVERGENCE: re.compile(r"[0-9a-f]{12}"), SURVIVOR: re.compile(r"[a-z0-9][a-z0-9_.-]*")}
_FIELDS = ("signature", "reason", "accepted_by", "expires", "history", "note")
_REQUIRED = ("signature", "reason", "accepted_by", "expires")

# the statuses of a finding in a run's report (summary.json's `findings`, report.html's table)
NEW = "new"  # met, and not in the file: a divergence (exit 1)
KNOWN = "known"  # met, and accepted by an entry in force
EXPIRED = "expired"  # met, and its entry's expiry has passed: fails like a new one (exit 1)
STALE = "stale"  # an entry whose finding did not reproduce: fixed? remove the entry
NOT_MET = "not met"  # an entry this run did not meet (a campaign is no proof that it is fixed)


@dataclass(frozen=True)
class KnownFinding:
    kind: str  # divergence or survivor
    key: str  # the 12 hex digits, or the mutant's id
    reason: str  # why it is known: a link to its issue
    accepted_by: str
    expires: datetime.date  # the last day it is accepted
    history: Path | None = None  # its minimal history (divergences), replayed to tell whether it is fixed
    note: str = ""

    @property
    def signature(self) -> str:
        return f"{self.kind}:{self.key}"

    def in_force(self, today: datetime.date) -> bool:
        return today <= self.expires


@dataclass(frozen=True)
class KnownFindings:
    path: Path | None  # None: no file (nothing is known)
    entries: tuple[KnownFinding, ...] = ()

    def of_kind(self, kind: str) -> dict[str, KnownFinding]:
        return {entry.key: entry for entry in self.entries if entry.kind == kind}

    def accepted(self, kind: str, today: datetime.date) -> frozenset[str]:
        """The keys of `kind` accepted today (their entries in force)."""
        return frozenset(entry.key for entry in self.entries if entry.kind == kind and entry.in_force(today))

    def status(self, kind: str, key: str, today: datetime.date) -> str:
        """NEW, KNOWN or EXPIRED for a finding met today."""
        entry = self.of_kind(kind).get(key)
        if entry is None:
            return NEW
        return KNOWN if entry.in_force(today) else EXPIRED


def parse(text: str, path: Path) -> KnownFindings:
    """The file's entries; SetupProblem (one line: the file, the entry, what is wrong and the fix)."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as problem:
        raise SetupProblem(f"{path}: not TOML ({problem}): see docs/known-findings.md for the format") from None
    unknown_tables = sorted(set(document) - {"known"})
    if unknown_tables:
        raise SetupProblem(f"{path}: unknown table(s) {', '.join(unknown_tables)}: each entry is a [[known]] table "
                           "(docs/known-findings.md)")  # fmt: skip
    raw_entries = document.get("known", [])
    if not isinstance(raw_entries, list):
        raise SetupProblem(f"{path}: `known` must be an array of tables ([[known]]), not a single table")
    entries = tuple(_entry(raw, number, path) for number, raw in enumerate(raw_entries, start=1))
    seen: set[str] = set()
    for entry in entries:
        if entry.signature in seen:
            raise SetupProblem(f"{path}: {entry.signature} is listed twice: keep one entry per finding")
        seen.add(entry.signature)
    return KnownFindings(path, entries)


def _entry(raw: object, number: int, path: Path) -> KnownFinding:
    where = f"{path}: entry {number}"
    if not isinstance(raw, dict):
        raise SetupProblem(f"{where}: not a table: each entry is a [[known]] table")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise SetupProblem(f"{where}: unknown field(s) {', '.join(unknown)}: the fields are {', '.join(_FIELDS)}")
    missing = [name for name in _REQUIRED if name not in raw or raw[name] in ("", None)]
    if missing:
        raise SetupProblem(f"{where}: no {', '.join(missing)}: every entry says which finding (signature), why it "
                           "is known (reason: a link to its issue), who accepted it (accepted_by) and until when "
                           "(expires = YYYY-MM-DD)")  # fmt: skip
    signature = str(raw["signature"]).strip()
    kind, _, key = signature.partition(":")
    form = _FORMS.get(kind)
    if form is None or not form.fullmatch(key):
        raise SetupProblem(f"{where}: signature {signature!r} is neither divergence:<12 hex digits> (as run, merge "
                           "and fuzz print it) nor survivor:<mutant id> (python -m mutants --list)")  # fmt: skip
    reason, accepted_by = str(raw["reason"]).strip(), str(raw["accepted_by"]).strip()
    if not reason or not accepted_by:
        raise SetupProblem(f"{where} ({signature}): an empty reason or accepted_by: say why it is known and who "
                           "accepted it")  # fmt: skip
    expires = _date(raw["expires"], f"{where} ({signature})")
    history = None
    if raw.get("history"):
        if kind != DIVERGENCE:
            raise SetupProblem(f"{where} ({signature}): a history belongs to a divergence, not a survivor: drop it")
        history = (path.parent / str(raw["history"])).resolve()
    return KnownFinding(kind, key, reason, accepted_by, expires, history, str(raw.get("note", "")))


def _date(value: object, where: str) -> datetime.date:
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        raise SetupProblem(f"{where}: expires {value!r} is not a date: write expires = YYYY-MM-DD") from None


def load(path: Path | None) -> KnownFindings:
    """The file at `path` (None: none); a path that is not a readable file is one line."""
    if path is None:
        return KnownFindings(None)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SetupProblem(f"{path}: no such known-findings file: give an existing file, or none") from None
    except (OSError, UnicodeDecodeError) as problem:
        raise SetupProblem(f"{path}: cannot read the known-findings file ({problem})") from None
    found = parse(text, path)
    check_history(found.entries)
    return found


def default_path(directory: Path) -> Path | None:
    """`known-findings.toml` in `directory` when it is there (a command's default), else None."""
    candidate = directory / FILE_NAME
    return candidate if candidate.is_file() else None


def check_history(entries: Iterable[KnownFinding]) -> None:
    """Each entry's history file exists (a missing one is one line now, not a stale entry later)."""
    for entry in entries:
        if entry.history is not None and not entry.history.is_file():
            raise SetupProblem(f"{entry.signature}: its history {entry.history} is not a file: fix the path "
                               "(relative to the known-findings file) or drop the field")  # fmt: skip


def add_known_findings_options(parser: argparse.ArgumentParser) -> None:
    """--known-findings FILE and --no-known-findings."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--known-findings", metavar="FILE", type=Path, default=None,
                       help="findings accepted while their fix is open (default: ./known-findings.toml when it is "
                       "there; docs/known-findings.md): met, they are counted, not shrunk; a run that met only "
                       "those exits 6")  # fmt: skip
    group.add_argument("--no-known-findings", action="store_true",
                       help="accept no finding: every divergence is new (exit 1)")  # fmt: skip


def known_findings_of(args: argparse.Namespace) -> KnownFindings:
    """The file the options name (checked whole: a bad entry is one line, exit 2), or none."""
    if getattr(args, "no_known_findings", False):
        return KnownFindings(None)
    path = args.known_findings if args.known_findings is not None else default_path(Path.cwd())
    return load(path)
