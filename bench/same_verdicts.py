"""Same seeds, same verdicts: seeded histories saved once, judged on two trees, compared step by step.

Issue 28's check that a restructuring changed no behaviour. Four commands, run from a tree's root with
that tree's .venv (the script imports the layered packages, or the flat modules before the move, so the
one file can be copied into an older worktree):

    python bench/same_verdicts.py save --seed 1 2 3 4 --histories 500 --out DIR
    python bench/same_verdicts.py judge DIR --out before.jsonl      # in the old tree
    python bench/same_verdicts.py judge DIR --out after.jsonl       # in the new tree, the same DIR
    python bench/same_verdicts.py compare before.jsonl after.jsonl
    python bench/same_verdicts.py observations tests/observations --out recorded.jsonl  # on each tree

`save` draws each seed's histories from the state machine (strategies/machine.py) as a campaign does
(batches of the campaign's size, each seeded with `batch_seed(seed, batch)`), the generate phase only so
that no replay feeds back into what is drawn, and writes each as a history file plus, per seed, the
sha256 of every history's text (`s<seed>.digests.json`): `compare DIR_A DIR_B` tells whether two trees'
generators drew the same histories from the same seeds (saved with the same --histories and --max-steps:
a batch's size changes what Hypothesis draws in it).

`judge` replays every history of DIR on a real server pair (the Replayer's defaults) and writes one JSON
line per history (its name, each step's verdict and rule, the divergence if any), then a totals line.
`compare A B` holds two such files equal when every history has the same verdict and rule at every step
(and the same divergence step and kind); it prints the first 20 differences and a summary line.
`observations` judges the recorded observations (tests/observations/, no servers) the same way, each
file's line saying whether its verdicts are the ones recorded with it; copy one tree's files aside to
have both trees' judges judge the same files.

Exit codes: 0 done (compare: equal); 1 judge: a history diverged, observations: a verdict unlike the one
recorded (either way written to the file); 2 bad input (one line on stderr); 3 compare: the two differ.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path.cwd()
if str(ROOT) not in sys.path:  # run as `python bench/same_verdicts.py` from a tree's root
    sys.path.insert(0, str(ROOT))

EXIT_OK, EXIT_DIVERGENCE, EXIT_BAD_INPUT, EXIT_DIFFER = 0, 1, 2, 3
SHOWN = 20  # differences printed by compare


class BadInput(Exception):
    """One line for the user, exit 2."""


def _module(*names: str) -> ModuleType:
    """The first of `names` that exists: the layered path first, then the flat one (before issue 28's move)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as missing:
            # only the module asked for (or its package) missing; a missing dependency inside it is raised
            if missing.name is None or not name.startswith(missing.name):
                raise
    raise ImportError(f"none of {', '.join(names)} found: run from a difftest tree's root with its .venv")


def history_module() -> ModuleType:
    return _module("difftest.history.format", "difftest.history")


def files_module() -> ModuleType:
    return _module("difftest.base.files", "difftest.files")


def write_atomically(path: Path, text: str) -> None:
    files_module().write_atomically(path, text)


def tree_commit() -> str:
    """The commit of the tree whose difftest is imported (a `+` when it has uncommitted changes)."""
    root = Path(_module("difftest").__file__ or ".").resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return f"unknown ({root})"
    return head + ("+" if dirty else "")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- save ------------------------------------------------------------------------------------------


@dataclass
class Saved:
    """One seed's histories as they are written: each file's digest, and what did not read back."""

    seed: int
    out: Path
    fmt: ModuleType
    digests: dict[str, str] = field(default_factory=dict)
    steps: int = 0
    not_round_tripped: list[str] = field(default_factory=list)
    unloadable: dict[str, str] = field(default_factory=dict)  # name -> the history format's one line

    def keep(self, history: Any) -> None:
        name = f"s{self.seed}-{len(self.digests):05d}.jsonl"
        text = self.fmt.dumps(history)
        try:  # the file must be the history drawn, or judging it means little
            if self.fmt.loads(text, name) != history:
                self.not_round_tripped.append(name)
        except self.fmt.HistoryError as refused:  # written all the same: `judge` records it as unloadable
            self.unloadable[name] = str(refused).splitlines()[0]
        write_atomically(self.out / name, text)
        self.digests[name] = digest(text)
        self.steps += len(history.steps)


def engine_hooks() -> list[str] | None:
    """The engine's hooks on while drawing (strategies/engine.py); None before the generator had them apart."""
    try:
        engine = importlib.import_module("strategies.engine")
    except ModuleNotFoundError as missing:
        if missing.name != "strategies.engine":
            raise
        return None
    return sorted(engine.hooks())


def save_seed(seed: int, histories: int, out: Path, max_steps: int, commit: str) -> None:
    """One seed's histories drawn batch by batch as a campaign draws them (generate phase only)."""
    from hypothesis import Phase

    machine = importlib.import_module("strategies.machine")
    campaign = _module("difftest.campaign.driver", "difftest.campaign")
    started = time.perf_counter()
    saved = Saved(seed, out, history_module())
    shapes = _module("strategies.shape", "strategies.histories")
    shape = shapes.HistoryShape(max_steps=max_steps)  # the campaign's shape on the local backend
    batch = 0
    while len(saved.digests) < histories:
        size = min(campaign.BATCH, histories - len(saved.digests))
        before = len(saved.digests)
        the_settings = machine.machine_settings(size, max_steps, phases=[Phase.generate])
        machine.run_machine(shape, saved.keep, the_settings, seed=campaign.batch_seed(seed, batch))
        if len(saved.digests) == before:
            raise BadInput(f"seed {seed}, batch {batch}: the machine drew no history")
        batch += 1
    seconds = time.perf_counter() - started
    manifest = {"seed": seed, "histories": len(saved.digests), "steps": saved.steps, "batches": batch,
                "batch": campaign.BATCH, "max_steps": max_steps, "tree": commit, "seconds": round(seconds, 2),
                "engine_hooks": engine_hooks(), "not_round_tripped": saved.not_round_tripped,
                "unloadable": saved.unloadable, "digests": saved.digests}  # fmt: skip
    write_atomically(out / f"s{seed}.digests.json", json.dumps(manifest, indent=1) + "\n")
    print(f"seed {seed}: {len(saved.digests):,} histories, {saved.steps:,} steps in {seconds:.1f} s "
          f"({saved.steps / seconds:,.0f} steps/s drawn and written), tree {commit}"
          + (f"; {len(saved.not_round_tripped)} did not read back equal" if saved.not_round_tripped else "")
          + (f"; {len(saved.unloadable)} the history format refuses" if saved.unloadable else ""),
          flush=True)  # fmt: skip


def save(seeds: list[int], histories: int, out: Path, max_steps: int) -> int:
    """Each seed's `histories` histories written to `out`, with their digests."""
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        if (out / f"s{seed}.digests.json").exists() or any(out.glob(f"s{seed}-*.jsonl")):
            raise BadInput(f"{out}: seed {seed}'s histories are there already; save into another directory")
    commit = tree_commit()
    for seed in seeds:
        save_seed(seed, histories, out, max_steps, commit)
    return EXIT_OK


# -- judge -----------------------------------------------------------------------------------------


def history_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise BadInput(f"{directory}: not a directory of histories (.jsonl); make one with `save`")
    found = sorted(directory.glob("*.jsonl"))
    if not found:
        raise BadInput(f"{directory}: holds no history (.jsonl); make them with `save`")
    return found


def judged(name: str, result: Any, seconds: float) -> dict[str, Any]:
    """One history's line: each step's verdict kind and rule, and the divergence if any."""
    line: dict[str, Any] = {"name": name, "steps": [[r.verdict.kind, r.verdict.rule] for r in result.records]}
    found = result.divergence
    line["divergence"] = None if found is None else {"index": found.index, "kind": found.kind, "reason": found.reason}
    line["seconds"] = round(seconds, 4)
    return line


def judge(directory: Path, out: Path) -> int:
    """Every history in `directory` replayed and judged on a real server pair; one line each to `out`."""
    fmt = history_module()
    replayer_module = _module("difftest.replay.replayer", "difftest.replay")
    from executors.native.adapter import DEFAULT_MODULE

    loaded: list[tuple[str, Any]] = []
    refused: list[dict[str, Any]] = []  # a file the history format does not read: recorded, not judged
    for path in history_files(directory):
        try:
            loaded.append((path.name, fmt.load(path)))
        except fmt.HistoryError as bad:
            refused.append({"name": path.name, "unloadable": str(bad).splitlines()[0]})
    if not out.parent.is_dir():
        raise BadInput(f"{out.parent}: no such directory for --out")
    commit = tree_commit()
    lines: list[dict[str, Any]] = list(refused)
    kinds: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    errors = diverged = 0
    started = time.perf_counter()
    replayer = replayer_module.Replayer(DEFAULT_MODULE)
    try:
        for position, (name, history) in enumerate(loaded, 1):
            began = time.perf_counter()
            try:
                result = replayer.replay(history)
            except Exception as failed:  # recorded as the history's outcome; a fresh pair for the next one
                lines.append({"name": name, "error": f"{type(failed).__name__}: {' '.join(str(failed).split())}"})
                errors += 1
                replayer.close()
                replayer = replayer_module.Replayer(DEFAULT_MODULE)
                continue
            line = judged(name, result, time.perf_counter() - began)
            lines.append(line)
            diverged += line["divergence"] is not None
            for kind, rule in line["steps"]:
                kinds[kind] += 1
                if rule:
                    rules[rule] += 1
            if position % 250 == 0:
                print(f"  {position:,}/{len(loaded):,} histories judged", file=sys.stderr, flush=True)
    finally:
        replayer.close()
    wall = time.perf_counter() - started
    steps = sum(kinds.values())
    replay_s = sum(line.get("seconds", 0.0) for line in lines)
    totals = {"tree": commit, "directory": str(directory), "histories": len(loaded), "steps": steps,
              "unloadable": len(refused),
              "kinds": dict(sorted(kinds.items())), "rules": dict(sorted(rules.items())), "divergences": diverged,
              "errors": errors, "wall_s": round(wall, 2), "replay_s": round(replay_s, 2),
              "steps_per_s": round(steps / replay_s, 1) if replay_s else 0.0}  # fmt: skip
    write_atomically(out, "".join(json.dumps(line) + "\n" for line in [*lines, {"totals": totals}]))
    print(f"judged {len(loaded):,} histories, {steps:,} steps on tree {commit}: {diverged} diverged, {errors} "
          f"error(s), {len(refused)} file(s) not loadable; {wall:.1f} s wall, "
          f"{totals['steps_per_s']:,} steps/s replayed -> {out}")  # fmt: skip
    return EXIT_DIVERGENCE if diverged else EXIT_OK


def judge_observations(directory: Path, out: Path) -> int:
    """Every recorded observation file in `directory` (tests/observations/) judged again without servers:
    one line each, as `judge` writes them, and whether the verdicts are those recorded in the file."""
    observations = _module("difftest.replay.observations", "difftest.observations")
    judge_module = _module("difftest.judge.verdicts", "difftest.judge")
    if not out.parent.is_dir():
        raise BadInput(f"{out.parent}: no such directory for --out")
    lines: list[dict[str, Any]] = []
    steps = unlike = 0
    for path in history_files(directory):
        try:
            _, observed, recorded = observations.load(path)
        except (observations.ObservationError, ValueError, KeyError) as bad:
            lines.append({"name": path.name, "unloadable": f"{type(bad).__name__}: {str(bad).splitlines()[0]}"})
            continue
        verdicts = judge_module.judge_all(observed)
        same = verdicts == recorded
        unlike += not same
        steps += len(verdicts)
        lines.append({"name": path.name, "steps": [[v.kind, v.rule] for v in verdicts], "divergence": None,
                      "as_recorded": same})  # fmt: skip
    totals = {"tree": tree_commit(), "directory": str(directory), "histories": len(lines), "steps": steps,
              "unlike_recorded": unlike}  # fmt: skip
    write_atomically(out, "".join(json.dumps(line) + "\n" for line in [*lines, {"totals": totals}]))
    print(f"judged {len(lines)} recorded observation files, {steps:,} steps on tree {totals['tree']}: "
          f"{unlike} unlike the verdicts recorded with them -> {out}")  # fmt: skip
    return EXIT_DIVERGENCE if unlike else EXIT_OK


# -- compare ---------------------------------------------------------------------------------------


@dataclass
class Judgement:
    tree: str
    histories: dict[str, dict[str, Any]]


def read_judgement(path: Path) -> Judgement:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as problem:
        raise BadInput(f"{path}: cannot be read ({problem}); pass a file `judge` wrote") from None
    histories: dict[str, dict[str, Any]] = {}
    tree = "?"
    for number, raw in enumerate(text.splitlines(), 1):
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            raise BadInput(f"{path}:{number}: not JSON; pass a file `judge` wrote") from None
        if isinstance(line, dict) and isinstance(line.get("totals"), dict):
            tree = str(line["totals"].get("tree", "?"))
        elif isinstance(line, dict) and isinstance(line.get("name"), str):
            histories[line["name"]] = line
        else:
            raise BadInput(f"{path}:{number}: neither a history's line nor the totals; pass a file `judge` wrote")
    if not histories:
        raise BadInput(f"{path}: no history judged in it; pass a file `judge` wrote")
    return Judgement(tree, histories)


def history_differences(name: str, a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two judgements of one history: an error, a step's verdict or rule, the divergence."""
    for outcome in ("unloadable", "error"):  # not judged on one side or both
        if outcome in a or outcome in b:
            same = a.get(outcome) == b.get(outcome)
            return [] if same else [f"{name}: {outcome} {a.get(outcome)!r} / {b.get(outcome)!r}"]
    out = []
    left, right = a["steps"], b["steps"]
    for index, (x, y) in enumerate(zip(left, right, strict=False)):
        if x != y:
            out.append(f"{name} step {index}: {x[0]} {x[1] or '-'} / {y[0]} {y[1] or '-'}")
    if len(left) != len(right):
        out.append(f"{name}: {len(left)} steps judged / {len(right)}")
    da, db = a.get("divergence"), b.get("divergence")
    if (da and (da["index"], da["kind"])) != (db and (db["index"], db["kind"])):
        out.append(f"{name}: divergence {da and (da['index'], da['kind'])} / {db and (db['index'], db['kind'])}")
    return out


def compare_judgements(a: Path, b: Path) -> int:
    left, right = read_judgement(a), read_judgement(b)
    differences: list[str] = []
    for name in sorted(left.histories.keys() - right.histories.keys()):
        differences.append(f"{name}: only in {a}")
    for name in sorted(right.histories.keys() - left.histories.keys()):
        differences.append(f"{name}: only in {b}")
    both = sorted(left.histories.keys() & right.histories.keys())
    steps = histories_differing = 0
    step_differences = 0
    for name in both:
        steps += len(left.histories[name].get("steps", []))
        found = history_differences(name, left.histories[name], right.histories[name])
        histories_differing += bool(found)
        step_differences += sum(" step " in line for line in found)
        differences.extend(found)
    for line in differences[:SHOWN]:
        print(line)
    if len(differences) > SHOWN:
        print(f"... and {len(differences) - SHOWN} more")
    trees = f"trees {left.tree} / {right.tree}"
    if not differences:
        print(f"same: {len(both):,} histories, {steps:,} steps, the same verdict and rule at every step ({trees})")
        return EXIT_OK
    print(f"differ: {histories_differing:,} of {len(both):,} histories ({step_differences:,} step(s) of {steps:,}), "
          f"{len(left.histories) + len(right.histories) - 2 * len(both)} not in both ({trees})")  # fmt: skip
    return EXIT_DIFFER


@dataclass
class Generation:
    """A `save` directory's manifests: each history's digest, the trees, and how each seed was drawn."""

    digests: dict[str, str] = field(default_factory=dict)
    trees: set[str] = field(default_factory=set)
    drawn: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # seed -> histories, batch, max steps
    hooks: set[str] = field(default_factory=set)  # the engine's hooks of each seed, as text


def read_digests(directory: Path) -> Generation:
    manifests = sorted(directory.glob("s*.digests.json"))
    if not manifests:
        raise BadInput(f"{directory}: no s<seed>.digests.json; pass a directory `save` wrote")
    generation = Generation()
    for manifest in manifests:
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            generation.digests.update(data["digests"])
            generation.trees.add(str(data.get("tree", "?")))
            generation.drawn[int(data["seed"])] = (int(data["histories"]), int(data["batch"]), int(data["max_steps"]))
            generation.hooks.add(str(data.get("engine_hooks")))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise BadInput(f"{manifest}: not a digests file `save` wrote") from None
    return generation


def compare_generations(a: Path, b: Path) -> int:
    """Two `save` directories: the same histories drawn from the same seeds?"""
    one, other = read_digests(a), read_digests(b)
    for seed in sorted(one.drawn.keys() & other.drawn.keys()):
        if one.drawn[seed] != other.drawn[seed]:  # a batch's size changes what Hypothesis draws in it
            raise BadInput(
                f"seed {seed}: drawn as (histories, batch, max steps) {one.drawn[seed]} in {a} and "
                f"{other.drawn[seed]} in {b}; save both with the same --histories and --max-steps"
            )
    left, right = one.digests, other.digests
    differences = [f"{name}: only in {a}" for name in sorted(left.keys() - right.keys())]
    differences += [f"{name}: only in {b}" for name in sorted(right.keys() - left.keys())]
    both = sorted(left.keys() & right.keys())
    differences += [f"{name}: drawn differently" for name in both if left[name] != right[name]]
    for line in differences[:SHOWN]:
        print(line)
    if len(differences) > SHOWN:
        print(f"... and {len(differences) - SHOWN} more")
    trees = f"trees {','.join(sorted(one.trees))} / {','.join(sorted(other.trees))}"
    if one.hooks != other.hooks:
        trees += f"; engine hooks {'; '.join(sorted(one.hooks))} / {'; '.join(sorted(other.hooks))}"
    if not differences:
        print(f"same: {len(both):,} histories drawn alike from the same seeds ({trees})")
        return EXIT_OK
    print(f"differ: {len(differences):,} of {len(left.keys() | right.keys()):,} histories ({trees})")
    return EXIT_DIFFER


def compare(a: Path, b: Path) -> int:
    if a.is_dir() and b.is_dir():
        return compare_generations(a, b)
    if a.is_dir() or b.is_dir():
        raise BadInput(f"pass two files `judge` wrote, or two directories `save` wrote, not one of each ({a}, {b})")
    return compare_judgements(a, b)


# -- the command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    saving = commands.add_parser("save", help="draw seeded histories and write them, with their digests")
    saving.add_argument("--seed", type=int, nargs="+", required=True)
    saving.add_argument("--histories", type=int, required=True, help="per seed")
    saving.add_argument("--max-steps", type=int, default=40, help="as `difftest run --max-steps` (default 40)")
    saving.add_argument("--out", type=Path, required=True)
    judging = commands.add_parser("judge", help="replay and judge every history of a directory")
    judging.add_argument("directory", type=Path)
    judging.add_argument("--out", type=Path, required=True)
    recorded = commands.add_parser("observations", help="re-judge recorded observations (tests/observations/)")
    recorded.add_argument("directory", type=Path)
    recorded.add_argument("--out", type=Path, required=True)
    comparing = commands.add_parser("compare", help="two judgements (files) or two generations (directories)")
    comparing.add_argument("a", type=Path)
    comparing.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "save":
            if args.histories < 1 or args.max_steps < 1:
                raise BadInput("--histories and --max-steps must be at least 1")
            return save(args.seed, args.histories, args.out, args.max_steps)
        if args.command == "judge":
            return judge(args.directory, args.out)
        if args.command == "observations":
            return judge_observations(args.directory, args.out)
        return compare(args.a, args.b)
    except BadInput as bad:
        print(f"same_verdicts: {bad}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
