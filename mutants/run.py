"""The whole run: a null run and a canary that must pass, then every mutant built and scored, each
campaign in its own process, several at once; the report in four forms (see report.py)."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from difftest.base.exits import EXIT_DIVERGENCE, EXIT_OK, EXIT_SETUP, EXIT_VOID
from difftest.base.problems import SetupProblem
from mutants import breakdown, incremental, report, trend, triage
from mutants.catalogue import EXECUTOR_DIRS, Mutant, load
from mutants.child import Task, default_jobs, run_tasks
from mutants.generated import GeneratedMutant
from mutants.generated import load_saved as load_generated
from mutants.generated import save as save_generated
from mutants.records import Document, Record, Subset
from mutants.report import CLEAN, DEFAULT_THRESHOLDS, NULL_RUN, Thresholds
from mutants.score import CAUGHT, EQUIVALENT, ERROR, MISSED, UNVIABLE, Budget, Outcome
from mutants.triage import Triage
from mutants.workspace import DEFAULT_CACHE, prepare

# exit codes of `python -m mutants` (and of `python -m mutants merge`): difftest's own (difftest/base/exits.py,
# MEANINGS' mutants column), read for mutants; Ctrl-C (130), SIGTERM (143), bad input (2) and the
# runner's own failures (70, 74) are __main__'s
EXIT_ALL_CAUGHT = EXIT_OK  # every mutant caught (with a break threshold: the score at or above it)
EXIT_SOME_MISSED = EXIT_DIVERGENCE  # a mutant survived (or the score is below the break threshold)
EXIT_USAGE = EXIT_SETUP  # bad input: merge's shards that do not fit together


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


def select_shard(mutants: list[Mutant], index: int, count: int) -> list[Mutant]:
    """Shard `index` of `count` (1-based): the mutants whose place in id order is index-1 modulo
    count (round-robin over the sorted ids), in catalogue order. The same on every machine."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: the index must be between 1 and the count")
    ids = sorted(m.id for m in mutants)
    mine = set(ids[index - 1 :: count])
    return [m for m in mutants if m.id in mine]


def choose(
    catalogue: list[Mutant], only: Iterable[str] | None, shard: tuple[int, int] | None, in_diff: str | None = None
) -> tuple[list[Mutant], Subset | None]:
    """The mutants a run scores (not the canary: it always runs), and what it records when they are a
    subset of the catalogue (report.subset): `only` these ids, this `shard`, those on lines changed
    against the git ref `in_diff`. Bad input (an unknown id, a bad shard, a bad ref) raises SetupProblem."""
    chosen = [m for m in catalogue if not m.canary]
    universe = [m.id for m in chosen]
    wanted = None if only is None else sorted(set(only))
    if wanted is not None:
        unknown = set(wanted) - {m.id for m in catalogue}
        if unknown:
            raise SetupProblem(f"unknown mutant ids: {', '.join(sorted(unknown))} (the ids are those of "
                               "mutants/catalogue/catalogue.toml; with --generated, those that "
                               "python -m mutants --generated --list prints)")  # fmt: skip
        chosen = [m for m in chosen if m.id in wanted]
    if shard is not None:
        try:
            chosen = select_shard(chosen, *shard)
        except ValueError as exc:
            raise SetupProblem(f"--shard {shard[0]}/{shard[1]}: {exc}") from None
    if in_diff is not None:
        chosen = incremental.select_in_diff(chosen, in_diff)
    return chosen, report.subset(universe, [m.id for m in chosen], wanted, shard, in_diff)


