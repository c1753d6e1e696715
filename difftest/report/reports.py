"""A campaign's reports under reports/<run-id>/: summary.json, coverage.txt, junit.xml and report.html.

Everything is derived from one plain document, the summary: a run builds it from its result, a
merge of shards (difftest/report/shards.py) from the shards' summaries, and `difftest report` re-renders
the page from the summary.json on disk.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from difftest.base.files import write_atomically
from difftest.campaign.driver import BatchRecord, CampaignResult
from difftest.campaign.exampledb import describe
from difftest.findings import tally
from difftest.findings.known import KNOWN, KnownFindings
from difftest.replay import labels as coverage
from difftest.report import html as html_report
from difftest.servers import valkeys

SUMMARY, COVERAGE, JUNIT, HTML = "summary.json", "coverage.txt", "junit.xml", "report.html"
# every verdict a summary can carry; "known": only findings the known-findings file accepts were met
VERDICTS = ("agree", "divergence", "known", "interrupted", "void")


def verdict(divergences: list[Any], interrupted: bool, histories: int | None = None,
            findings: list[dict[str, Any]] | None = None) -> str:  # fmt: skip
    """The campaign's verdict as `difftest run` exits on it: a divergence outranks an interruption;
    a campaign that compared no history is void, not "agree" (it tested nothing); one that met only
    accepted findings is "known" (never "agree": the executors did diverge)."""
    if divergences:
        return "divergence"
    if interrupted:
        return "interrupted"
    if histories == 0:
        return "void"
    return "known" if tally.counts(findings or [])[KNOWN] else "agree"


def batch_entry(record: BatchRecord, started_at: float) -> dict[str, Any]:
    return {
        "batch": record.batch,
        "worker": record.worker,
        "histories": record.histories,
        "steps": record.steps,
        "diverged": record.diverged,
        "finished_s": round(max(0.0, record.finished_at - started_at), 3),
        "labels": dict(sorted(record.labels.items())),
    }


def coverage_fields(labels: Counter[str]) -> dict[str, Any]:
    """The summary's coverage keys, from the labels' counts."""
    return {
        "coverage": {label: labels[label] for label in coverage.REQUIRED},
        "coverage_missing": coverage.missing(labels),
        "also_reached": {k: v for k, v in sorted(labels.items()) if k not in coverage.REQUIRED},
        # the steps the spec's model judged (the rest the pair alone): difftest/spec/model.py
        "model": coverage.model_share(labels),
    }


def labels_of(summary: dict[str, Any]) -> Counter[str]:
    """Every label's count back from a summary (the required ones and the others)."""
    labels: Counter[str] = Counter()
    labels.update({k: v for k, v in summary.get("coverage", {}).items() if v})
    labels.update(summary.get("also_reached", {}))
    return labels


def summary(result: CampaignResult, known: KnownFindings | None = None, today: datetime.date | None = None,
            stale: Iterable[str] = ()) -> dict[str, Any]:  # fmt: skip
    """The run's summary document; `known` (the known-findings file) tells each finding's status,
    `stale` names its entries whose history no longer reproduces."""
    config = result.config
    saved = []
    for failure in result.failures:
        entry = {k: v for k, v in failure.__dict__.items() if v != "" or k not in ("unsaved", "history")}
        # the artifact relative to the run directory: what report.html links to
        entry["link"] = os.path.relpath(failure.artifact, config.reports)
        saved.append(entry)
    known = known or KnownFindings(None)
    findings = tally.distinct(saved, result.meetings, known, today or datetime.date.today(), stale)
    failing = {str(entry["signature"]) for entry in tally.failing(findings)}
    # a divergence: the first artifact of each new (or expired) finding; a failure without a signature
    # (a run of an older kind) is one too
    divergences, named = [], set()
    for entry in saved:
        name = entry.get("signature", "")
        if name and (name not in failing or name in named):
            continue
        divergences.append(entry)
        named.add(name)
    index, count = config.shard
    return {
        "verdict": verdict(divergences, result.interrupted, result.histories, findings),
        "seed": config.seed,
        "budget": {"examples": config.examples, "seconds": config.seconds},
        "shard": {"index": index, "count": count} if count > 1 else None,
        "restarts": config.restarts,
        "sizes": config.sizes,
        "replicas": config.replicas,
        "max_steps": config.max_steps,
        "workers": config.workers,
        # the example database replays stored failures first: part of what reproduces a run
        "database": describe(config.database) if config.database else None,
        "module": str(config.module),
        "lua_scripts": str(config.lua_scripts) if config.lua_scripts else None,
        # the servers' Valkey version (--valkey's, or the binary's own); an attached pair's is its images'
        "valkey": valkeys.version_in_use() if config.backend in ("local", "docker") else None,
        "valkey_requested": bool(os.environ.get(valkeys.ENVIRONMENT)),
        # the build under test: paths and sha256 of the module and scripts (difftest/replay/build.py)
        **(config.build or {}),
        "histories": result.histories,
        "steps": result.steps,
        "elapsed_s": round(result.elapsed_s, 3),
        "compared_steps_per_s": round(result.steps / result.elapsed_s, 1) if result.elapsed_s else 0.0,
        "interrupted": result.interrupted,
        "divergences": divergences,
        "findings": findings,
        "known_findings": str(known.path) if known.path else None,
        "stop_at_first": config.stop_at_first,
        **coverage_fields(result.labels),
        "host": platform.node(),
        "progress": result.progress,
        "batches": sorted((batch_entry(r, result.started_at) for r in result.records), key=lambda b: b["batch"]),
    }


