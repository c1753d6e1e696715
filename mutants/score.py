"""One campaign over one pair of executors (a mutant's, or the unmodified ones) and its outcome."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from difftest.base.problems import ScriptDoesNotCompile
from difftest.campaign.driver import CampaignConfig, run_campaign
from mutants.catalogue import TRANSITIONS
from mutants.records import BudgetRecord, Place, Record

CAUGHT, MISSED, TIMEOUT, UNVIABLE, ERROR = "caught", "missed", "timeout", "unviable", "error"
# a generated mutant that survived and that mutants/triage.toml calls equivalent (mutants/triage.py):
# not counted in the score (Stryker's "Ignored")
EQUIVALENT = "equivalent"


@dataclass(frozen=True)
class Budget:
    """The same for every mutant and for the null run: a fixed seed and an example budget, with a
    wall-clock limit past which an unfinished campaign is a timeout."""

    seed: int = 20261202
    examples: int = 3000  # rare kills (a corrupt key met by the one transition that reads it) come at ~1 in 500
    timeout_s: float = 600.0  # the campaign stops (between batches) past this: status "timeout"
    max_steps: int = 40
    shrink_s: float = 5.0
    restarts: bool = True  # histories may restart and crash the servers (False: neither)
    sizes: bool = True  # histories may be at production's size (False: none; the runner's own tests)
    replicas: bool = False  # a replica beside each server, compared with it after every segment
    grace_s: float = 60.0  # past timeout_s + grace_s the campaign's process is killed: status "timeout"

    def as_json(self) -> BudgetRecord:
        return cast(BudgetRecord, asdict(self))  # the same fields, by construction

    @property
    def hard_limit_s(self) -> float:
        return self.timeout_s + self.grace_s


@dataclass
class Outcome:
    """One record of the report (one per mutant, and one for the null run)."""

    id: str
    executor: str
    status: str  # caught, missed, timeout, unviable, error
    defect_class: str = ""
    transition: str = ""
    needs: list[str] = field(default_factory=list)
    build_s: float = 0.0
    campaign_s: float = 0.0  # the campaign's wall time (for caught: time to kill, shrinking included)
    histories: int = 0  # histories replayed before the kill (or in all)
    steps: int = 0  # their steps: steps to kill
    minimal_steps: int | None = None  # the shrunk killing history's length
    reason: str = ""  # the divergence, or why unviable / error
    artifact: str = ""  # the killing history's directory (in a run's report: relative to the report's directory)
    reached: dict[str, int] = field(default_factory=dict)  # contract:* labels the campaign reached
    restarts: bool = True  # whether the campaign's histories could restart and crash the servers
    caught_by: str = ""  # caught: the voters that found it, of model, accounting, invariants, pair (caught_by)
    # the labels the campaign reached that name a transition (reply:CLAIM:claimed, condition:resp3:claim),
    # counted; the runner keeps those of the mutant's own transitions (its exposure, mutants/breakdown.py)
    exposure: dict[str, int] = field(default_factory=dict)
    # set by the runner (mutants/breakdown.py, mutants/incremental.py), not by the campaign:
    locations: list[Place] = field(default_factory=list)  # each change block: file, start, end
    diff: str = ""  # a survivor's patch (its patches, for a shared mutant), shown inline by the report
    digests: dict[str, str] = field(default_factory=dict)  # what the outcome depends on: patched, instrument, budget
    reused_from: str = ""  # --incremental: the report this outcome was scored in (relative), when reused
    why_scored: str = ""  # --incremental: why it was scored again (new, the patched file changed, ...)
    triage: str = ""  # a generated mutant's reviewed triage, "<verdict>: <reason>" (mutants/triage.py)

    def as_json(self) -> Record:
        return cast(Record, asdict(self))  # Record is this class's fields, by construction

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Outcome:
        """The record back (fields this version does not know are dropped)."""
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in record.items() if k in known})


def label_transitions(label: str) -> set[str]:
    """The transitions a coverage label names (reply:CLAIM:claimed, condition:resp3:claim: CLAIM)."""
    parts = {part.upper() for part in label.split(":")}
    return {verb for verb in TRANSITIONS if verb in parts}


def names_a_transition(label: str) -> bool:
    return bool(label_transitions(label))


def caught_by(reason: str) -> str:
    """Which voters a divergence's reason names (difftest/judge/verdicts.py, `voters_of`): the spec's model,
    the queue's accounting, the healthy-queue invariants, the comparison of the pair. A shared defect
    must be caught by one of the first three: both executors agree on it."""
    from difftest.judge.verdicts import voters_of

    return ", ".join(voters_of(reason))


def _explain(exc: BaseException) -> str:
    """The error, and first what lies under it (a Hypothesis FlakyFailure holds the exceptions it saw,
    with where they were raised): the part that says what went wrong, ahead of a long history."""
    import traceback

    causes = [
        f"{type(sub).__name__}: {str(sub)[:400]} at "
        + " <- ".join(
            f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}" for f in traceback.extract_tb(sub.__traceback__)[::-1][:6]
        )
        for sub in getattr(exc, "exceptions", ())
    ]
    return (f"under it: {' | '.join(causes)}; " if causes else "") + f"{type(exc).__name__}: {exc}"


def campaign(module: Path, lua_scripts: Path | None, reports: Path, budget: Budget) -> Outcome:
    """Runs the campaign (one worker, in this process, unpinned: the caller pins it) and classifies
    it; the Outcome's id and executor are blank."""
    config = CampaignConfig(
        seed=budget.seed, module=module, reports=reports, examples=budget.examples, seconds=budget.timeout_s,
        workers=1, lua_scripts=lua_scripts, max_steps=budget.max_steps, database=None, pin=False,
        shrink_seconds=budget.shrink_s, restarts=budget.restarts, replicas=budget.replicas, sizes=budget.sizes,
        # without the class corpus: a mutant's histories to a kill measure what the generator finds
        # on its own (the corpus would catch each class's mutant by construction, in its first batch)
        corpus=False,
    )  # fmt: skip
    started = time.perf_counter()
    try:
        result = run_campaign(config)
    except ScriptDoesNotCompile as refused:  # a Lua mutant the server's compiler refuses: unviable, as a native
        # patch that does not build (its every call would be a NOSCRIPT reply, a catch for nothing)
        return Outcome("", "", UNVIABLE, campaign_s=time.perf_counter() - started, reason=str(refused),
                       restarts=budget.restarts)  # fmt: skip
    except Exception as exc:  # a server that died under the mutant, a harness failure: reported as such
        reason = _explain(exc)
        return Outcome("", "", ERROR, campaign_s=time.perf_counter() - started, reason=reason, restarts=budget.restarts)
    reached = {k: v for k, v in sorted(result.labels.items()) if k.startswith("contract:")}
    exposure = {k: v for k, v in sorted(result.labels.items()) if v and names_a_transition(k)}
    outcome = Outcome("", "", MISSED, campaign_s=result.elapsed_s, histories=result.histories,
                      steps=result.steps, reached=reached, restarts=budget.restarts, exposure=exposure)  # fmt: skip
    if result.interrupted:
        outcome.status, outcome.reason = ERROR, "interrupted"
    elif result.failures:
        failure = result.failures[0]
        outcome.status = CAUGHT
        outcome.minimal_steps = failure.steps
        outcome.reason = failure.reason
        outcome.caught_by = caught_by(failure.reason)
        outcome.artifact = failure.artifact
    elif result.histories < budget.examples:
        outcome.status = TIMEOUT
        outcome.reason = f"{result.histories} of {budget.examples} histories in {budget.timeout_s:.0f} s"
    return outcome