def _preparer(
    mutant: Mutant | None,
    base: Baseline,
    reports: Path,
    budget: Budget,
    cache: Path,
    built: dict[str, float],
    reused: Outcome | None = None,
) -> Callable[[], Task | Outcome]:
    """What builds one task (in the builder thread): the mutant applied and built (its build time
    in `built`), or the null run; an Outcome when there is nothing to run (unviable, or reused)."""

    def make() -> Task | Outcome:
        if reused is not None:
            return reused
        if mutant is None:
            return Task(NULL_RUN, "both", base.module, base.lua_scripts, reports / NULL_RUN, budget)
        artifacts: dict[str, Path] = {"native": base.module, "lua": base.lua_scripts}
        build_s = 0.0
        # a shared mutant ("both") patches each executor with its own patch: applied and built
        # together, unviable when either does not apply or build
        for executor in mutant.executors:
            try:
                workspace = prepare(executor, EXECUTOR_DIRS[executor], mutant.patch_for(executor), cache)
            except Exception as exc:  # a broken cache, a full disk: this mutant errs, the run goes on
                return Outcome(mutant.id, mutant.executor, ERROR, reason=f"preparing: {type(exc).__name__}: {exc}")
            if workspace.artifact is None:
                return Outcome(mutant.id, mutant.executor, UNVIABLE, reason=f"{executor}: {workspace.unviable}")
            artifacts[executor] = workspace.artifact
            build_s += workspace.build_s
        built[mutant.id] = round(build_s, 2)
        return Task(mutant.id, mutant.executor, artifacts["native"], artifacts["lua"], reports / mutant.id, budget)

    return make


def _reused(directory: Path, record: Record) -> Outcome:
    """An earlier record kept as this run's outcome: its artifact made absolute (the runner makes it
    relative to the new report), `reused_from` the report it was scored in (absolute here too)."""
    outcome = Outcome.from_json(record)
    outcome.artifact = str((directory / record["artifact"]).resolve()) if record.get("artifact") else ""
    outcome.reused_from = str((directory / str(record.get("reused_from") or ".")).resolve())
    outcome.why_scored = ""
    return outcome


@dataclass(frozen=True)
class RunConfig:
    """What a run scores and how: the report's directory, the budget, which mutants (`only` these ids,
    this `shard` k of n, those on lines changed against the git ref `in_diff`, or the `generated` set
    read through its reviewed triage `triaged`), `jobs` campaigns at once (None: one per core), the
    thresholds, the score `history` (a JSON-lines file; None: not recorded), `reuse` (--incremental)
    and `annotate` (the survivors as GitHub workflow commands)."""

    reports: Path
    budget: Budget = field(default_factory=Budget)
    only: Iterable[str] | None = None
    cache: Path = DEFAULT_CACHE
    jobs: int | None = None
    shard: tuple[int, int] | None = None
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    history: Path | None = None
    reuse: bool = False
    in_diff: str | None = None
    annotate: bool = False
    generated: list[GeneratedMutant] | None = None
    triaged: dict[str, Triage] | None = None


def run(config: RunConfig, say: Callable[[str], None] = print) -> tuple[int, list[Outcome]]:
    """Null run, canary, then the chosen mutants (all by default, or shard k of n of them, or those on
    lines changed against the git ref `in_diff`), each campaign in its own process, `jobs` at a time
    (default: one per core); writes the report (outcomes.json, mutation-report.json, junit.xml,
    report.html) under `reports`, and appends the run's scores to the score `history`, comparing them
    with the last run of the same scope and budget there. `reuse` (--incremental): a mutant whose
    digests (patched files, instrument, budget) equal those of an earlier conclusive outcome (in
    `reports`' own outcomes.json or a report the history names) keeps it, marked reused. Bad input (an
    unknown id, a bad shard, a bad ref) raises SetupProblem before anything is written. With
    `generated`, those mutants are scored instead of the catalogue's (its canary still runs), each
    record read through its reviewed triage; the set is saved beside the report (generated.json)."""
    started = time.perf_counter()
    catalogue = load()
    if config.generated is not None:
        catalogue = [*(m for m in catalogue if m.canary), *config.generated]
    chosen, part = choose(catalogue, config.only, config.shard, config.in_diff)
    if config.in_diff is not None and not chosen:
        say(f"--in-diff {config.in_diff}: no mutant lies on a line changed against it; nothing scored, "
            "no report written")  # fmt: skip
        return EXIT_ALL_CAUGHT, []
    if part is not None:  # a subset's score is not the catalogue's: said here, in the report and the last line
        left = part["left_out"]
        say(f"{report.subset_text(part)}; left out: {', '.join(left[:8])}"
            f"{f' and {len(left) - 8} more (all in outcomes.json)' if len(left) > 8 else ''}")  # fmt: skip
    state = _Run(config, say, started, catalogue, chosen, part)
    state.plan_reuse()
    config.reports.mkdir(parents=True, exist_ok=True)
    if config.generated is not None:
        save_generated(config.reports, config.generated)
    return state.score()


