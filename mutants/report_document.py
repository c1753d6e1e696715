"""The outcomes document's names and arithmetic: verdicts, thresholds, score, gate, subset and budget."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from mutants import breakdown
from mutants.records import BudgetRecord, Document, Record, Score, Subset, ThresholdsRecord
from mutants.score import CAUGHT, EQUIVALENT, MISSED, UNVIABLE

OUTCOMES = "outcomes.json"
STRYKER = "mutation-report.json"
JUNIT = "junit.xml"
HTML = "report.html"
NULL_RUN = "null-run"
# the null run's status when it found no divergence on the unmodified pair (its pass); reports before
# this name called it "missed", as a mutant's; they are read as "clean"
CLEAN = "clean"

# verdicts of a report
ALL_CAUGHT, SOME_NOT_CAUGHT, VOID = "all caught", "some not caught", "void"
RUNNING, INCOMPLETE = "running", "incomplete"  # a run under way; merged shards that miss some
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM stopped the run


@dataclass(frozen=True)
class Thresholds:
    """Stryker's three: a score at or above `high` is drawn good, below `low` bad, between them a
    warning; below `breaking` (when set) the run fails (exit 1). Percentages of caught / viable."""

    high: float = 80.0
    low: float = 60.0
    breaking: float | None = None  # None: no score gate, every mutant must be caught

    def as_json(self) -> ThresholdsRecord:
        return {"high": self.high, "low": self.low, "break": self.breaking}

    @classmethod
    def from_json(cls, recorded: ThresholdsRecord | None) -> Thresholds:
        if not recorded:
            return cls()
        breaking = recorded.get("break")
        return cls(float(recorded.get("high", cls.high)), float(recorded.get("low", cls.low)),
                   None if breaking is None else float(breaking))  # fmt: skip


DEFAULT_THRESHOLDS = Thresholds()


def accepted(record: Record) -> bool:
    """A mutant record that does not fail the gate: caught, or triaged equivalent or unviable (a
    generated mutant, mutants/triage.py)."""
    return record["status"] == CAUGHT or (bool(record.get("triage")) and record["status"] in (EQUIVALENT, UNVIABLE))


def is_canary(record: Record) -> bool:
    return record.get("defect_class") == "canary"


def is_clean(record: Record) -> bool:
    """The null run found no divergence (its pass; "missed" in reports that predate CLEAN)."""
    return record["id"] == NULL_RUN and record["status"] in (CLEAN, MISSED)


def upgraded(document: Document) -> Document:
    """The document with an older report's names read as today's: the clean null run's "missed" as CLEAN."""
    for record in document.get("outcomes", []):
        if is_clean(record):
            record["status"] = CLEAN
    return document


def scored(document: Document) -> list[Record]:
    """The mutant records that count: not the null run, not the canary."""
    return [r for r in document["outcomes"] if r["id"] != NULL_RUN and not is_canary(r)]


def score(records: list[Record]) -> Score:
    """caught / viable (viable: the patch applied and built; a timeout or error is viable, not caught;
    a generated mutant triaged equivalent is not viable: mutants/triage.py)."""
    caught = sum(r["status"] == CAUGHT for r in records)
    viable = sum(r["status"] not in (UNVIABLE, EQUIVALENT) for r in records)
    return {"caught": caught, "viable": viable, "percent": round(100.0 * caught / viable, 1) if viable else None}


def passes(document: Document) -> bool:
    """The gate: a finished, non-void report whose every mutant was caught or, with a break threshold,
    whose score is at or above it (whatever survived). Exit 0 when it passes, else 1 (or 4 when void)."""
    verdict = str(document.get("verdict"))
    if verdict not in (ALL_CAUGHT, SOME_NOT_CAUGHT):
        return False
    breaking = Thresholds.from_json(document.get("thresholds")).breaking
    if breaking is None:
        return verdict == ALL_CAUGHT
    percent = (document.get("score") or score(scored(document)))["percent"]
    return percent is not None and float(percent) >= breaking


def summarise(document: Document) -> Document:
    """Fills the document's summary (counts by status), score, scores per transition, file and class,
    and gate (`passed`) from its records."""
    records = scored(document)
    document["summary"] = dict(Counter(r["status"] for r in records))
    document["score"] = score(records)
    document["scores"] = breakdown.scores(records, score)
    document["passed"] = passes(document)
    return document


def subset(universe: list[str], chosen: list[str], only: list[str] | None,
           shard: tuple[int, int] | None, in_diff: str | None = None) -> Subset | None:  # fmt: skip
    """What a run that scores part of the catalogue records (None for the whole of it): how many of
    how many, chosen how (--only, --shard, --in-diff REF), and the ids left out (in catalogue order)."""
    ran = set(chosen)
    left_out = [i for i in universe if i not in ran]
    if not left_out:
        return None
    return {"ran": len(chosen), "of": len(universe), "only": sorted(only) if only else None,
            "shard": None if shard is None else f"{shard[0]}/{shard[1]}", "in_diff": in_diff,
            "left_out": left_out}  # fmt: skip


def subset_text(part: Subset) -> str:
    """ "subset: 3 of 61 mutants (--only a b c)": one line for the console and the page."""
    how = []
    only = list(part.get("only") or [])
    if only:
        more = f" and {len(only) - 6} more" if len(only) > 6 else ""
        how.append("--only " + " ".join(only[:6]) + more)
    if part.get("shard"):
        how.append(f"--shard {part['shard']}")
    if part.get("in_diff"):
        how.append(f"--in-diff {part['in_diff']}: the mutants on lines changed against it")
    if not how:
        how.append("shards missing from the merge")
    return f"subset: {part['ran']} of {part['of']} mutants ({', '.join(how)})"


def budget_text(budget: BudgetRecord) -> str:
    """The budget in words (the page's line; outcomes.json keeps the fields)."""
    known = {"seed", "examples", "max_steps", "timeout_s", "grace_s", "shrink_s", "restarts", "replicas", "sizes"}
    parts = []
    if "seed" in budget:
        parts.append(f"seed {budget['seed']}")
    if "examples" in budget:
        steps = f", at most {budget['max_steps']} steps each" if "max_steps" in budget else ""
        parts.append(f"{int(budget['examples']):,} histories per campaign{steps}")
    if "timeout_s" in budget:
        killed = f" (killed at {budget['timeout_s'] + budget['grace_s']:g} s)" if "grace_s" in budget else ""
        parts.append(f"{budget['timeout_s']:g} s per campaign{killed}")
    if "shrink_s" in budget:
        parts.append(f"shrinking up to {budget['shrink_s']:g} s")
    if "restarts" in budget:
        parts.append(f"restarts and crashes {'on' if budget['restarts'] else 'off'}")
    if "replicas" in budget:
        parts.append(f"replicas {'on' if budget['replicas'] else 'off'}")
    if budget.get("sizes") is False:  # on is the default, and what a budget from before it was recorded did
        parts.append("production's size off")
    parts += [f"{k.replace('_', ' ')} {v}" for k, v in budget.items() if k not in known]
    return "; ".join(parts)
