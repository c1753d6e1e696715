# The whole run: a null run and a canary that must pass, then every mutant built and scored, as JSON.

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from mutants.catalogue import EXECUTOR_DIRS, Mutant, load
from mutants.score import CAUGHT, MISSED, UNVIABLE, Budget, Outcome, campaign
from mutants.workspace import DEFAULT_CACHE, prepare

# exit codes of `python -m mutants`
EXIT_ALL_CAUGHT = 0  # every mutant run was caught
EXIT_SOME_MISSED = 1  # some mutant was missed, timed out, unviable or errored
EXIT_VOID = 2  # the null run found a divergence, or the canary was not caught: the report is void
EXIT_USAGE = 3  # bad arguments (unknown mutant id)


@dataclass(frozen=True)
class Baseline:
    module: Path  # the unmodified crate, built through the same cache as the mutants
    lua_scripts: Path  # the unmodified scripts, copied as the mutants' are


def _is_canary(outcome: Outcome) -> bool:
    return outcome.defect_class == "canary"


def baseline(cache: Path) -> tuple[Baseline | None, str]:
    native = prepare("native", EXECUTOR_DIRS["native"], "", cache)
    lua = prepare("lua", EXECUTOR_DIRS["lua"], "", cache)
    if native.artifact is None or lua.artifact is None:
        return None, f"the unmodified executors do not build: {native.unviable or lua.unviable}"
    return Baseline(native.artifact, lua.artifact), ""


def score_mutant(mutant: Mutant, base: Baseline, reports: Path, budget: Budget, cache: Path) -> Outcome:
    """Apply, build (native), then the campaign with the mutant on its side, the other side unmodified."""
    workspace = prepare(mutant.executor, mutant.source_dir, mutant.patch, cache)
    if workspace.artifact is None:
        outcome = Outcome(mutant.id, mutant.executor, UNVIABLE, reason=workspace.unviable)
    else:
        module = workspace.artifact if mutant.executor == "native" else base.module
        scripts = workspace.artifact if mutant.executor == "lua" else base.lua_scripts
        outcome = campaign(module, scripts, reports / mutant.id, budget)
        outcome.id, outcome.executor = mutant.id, mutant.executor
    outcome.build_s = round(workspace.build_s, 2)
    outcome.defect_class, outcome.transition, outcome.needs = mutant.defect_class, mutant.transition, list(mutant.needs)
    return outcome


def null_run(base: Baseline, reports: Path, budget: Budget) -> Outcome:
    outcome = campaign(base.module, base.lua_scripts, reports / "null-run", budget)
    outcome.id, outcome.executor = "null-run", "both"
    return outcome


def run(
    reports: Path,
    budget: Budget | None = None,
    only: Iterable[str] | None = None,
    cache: Path = DEFAULT_CACHE,
    say: Callable[[str], None] = print,
) -> tuple[int, list[Outcome]]:
    """Null run, canary, then the chosen mutants (all by default); writes reports/outcomes.json."""
    budget = budget or Budget()
    started = time.perf_counter()
    reports.mkdir(parents=True, exist_ok=True)
    catalogue = load()
    chosen = [m for m in catalogue if not m.canary]
    if only is not None:
        wanted = set(only)
        unknown = wanted - {m.id for m in catalogue}
        if unknown:
            say(f"unknown mutant ids: {', '.join(sorted(unknown))}")
            return EXIT_USAGE, []
        chosen = [m for m in chosen if m.id in wanted]
    outcomes: list[Outcome] = []

    def write(verdict: str) -> None:
        document = {
            "verdict": verdict, "budget": budget.__dict__, "wall_s": round(time.perf_counter() - started, 1),
            "summary": dict(Counter(o.status for o in outcomes if o.id != "null-run" and not _is_canary(o))),
            "outcomes": [o.as_json() for o in outcomes],
        }  # fmt: skip
        (reports / "outcomes.json").write_text(json.dumps(document, indent=2) + "\n")

    base, problem = baseline(cache)
    if base is None:
        say(f"void: {problem}")
        write("void")
        return EXIT_VOID, outcomes
    null = null_run(base, reports, budget)
    outcomes.append(null)
    say(f"null-run: {null.status} ({null.histories} histories, {null.campaign_s:.1f} s) {null.reason}")
    if null.status != MISSED:  # "missed" = no divergence in the whole budget: what a null run must be
        write("void")
        return EXIT_VOID, outcomes
    for canary in (m for m in catalogue if m.canary):
        outcome = score_mutant(canary, base, reports, budget, cache)
        outcomes.append(outcome)
        say(f"{canary.id}: {outcome.status}")
        if outcome.status != CAUGHT:
            write("void")
            return EXIT_VOID, outcomes
    for mutant in chosen:
        outcome = score_mutant(mutant, base, reports, budget, cache)
        outcomes.append(outcome)
        detail = outcome.reason[:100] if outcome.status != MISSED else ""
        say(f"{mutant.id}: {outcome.status} build {outcome.build_s:.1f} s, campaign {outcome.campaign_s:.1f} s, "
            f"{outcome.histories} histories/{outcome.steps} steps {detail}")  # fmt: skip
        write("running")
    scored = [o for o in outcomes[1:] if not _is_canary(o)]
    all_caught = all(o.status == CAUGHT for o in scored)
    write("all caught" if all_caught else "some not caught")
    counts = Counter(o.status for o in scored)
    say(f"{counts[CAUGHT]} caught, {counts[MISSED]} missed, {counts[UNVIABLE]} unviable, "
        f"{len(scored) - counts[CAUGHT] - counts[MISSED] - counts[UNVIABLE]} timeout/error of {len(scored)}; "
        f"wall {time.perf_counter() - started:.0f} s")  # fmt: skip
    return (EXIT_ALL_CAUGHT if all_caught else EXIT_SOME_MISSED), outcomes