class _Run:
    """One run under way: its mutants in order (None: the null run), the outcomes so far, what voids it."""

    def __init__(self, config: RunConfig, say: Callable[[str], None], started: float, catalogue: list[Mutant],
                 chosen: list[Mutant], part: Subset | None) -> None:  # fmt: skip
        self.config, self.say, self.started = config, say, started
        self.catalogue, self.chosen, self.part = catalogue, chosen, part
        self.budget, self.reports = config.budget, config.reports
        self.jobs = config.jobs or default_jobs()
        digests = incremental.Digests(self.budget)
        self.recorded = {m.id: digests.of(m) for m in chosen}
        self.kept: dict[str, Outcome] = {}  # --incremental: the outcomes reused, by id
        self.why: dict[str, str] = {}  # --incremental: why each other mutant is scored again
        self.order: list[Mutant | None] = [None, *(m for m in catalogue if m.canary), *chosen]
        self.results: dict[int, Outcome] = {}
        self.built: dict[str, float] = {}
        self.void: list[str] = []

    def plan_reuse(self) -> None:
        """--incremental: each chosen mutant's earlier conclusive outcome kept when its digests match."""
        if not self.config.reuse:
            return
        earlier = incremental.Earlier.load(self.reports, self.config.history)
        for mutant in self.chosen:
            found = earlier.reusable(mutant.id, self.recorded[mutant.id])
            if found is not None:
                self.kept[mutant.id] = _reused(*found)
            else:
                self.why[mutant.id] = earlier.why(mutant.id, self.recorded[mutant.id])
        self.say(f"incremental: {len(self.kept)} of {len(self.chosen)} mutants unchanged since a recorded outcome "
                 f"(reused), {len(self.chosen) - len(self.kept)} to score")  # fmt: skip

    def document(self, verdict: str) -> Document:
        """The outcomes document as it stands, with this verdict."""
        config = self.config
        return {
            "verdict": verdict, "budget": self.budget.as_json(),
            "wall_s": round(time.perf_counter() - self.started, 1), "jobs": self.jobs,
            "shard": None if config.shard is None else {"index": config.shard[0], "count": config.shard[1]},
            "chosen": [m.id for m in self.chosen], "subset": self.part, "thresholds": config.thresholds.as_json(),
            "incremental": config.reuse, "catalogue": "catalogue" if config.generated is None else "generated",
            "outcomes": [self.results[i].as_json() for i in sorted(self.results)],
        }  # fmt: skip

    def score(self) -> tuple[int, list[Outcome]]:
        """The baseline built, every task run (a report written after each), then the verdict."""
        base, problem = baseline(self.config.cache)
        if base is None:
            self.say(f"void: {problem}")
            report.write_all(self.reports, self.document(report.VOID), self.catalogue)
            return EXIT_VOID, []
        preparers = [_preparer(m, base, self.reports, self.budget, self.config.cache, self.built,
                               None if m is None else self.kept.get(m.id)) for m in self.order]  # fmt: skip
        try:
            run_tasks(preparers, self.jobs, self.on_done)
        except KeyboardInterrupt:  # the children are stopped by now; what was scored is kept
            report.write_all(self.reports, self.document(report.INTERRUPTED), self.catalogue)
            raise
        if self.void:
            return self.voided()
        return self.finish()

    def on_done(self, index: int, outcome: Outcome) -> bool:
        """One task's outcome recorded (and the report rewritten); False once the run is void."""
        mutant = self.order[index]
        outcome.restarts = self.budget.restarts
        if outcome.artifact:  # relative to the report's directory, so the report can move
            outcome.artifact = os.path.relpath(Path(outcome.artifact).resolve(), self.reports.resolve())
        if mutant is None:
            self._null_run_done(outcome)
        else:
            self._mutant_done(mutant, outcome)
        self.results[index] = outcome
        if self.void:
            return False
        report.write_outcomes(self.reports, self.document(report.RUNNING))
        return True

    def _null_run_done(self, outcome: Outcome) -> None:
        outcome.id, outcome.executor = NULL_RUN, "both"
        if outcome.status == MISSED:  # no divergence in the whole budget: what a null run must be
            outcome.status = CLEAN
        self.say(f"null-run: {outcome.status} ({outcome.histories} histories, {outcome.campaign_s:.1f} s) "
                 f"{outcome.reason}")  # fmt: skip
        if outcome.status != CLEAN:
            self.void.append(f"the null run was {outcome.status} {outcome.reason[:200]}")

    def _mutant_done(self, mutant: Mutant, outcome: Outcome) -> None:
        _describe(outcome, mutant, self.recorded.get(mutant.id, {}), self.why.get(mutant.id, ""))
        if self.config.triaged:
            record = triage.apply(outcome.as_json(), self.config.triaged)
            outcome.status, outcome.triage = record["status"], record.get("triage", "")
        if outcome.reused_from:
            outcome.reused_from = os.path.relpath(outcome.reused_from, self.reports.resolve())
            self.say(f"{mutant.id}: {outcome.status} (reused from {outcome.reused_from}: nothing it depends on "
                     f"changed), {outcome.histories} histories/{outcome.steps} steps")  # fmt: skip
        else:
            outcome.build_s = self.built.get(mutant.id, 0.0)
            detail = outcome.reason[:100] if outcome.status != MISSED else ""
            self.say(f"{mutant.id}: {outcome.status} build {outcome.build_s:.1f} s, campaign "
                     f"{outcome.campaign_s:.1f} s, {outcome.histories} histories/{outcome.steps} steps "
                     f"{detail}")  # fmt: skip
        if mutant.canary and outcome.status != CAUGHT:
            self.void.append(f"the canary {mutant.id} was {outcome.status}")

    def voided(self) -> tuple[int, list[Outcome]]:
        """A failed self-check: only the self-checks are reported (a mutant's verdict means nothing then)."""
        self.say(f"void: {'; '.join(self.void)}")
        checks = {i for i, m in enumerate(self.order) if m is None or m.canary}
        for index in set(self.results) - checks:
            del self.results[index]
        report.write_all(self.reports, self.document(report.VOID), self.catalogue)
        return EXIT_VOID, [self.results[i] for i in sorted(self.results)]

    def finish(self) -> tuple[int, list[Outcome]]:
        """The verdict, the console's count line, and the report concluded (conclude)."""
        outcomes = [self.results[i] for i in sorted(self.results)]
        scored = [o for o in outcomes[1:] if not _is_canary(o)]
        all_caught = all(report.accepted(o.as_json()) for o in scored)
        final = self.document(report.ALL_CAUGHT if all_caught else report.SOME_NOT_CAUGHT)
        counts = Counter(o.status for o in scored)
        reused = sum(1 for o in scored if o.reused_from)
        kept_text = f" ({reused} reused)" if self.config.reuse else ""
        equivalent = f"{counts[EQUIVALENT]} equivalent, " if counts[EQUIVALENT] else ""
        rest = len(scored) - counts[CAUGHT] - counts[MISSED] - counts[UNVIABLE] - counts[EQUIVALENT]
        self.say(f"{counts[CAUGHT]} caught, {counts[MISSED]} missed, {equivalent}{counts[UNVIABLE]} unviable, "
                 f"{rest} timeout/error of {len(scored)}{kept_text}; wall {time.perf_counter() - self.started:.0f} "
                 f"s, {self.jobs} jobs")  # fmt: skip
        conclude(self.reports, final, self.config.history, self.say, self.config.annotate, self.catalogue)
        return (EXIT_ALL_CAUGHT if final["passed"] else EXIT_SOME_MISSED), outcomes


