"""The catalogue: each mutant's metadata (catalogue.toml) and unified-diff patch (lua/, native/, both/), kept
in this package beside the code that loads them and checks them for completeness."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from difftest.judge.contract import TABLE_ORDER
from difftest.spec.commands import TRANSITIONS as COMMANDS

CATALOGUE_DIR = Path(__file__).resolve().parent  # this package: its loader beside its data
HERE = CATALOGUE_DIR.parent  # the mutants package (its triage file, its build cache)
CATALOGUE_FILE = CATALOGUE_DIR / "catalogue.toml"
REPO = HERE.parent
EXECUTOR_DIRS = {"native": REPO / "executors" / "native", "lua": REPO / "executors" / "lua"}
BOTH = "both"  # a shared defect: one patch for each executor (catalogue/both/<id>.<executor>.patch), applied together

# what a mutant may name: the command table's verbs and the contract's rows (the reports' order), derived
# so that a verb or a row added there is one a mutant can aim at
TRANSITIONS: tuple[str, ...] = tuple(str(verb) for verb in COMMANDS)
CONTRACT_ROWS: tuple[str, ...] = tuple(rule.id for rule in TABLE_ORDER)
NEEDS = ("restarts", "corruption", "users", "malformed")
REQUIRED_FIELDS = ("id", "executor", "transition", "defect_class", "contract_rows", "why", "exposure", "needs")


@dataclass(frozen=True)
class Mutant:
    id: str
    executor: str  # "native", "lua", or "both" (a defect ported the same way into each)
    transition: str  # a verb, several joined by ", ", or "all"
    defect_class: str
    contract_rows: tuple[str, ...]
    why: str  # why the defect matters
    exposure: str  # the behaviour that should expose it
    needs: tuple[str, ...]  # the history features it takes to be caught
    canary: bool = False

    @property
    def executors(self) -> tuple[str, ...]:
        """The executors the mutant patches: its own, or both (Lua first)."""
        return ("lua", "native") if self.executor == BOTH else (self.executor,)

    def patch_path_for(self, executor: str) -> Path:
        if self.executor == BOTH:
            return CATALOGUE_DIR / BOTH / f"{self.id}.{executor}.patch"
        return CATALOGUE_DIR / self.executor / f"{self.id}.patch"

    def patch_for(self, executor: str) -> str:
        return self.patch_path_for(executor).read_text()

    @property
    def patch_path(self) -> Path:
        """The patch of a one-executor mutant (a shared one has one per executor: patch_path_for)."""
        return self.patch_path_for(self.executors[0])

    @property
    def patch(self) -> str:
        return self.patch_path.read_text()

    @property
    def source_dir(self) -> Path:
        return EXECUTOR_DIRS[self.executors[0]]

    @property
    def transitions(self) -> tuple[str, ...]:
        if self.transition == "all":
            return TRANSITIONS
        return tuple(t.strip() for t in self.transition.split(","))


def problems(entry: dict[str, object]) -> list[str]:
    """What is missing or wrong in one catalogue entry (empty when complete)."""
    name = entry.get("id", "?")
    found = [f"{name}: no {f}" for f in REQUIRED_FIELDS if f not in entry]
    if entry.get("executor") not in (*EXECUTOR_DIRS, BOTH):
        found.append(f"{name}: executor must be one of {sorted((*EXECUTOR_DIRS, BOTH))}")
    for text in ("why", "exposure", "defect_class", "transition"):
        if not str(entry.get(text, "")).strip():
            found.append(f"{name}: empty {text}")
    transition = str(entry.get("transition", ""))
    if transition != "all" and any(t.strip() not in TRANSITIONS for t in transition.split(",")):
        found.append(f"{name}: unknown transition in {transition!r}")
    rows = entry.get("contract_rows", [])
    if not isinstance(rows, list) or any(r not in CONTRACT_ROWS for r in rows):
        found.append(f"{name}: contract_rows must be a list of {CONTRACT_ROWS}")
    needs = entry.get("needs", [])
    if not isinstance(needs, list) or any(n not in NEEDS for n in needs):
        found.append(f"{name}: needs must be a list of {NEEDS}")
    return found


def _mutant(e: dict[str, object]) -> Mutant:
    rows, needs = e["contract_rows"], e["needs"]
    assert isinstance(rows, list) and isinstance(needs, list)
    return Mutant(
        id=str(e["id"]), executor=str(e["executor"]), transition=str(e["transition"]),
        defect_class=str(e["defect_class"]), contract_rows=tuple(rows), why=str(e["why"]),
        exposure=str(e["exposure"]), needs=tuple(needs), canary=bool(e.get("canary", False)),
    )  # fmt: skip


def load(path: Path = CATALOGUE_FILE) -> list[Mutant]:
    """Every mutant in catalogue order; ValueError on an incomplete entry or a missing patch."""
    entries = tomllib.loads(path.read_text())["mutant"]
    found = [p for entry in entries for p in problems(entry)]
    if found:
        raise ValueError("incomplete catalogue: " + "; ".join(found))
    mutants = [_mutant(e) for e in entries]
    missing = [m.id for m in mutants for e in m.executors if not m.patch_path_for(e).is_file()]
    if missing:
        raise ValueError(f"patches missing for {', '.join(missing)}")
    return mutants
