"""Campaign shards: which batches `--shard K/N` runs, and joining shard summaries into one (pure).

Batch b of a seed's sequence belongs to shard K/N when b % N == K - 1, on every machine alike.
A merge keeps what the unsharded run (one worker) would have compared: every batch before the
first divergent batch, and that batch up to its divergence; so its verdict, divergent batch,
histories, steps and coverage counts equal that run's for the same seed and budget.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from difftest.campaign.driver import ProgressPoint
from difftest.findings import tally
from difftest.findings.entries import Divergence, Finding
from difftest.report.document import BatchEntry, Budget, Summary, ordered
from difftest.report.reports import add_coverage, verdict

ShardSpec = tuple[int, int]  # (K, N), 1 <= K <= N


class ShardMismatch(ValueError):
    """Shard directories that do not make one campaign: the message is the one line shown."""


def parse_shard(text: str) -> ShardSpec:
    """'K/N' as (K, N); a ValueError says what is wrong."""
    index, slash, count = text.partition("/")
    if not slash or not index.strip().isdigit() or not count.strip().isdigit():
        raise ValueError(f"--shard {text!r}: write K/N, e.g. 1/2 for the first of two shards")
    k, n = int(index), int(count)
    if not 1 <= k <= n:
        raise ValueError(f"--shard {text}: K must be between 1 and N")
    return k, n


def owns(shard: ShardSpec, batch: int) -> bool:
    index, count = shard
    return batch % count == index - 1


def shard_of(document: Summary) -> ShardSpec:
    shard = document.get("shard")
    return (int(shard["index"]), int(shard["count"])) if shard else (1, 1)


Shard = tuple[Path, Summary]  # a shard's run directory and its summary.json


def _same(parts: list[Shard], key: str, what: str) -> None:
    """Refuses shards whose `key` differs (a summary's key, given by name)."""
    documents: list[tuple[Path, Mapping[str, object]]] = list(parts)
    first_dir, first = documents[0]
    for directory, document in documents[1:]:
        if document.get(key) != first.get(key):
            raise ShardMismatch(f"the shards do not fit together: {first_dir} has {what} {first.get(key)}, "
                                f"{directory} has {what} {document.get(key)}")  # fmt: skip


def _budget_batches(budget: Budget) -> int | None:
    """How many batches an example budget has (the campaign's batch_sizes, without a config)."""
    from difftest.campaign.driver import BATCH

    examples = budget.get("examples")
    return None if examples is None else -(-int(examples) // BATCH)


def _check(parts: list[Shard]) -> None:
    """Refuses parts that are not the shards of one campaign, each shard K/N once."""
    for directory, document in parts:
        if "batches" not in document:
            raise ShardMismatch(f"{directory}/summary.json has no per-batch records (written before sharding "
                                "existed): run that shard again")  # fmt: skip
        if document.get("shards"):
            raise ShardMismatch(f"{directory} is itself a merge: merge the shard directories it came from")
    _same(parts, "seed", "seed")
    _same(parts, "budget", "budget")
    _same(parts, "restarts", "restarts")
    _same(parts, "sizes", "production's size")
    _same(parts, "replicas", "replicas")
    _same(parts, "max_steps", "max_steps")
    _same(parts, "valkey", "Valkey")  # a version matrix's legs are merged apart
    counts = {shard_of(d)[1] for _, d in parts}
    if len(counts) > 1:
        splits = " and ".join(str(c) for c in sorted(counts))
        raise ShardMismatch(f"the shards do not fit together: they split the campaign into {splits} shards")
    count = counts.pop()
    seen: dict[int, Path] = {}
    for directory, document in parts:
        index = shard_of(document)[0]
        if index in seen:
            raise ShardMismatch(f"shards overlap: {seen[index]} and {directory} are both shard {index}/{count}")
        seen[index] = directory
        for entry in document["batches"]:
            if not owns((index, count), int(entry["batch"])):
                raise ShardMismatch(f"{directory} holds batch {entry['batch']}, which is not shard {index}/{count}'s")
    absent = [f"{k}/{count}" for k in range(1, count + 1) if k not in seen]
    if absent:
        raise ShardMismatch(f"shard {', '.join(absent)} missing: merge all {count} shards of the campaign")


def merge(parts: list[Shard], out: Path) -> Summary:
    """One summary from the shards' (directory, summary) pairs; artifact links are made relative
    to `out`. Raises ShardMismatch for shards that do not fit together or miss a batch."""
    if not parts:
        raise ShardMismatch("no shard directories to merge")
    _check(parts)
    owner = _owners(parts)
    first_doc = parts[0][1]
    # a run that went on past its findings (difftest run's default) keeps every batch; one that stopped
    # at its first (--stop-at-first, and summaries of older runs) ends at the first divergent batch
    go_on = not first_doc.get("stop_at_first", True)
    diverged = sorted(b for b, (_, _, entry) in owner.items() if entry.get("diverged"))
    first = diverged[0] if diverged and not go_on else None
    total = _budget_batches(first_doc.get("budget", {}))
    _check_finished(owner, first, total, first_doc)
    entries = [owner[b][2] for b in sorted(owner) if first is None or b <= first]
    findings = _findings(parts, out)
    if go_on:
        divergences = [_divergence_of(entry) for entry in tally.failing(findings) if entry.get("artifact")]
    else:
        divergences = _first_divergence(owner[first], first, out) if first is not None else []
    document = _merged_fields(parts, entries, total)
    document.update({
        "verdict": verdict(divergences, document.get("interrupted", False), document["histories"], findings),
        "divergences": divergences,
        "findings": findings,
        "stop_at_first": not go_on,
    })  # fmt: skip
    add_coverage(document, _labels(entries))
    document["host"] = _joined(parts, "host")
    document["progress"] = _progress(entries)
    document["batches"] = entries
    return ordered(document, _ORDER)


def _owners(parts: list[Shard]) -> dict[int, _Batch]:
    """Each finished batch by its number: the shard that ran it, and its entry."""
    owner: dict[int, _Batch] = {}
    for directory, document in parts:
        for entry in document.get("batches", []):
            owner[int(entry["batch"])] = (directory, document, entry)
    return owner


def _labels(entries: list[BatchEntry]) -> Counter[str]:
    labels: Counter[str] = Counter()
    for entry in entries:
        labels.update(entry.get("labels", {}))
    return labels


def _divergence_of(finding: Finding) -> Divergence:
    """A failing finding with an artifact, as a divergence entry (its fields as they are)."""
    # a finding with an artifact holds a divergence's keys (tally._SAVED), its own beside them (Divergence says so)
    return cast(Divergence, dict(finding))


def _merged_fields(parts: list[Shard], entries: list[BatchEntry], total: int | None) -> Summary:
    """The merged run's options, build and counts: the shards' own where they agree (checked), summed or joined."""
    first_doc = parts[0][1]
    histories = sum(int(e["histories"]) for e in entries)
    steps = sum(int(e["steps"]) for e in entries)
    elapsed = max(float(d.get("elapsed_s", 0.0)) for _, d in parts)
    document: Summary = {
        "verdict": "",
        "seed": first_doc.get("seed"),
        "budget": first_doc.get("budget", {}),
        "shard": None,
        "shards": [str(directory) for directory, _ in sorted(parts, key=lambda p: shard_of(p[1]))],
        "restarts": first_doc.get("restarts"),
        "sizes": first_doc.get("sizes"),
        "replicas": first_doc.get("replicas"),
        "max_steps": first_doc.get("max_steps"),
        "workers": sum(int(d.get("workers", 1)) for _, d in parts),
        "histories": histories,
        "steps": steps,
        "elapsed_s": round(elapsed, 3),
        "compared_steps_per_s": round(steps / elapsed, 1) if elapsed else 0.0,
        "interrupted": total is None and any(d.get("interrupted") for _, d in parts),
        "divergences": [],
    }
    _add_build_fields(document, parts)
    document["known_findings"] = _joined(parts, "known_findings")
    document["known_findings_default"] = all(d.get("known_findings_default") for _, d in parts)
    return document


# a merged summary's keys in the order merges have always written them
_ORDER = ("verdict", "seed", "budget", "shard", "shards", "restarts", "sizes", "replicas", "max_steps", "workers",
          "database", "module", "lua_scripts", "module_sha256", "lua_scripts_dir", "lua_scripts_sha256",
          "module_given", "valkey", "valkey_requested", "histories", "steps", "elapsed_s", "compared_steps_per_s",
          "interrupted", "divergences", "findings", "known_findings", "known_findings_default",
          "stop_at_first")  # fmt: skip


def _joined(parts: list[Shard], key: str) -> str | None:
    """The shards' values of `key`: the one they share, else all of them, comma-separated."""
    documents: list[Mapping[str, object]] = [d for _, d in parts]
    values = sorted({str(d.get(key)) for d in documents if d.get(key) is not None})
    return None if not values else values[0] if len(values) == 1 else ", ".join(values)


def _add_build_fields(document: Summary, parts: list[Shard]) -> None:
    """The example database and the build under test (difftest/replay/build.py), each field joined as
    the paths are."""
    document["database"] = _joined(parts, "database")
    document["module"] = _joined(parts, "module")
    document["lua_scripts"] = _joined(parts, "lua_scripts")
    document["module_sha256"] = _joined(parts, "module_sha256")
    document["lua_scripts_dir"] = _joined(parts, "lua_scripts_dir")
    document["lua_scripts_sha256"] = _joined(parts, "lua_scripts_sha256")
    document["module_given"] = any(d.get("module_given") for _, d in parts)
    document["valkey"] = parts[0][1].get("valkey")
    document["valkey_requested"] = any(d.get("valkey_requested") for _, d in parts)


_Batch = tuple[Path, Summary, BatchEntry]  # a finished batch: its shard's directory, summary, entry


def _check_finished(owner: dict[int, _Batch], first: int | None, total: int | None, shard: Summary) -> None:
    """Every batch the merged run needs finished in some shard: up to the first divergent one, else
    all of an example budget's (a time budget's: those that ran); `shard`: a shard's summary."""
    needed = range(first + 1) if first is not None else range(total) if total is not None else range(0)
    lost = [b for b in needed if b not in owner]
    if lost:
        count = shard_of(shard)[1]
        where = sorted({f"{b % count + 1}/{count}" for b in lost})
        raise ShardMismatch(f"batch(es) {', '.join(map(str, lost[:8]))}{' ...' if len(lost) > 8 else ''} never "
                            f"finished (shard {', '.join(where)} interrupted?): run that shard again")  # fmt: skip


def _first_divergence(owner: _Batch, first: int, out: Path) -> list[Divergence]:
    """The first divergent batch's divergence, its artifact in its shard's directory, linked from `out`."""
    directory, document, _ = owner
    divergences = []
    for failure in document.get("divergences", []):
        if int(failure["batch"]) == first:
            failure = Divergence(**failure)
            artifact = directory / str(failure.get("link") or f"failures/batch-{first}")
            failure["artifact"] = str(artifact)
            failure["link"] = os.path.relpath(artifact, out)
            divergences.append(failure)
    return divergences


def _findings(parts: list[Shard], out: Path) -> list[Finding]:
    """The shards' distinct findings as one run's (difftest/findings/tally.py), each artifact found in
    its shard's directory and linked from `out`."""
    lists = []
    for directory, document in parts:
        entries = []
        for entry in document.get("findings", []):
            entry = Finding(**entry)
            if entry.get("link"):
                artifact = directory / str(entry["link"])
                entry["artifact"], entry["link"] = str(artifact), os.path.relpath(artifact, out)
            entries.append(entry)
        lists.append(entries)
    return tally.merged(lists)


def _progress(entries: list[BatchEntry]) -> list[ProgressPoint]:
    """The shards ran side by side: their time series joined as if they all started at once."""
    progress: list[ProgressPoint] = []
    done_h, done_s = 0, 0
    for number, entry in enumerate(sorted(entries, key=lambda e: (float(e["finished_s"]), e["batch"])), start=1):
        done_h, done_s = done_h + int(entry["histories"]), done_s + int(entry["steps"])
        progress.append({"t_s": float(entry["finished_s"]), "batches": number, "histories": done_h, "steps": done_s})
    return progress