def _describe(outcome: Outcome, mutant: Mutant, digests: dict[str, str], why: str) -> None:
    """What the runner knows of a mutant's outcome and the campaign does not: its metadata, where it
    is, what it depends on, the labels of its transitions it reached, and a survivor's diff."""
    outcome.defect_class, outcome.transition = mutant.defect_class, mutant.transition
    outcome.needs = list(mutant.needs)
    outcome.locations = breakdown.locations(mutant)
    outcome.digests = digests
    outcome.exposure = breakdown.exposure(outcome.exposure, mutant.transition)
    outcome.diff = breakdown.diff(mutant) if outcome.status in breakdown.NOT_CAUGHT else ""
    if not outcome.reused_from:
        outcome.why_scored = why


def conclude(
    reports: Path,
    final: Document,
    history: Path | None,
    say: Callable[[str], None],
    annotate: bool,
    catalogue: list[Mutant] | None = None,
) -> None:
    """A finished run's (or merge's) end: the change since the last run of its scope and budget, the
    report written, the run appended to the score history; the console's summary (scores per
    transition, file and class, the survivors, the change), GitHub annotations, the score line last."""
    report.summarise(final)
    if history is not None:
        final["since"] = trend.since(trend.previous(history, final), final, history)
    report.write_all(reports, final, catalogue)
    if history is not None:
        trend.append(history, trend.entry(final, reports, history))
    for line in breakdown.score_lines(final["scores"]):
        say(line)
    for record in breakdown.survivors(report.scored(final)):
        say(breakdown.survivor_line(record))
    for line in trend.since_lines(final.get("since")):
        say(line)
    if annotate:
        for line in breakdown.github_annotations(report.scored(final)):
            say(line)
    say(score_line(final))