def junit(document: dict[str, Any]) -> str:
    """One test case per finished batch of histories (a divergence fails its batch), one per distinct
    finding (new or expired: failed; known, stale, not met: skipped, with why), and one per coverage
    label (a label the campaign did not reach is skipped, not failed)."""
    failures = {int(f["batch"]): f for f in document.get("divergences", [])}
    cases = []
    for entry in document.get("batches", []):
        batch = int(entry["batch"])
        case = TestCase(f"batch-{batch}", classname="difftest.campaign.driver.parity", elapsed_sec=None,
                        stdout=f"histories: {entry['histories']}, steps: {entry['steps']}")  # fmt: skip
        if batch in failures:
            case.add_failure_info(message=failures[batch]["reason"], output=failures[batch]["artifact"])
        cases.append(case)
    for finding in document.get("findings", []):
        case = TestCase(f"divergence:{finding['signature']}", classname="difftest.findings",
                        stdout=f"met {finding.get('count', 0)} time(s); {finding.get('described', '')}")  # fmt: skip
        if finding["status"] in tally.FAILING:
            case.add_failure_info(message=f"{finding['status']}: {finding.get('reason', '')}",
                                  output=str(finding.get("artifact", "")))  # fmt: skip
        else:
            why = f" ({finding['known_reason']}, until {finding['expires']})" if finding.get("known_reason") else ""
            case.add_skipped_info(message=f"{finding['status']}{why}")
        cases.append(case)
    for label, count in document.get("coverage", {}).items():
        case = TestCase(label, classname="difftest.campaign.driver.coverage")
        if count == 0:
            case.add_skipped_info(message="not reached by this campaign")
        cases.append(case)
    properties = {"seed": str(document.get("seed")), "verdict": html_report.verdict_of(document)}
    properties.update({f"budget.{k}": str(v) for k, v in document.get("budget", {}).items()})
    return str(to_xml_report_string([TestSuite("difftest campaign", cases, properties=properties)]))


def write_document(document: dict[str, Any], directory: Path) -> None:
    """summary.json, coverage.txt, junit.xml and report.html of one summary, under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    # each whole or not at all (a full disk leaves no half file); summary.json first, the others derive from it
    write_atomically(directory / SUMMARY, json.dumps(document, indent=2) + "\n")
    write_atomically(directory / COVERAGE, coverage.table(labels_of(document)) + "\n")
    write_atomically(directory / JUNIT, junit(document))
    write_atomically(directory / HTML, html_report.render(document))


def write(result: CampaignResult, directory: Path) -> None:
    write_document(summary(result), directory)


def rerender(directory: Path) -> Path:
    """report.html again from the directory's summary.json (a run's or a merge's); its path."""
    document = json.loads((directory / SUMMARY).read_text())
    write_atomically(directory / HTML, html_report.render(document))
    return directory / HTML
