"""Shard reports merged into one outcomes document (python -m mutants merge)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mutants.catalogue import load
from mutants.records import Document, Record, Subset, parse_document
from mutants.report_document import (
    ALL_CAUGHT,
    DEFAULT_THRESHOLDS,
    INCOMPLETE,
    INTERRUPTED,
    NULL_RUN,
    OUTCOMES,
    RUNNING,
    SOME_NOT_CAUGHT,
    VOID,
    accepted,
    is_canary,
    passes,
    scored,
    subset,
    summarise,
    upgraded,
)


class MergeProblem(ValueError):
    """Shards that cannot be merged: different budgets, a mutant in two shards, a missing file."""


Shard = tuple[Path, Document]  # a shard's directory and its outcomes document


def merge(out: Path, shard_dirs: list[Path]) -> Document:
    """One document from the shards' outcomes (artifact paths made relative to `out`): the null run
    and canary of the first shard (each shard ran its own; any void shard voids the merge), every
    mutant once, in catalogue order. The verdict is "incomplete" when shards of the split are missing."""
    documents = _read_shards(shard_dirs)
    order = {m.id: i for i, m in enumerate(load())}
    records, void = _records(out, documents)
    outcomes = sorted(records.values(), key=lambda r: (r["id"] != NULL_RUN, not is_canary(r),
                                                       order.get(r["id"], len(order)), r["id"]))  # fmt: skip
    merged: Document = {
        "verdict": "", "budget": documents[0][1].get("budget"),
        "wall_s": max(float(d.get("wall_s", 0.0)) for _, d in documents),
        "jobs": sum(int(d.get("jobs", 1)) for _, d in documents), "shard": None,
        "shards": [str(d) for d, _ in documents],
        "chosen": sorted({i for _, d in documents for i in d.get("chosen", [])}, key=lambda i: order.get(i, 0)),
        "thresholds": documents[0][1].get("thresholds") or DEFAULT_THRESHOLDS.as_json(),
        "outcomes": outcomes,
    }  # fmt: skip
    merged["subset"] = _merged_subset(documents, merged["chosen"], order)
    summarise(merged)
    if void:
        merged["verdict"] = VOID
    elif not (_complete(documents) and all(d.get("verdict") not in (RUNNING, INTERRUPTED) for _, d in documents)):
        merged["verdict"] = INCOMPLETE
    else:
        merged["verdict"] = ALL_CAUGHT if all(accepted(r) for r in scored(merged)) else SOME_NOT_CAUGHT
    merged["passed"] = passes(merged)
    return merged


def _read_shards(shard_dirs: list[Path]) -> list[Shard]:
    """Each shard's outcomes.json, read as today's names; MergeProblem when one is missing or the budgets differ."""
    documents = []
    for directory in shard_dirs:
        path = directory / OUTCOMES
        if not path.is_file():
            raise MergeProblem(f"no {OUTCOMES} in {directory}")
        documents.append((directory, upgraded(parse_document(path.read_text()))))
    budgets = {json.dumps(d.get("budget"), sort_keys=True) for _, d in documents}
    if len(budgets) != 1:
        raise MergeProblem("the shards ran with different budgets: " + "; ".join(sorted(budgets)))
    return documents


def _records(out: Path, documents: list[Shard]) -> tuple[dict[str, Record], bool]:
    """Every record once by id (artifacts relative to `out`): the first shard's null run and canary,
    each mutant from the one shard that has it; and whether the merge is void."""
    records: dict[str, Record] = {}
    owner: dict[str, Path] = {}
    void = False
    for directory, document in documents:
        void = void or document.get("verdict") == VOID
        for record in document["outcomes"]:
            record = record.copy()
            if record.get("artifact"):
                record["artifact"] = os.path.relpath((directory / record["artifact"]).resolve(), out.resolve())
            rid = record["id"]
            if rid == NULL_RUN or is_canary(record):
                if rid in records and records[rid]["status"] != record["status"]:
                    void = True  # the shards disagree on the self-checks
                records.setdefault(rid, record)
                continue
            if rid in owner:
                raise MergeProblem(f"{rid} is in two shards: {owner[rid]} and {directory}")
            owner[rid] = directory
            records[rid] = record
    return records, void


def _complete(documents: list[Shard]) -> bool:
    """Unsharded runs only, or every shard k/n of one split n, each once."""
    places = [d.get("shard") for _, d in documents]
    split = {place.get("count") if place else None for place in places}
    indices = sorted(place.get("index", 0) if place else 0 for place in places)
    return split == {None} or (len(split) == 1 and indices == list(range(1, int(next(iter(split)) or 0) + 1)))


def _merged_subset(documents: list[Shard], chosen: list[str], order: dict[str, int]) -> Subset | None:
    """A subset when, all shards together, mutants of the shards' catalogue were left out (an --only
    run's, or those of a shard not given)."""
    parts = [d.get("subset") for _, d in documents]
    universe = {*(i for _, d in documents for i in d.get("chosen", [])),
                *(i for part in parts if part for i in part.get("left_out", []))}  # fmt: skip
    only = sorted({i for part in parts if part for i in part.get("only") or []})
    in_diff = next((part.get("in_diff") for part in parts if part), None)
    return subset(sorted(universe, key=lambda i: (order.get(i, len(order)), i)), chosen, only or None, None, in_diff)