def score_line(document: Document) -> str:
    """The last line: the verdict, the score (a subset's said so), and the gate."""
    points = document["score"]
    percent = "n/a" if points["percent"] is None else f"{points['percent']} %"
    part = document.get("subset")
    which = (
        f"subset score {points['caught']}/{points['viable']} ({percent}; {report.subset_text(part)})"
        if part
        else f"score {points['caught']}/{points['viable']} ({percent})"
    )
    breaking = Thresholds.from_json(document.get("thresholds")).breaking
    gate = "every mutant must be caught" if breaking is None else f"--threshold-break {breaking:g} %"
    return f"{document['verdict']}: {which}; {'passed' if document['passed'] else 'FAILED'} ({gate})"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def merge(
    out: Path,
    shard_dirs: list[Path],
    say: Callable[[str], None] = print,
    complain: Callable[[str], None] = _stderr,
    thresholds: Callable[[Thresholds], Thresholds] | None = None,
    history: Path | None = None,
    annotate: bool = False,
) -> int:
    """Joins shard reports into one under `out` (all four files); the exit code as for a run. Shards
    that do not fit are one line to `complain` (stderr) and EXIT_USAGE, nothing written; `thresholds`
    turns the shards' recorded thresholds into the merge's (the command line's flags). A finished
    merge is appended to the score `history` as a run is; `annotate` prints its survivors for GitHub."""
    try:
        document = report.merge(out, shard_dirs)
        catalogue = _generated_merge(out, shard_dirs, document)
    except (report.MergeProblem, SetupProblem) as exc:
        complain(f"cannot merge: {exc}")
        return EXIT_USAGE
    if thresholds is not None:
        document["thresholds"] = thresholds(Thresholds.from_json(document.get("thresholds"))).as_json()
    report.summarise(document)
    if document["verdict"] in (report.ALL_CAUGHT, report.SOME_NOT_CAUGHT):
        say(str(document["summary"]))
        conclude(out, document, history, say, annotate, catalogue)
    else:
        report.write_all(out, document, catalogue)
        say(f"{score_line(document)}; {document['summary']}")
    if document["verdict"] == report.VOID:
        return EXIT_VOID
    return EXIT_ALL_CAUGHT if document["passed"] else EXIT_SOME_MISSED


def _generated_merge(out: Path, shard_dirs: list[Path], document: Document) -> list[Mutant] | None:
    """Shards of generated mutants: the union of their saved sets (for the report, and saved under
    `out`), their records read through today's triage (so a run scored before a survivor was triaged
    merges as triaged); None for the catalogue's shards. SetupProblem on a triage that does not fit."""
    saved = [g for g in map(load_generated, shard_dirs) if g is not None]
    if not saved:
        return None
    generated = list({m.id: m for g in saved for m in g}.values())
    triaged = triage.load([m.id for m in generated])
    for record in document["outcomes"]:
        triage.apply(record, triaged)
    if document["verdict"] == report.SOME_NOT_CAUGHT and all(map(report.accepted, report.scored(document))):
        document["verdict"] = report.ALL_CAUGHT
    document["catalogue"] = "generated"
    save_generated(out, generated)
    return [*(m for m in load() if m.canary), *generated]
