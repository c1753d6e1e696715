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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import cast

from junit_xml import TestCase, TestSuite, to_xml_report_string

from difftest.base.files import write_atomically
from difftest.campaign.driver import BatchRecord, CampaignConfig, CampaignResult, Failure
from difftest.campaign.exampledb import describe
from difftest.coverage import labels as coverage
from difftest.findings import tally
from difftest.findings.entries import Divergence, Finding
from difftest.findings.known import KNOWN, KnownFindings
from difftest.report import html as html_report
from difftest.report.document import BatchEntry, ModelShare, Summary, ordered, parsed
from difftest.servers import valkeys

SUMMARY, COVERAGE, JUNIT, HTML = "summary.json", "coverage.txt", "junit.xml", "report.html"
# every verdict a summary can carry; "known": only findings the known-findings file accepts were met
VERDICTS = ("agree", "divergence", "known", "interrupted", "void")


def verdict(divergences: Sequence[object], interrupted: bool, histories: int | None = None,
            findings: list[Finding] | None = None) -> str:  # fmt: skip
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


def batch_entry(record: BatchRecord, started_at: float) -> BatchEntry:
    return {
        "batch": record.batch,
        "worker": record.worker,
        "histories": record.histories,
        "steps": record.steps,
        "diverged": record.diverged,
        "finished_s": round(max(0.0, record.finished_at - started_at), 3),
        "labels": dict(sorted(record.labels.items())),
    }


def add_coverage(document: Summary, labels: Counter[str]) -> None:
    """The summary's coverage keys, from the labels' counts."""
    document["coverage"] = {label: labels[label] for label in coverage.REQUIRED}
    document["coverage_missing"] = coverage.missing(labels)
    document["also_reached"] = {k: v for k, v in sorted(labels.items()) if k not in coverage.REQUIRED}
    # the steps the spec's model judged (the rest the pair alone): difftest/spec/model.py; its keys are ModelShare's
    document["model"] = cast(ModelShare, coverage.model_share(labels))


def labels_of(summary: Summary) -> Counter[str]:
    """Every label's count back from a summary (the required ones and the others)."""
    labels: Counter[str] = Counter()
    labels.update({k: v for k, v in summary.get("coverage", {}).items() if v})
    labels.update(summary.get("also_reached", {}))
    return labels


def summary(result: CampaignResult, known: KnownFindings | None = None, today: datetime.date | None = None,
            stale: Iterable[str] = ()) -> Summary:  # fmt: skip
    """The run's summary document; `known` (the known-findings file) tells each finding's status,
    `stale` names its entries whose history no longer reproduces."""
    saved = [_saved(failure, result.config.reports) for failure in result.failures]
    known = known or KnownFindings(None)
    findings = tally.distinct(saved, result.meetings, known, today or datetime.date.today(), stale)
    divergences = _divergences(saved, findings)
    document = _run_fields(result.config)
    document.update({
        "verdict": verdict(divergences, result.interrupted, result.histories, findings),
        "histories": result.histories,
        "steps": result.steps,
        "elapsed_s": round(result.elapsed_s, 3),
        "compared_steps_per_s": round(result.steps / result.elapsed_s, 1) if result.elapsed_s else 0.0,
        "interrupted": result.interrupted,
        "divergences": divergences,
        "findings": findings,
        "known_findings": str(known.path) if known.path else None,
        "stop_at_first": result.config.stop_at_first,
    })  # fmt: skip
    add_coverage(document, result.labels)
    document["host"] = platform.node()
    document["progress"] = result.progress
    document["batches"] = sorted((batch_entry(r, result.started_at) for r in result.records), key=lambda b: b["batch"])
    return ordered(document, _ORDER)


def _saved(failure: Failure, reports: Path) -> Divergence:
    """A saved failure as the summary holds it: its fields (why the artifact was not saved only when
    it was not), and the artifact relative to the run directory, which report.html links to."""
    entry: Divergence = {"batch": failure.batch, "reason": failure.reason, "steps": failure.steps,
                         "artifact": failure.artifact, "detail": failure.detail}  # fmt: skip
    if failure.unsaved:
        entry["unsaved"] = failure.unsaved
    if failure.history:
        entry["history"] = failure.history
    entry.update({"signature": failure.signature, "described": failure.described,
                  "link": os.path.relpath(failure.artifact, reports)})  # fmt: skip
    return entry


def _divergences(saved: list[Divergence], findings: list[Finding]) -> list[Divergence]:
    """The first artifact of each new (or expired) finding; a failure without a signature (a run of an
    older kind) is one too."""
    failing = {str(entry["signature"]) for entry in tally.failing(findings)}
    divergences, named = [], set()
    for entry in saved:
        name = entry.get("signature", "")
        if name and (name not in failing or name in named):
            continue
        divergences.append(entry)
        named.add(name)
    return divergences


def _run_fields(config: CampaignConfig) -> Summary:
    """What the run was asked to do and what it ran on: the seed, budget and options, the build."""
    index, count = config.shard
    # the verdict and the counts (placeholders here: the type requires them) are summary()'s
    document: Summary = {
        "verdict": "",
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
        "histories": 0,
        "steps": 0,
        "divergences": [],
    }
    # the build under test: paths and sha256 of the module and scripts (difftest/replay/build.py), whose
    # keys are a Summary's
    document.update(cast(Summary, config.build or {}))
    return document


# summary.json's keys in the order a run has always written them (the build's keys after valkey_requested)
_ORDER = ("verdict", "seed", "budget", "shard", "restarts", "sizes", "replicas", "max_steps", "workers", "database",
          "module", "lua_scripts", "valkey", "valkey_requested", "module_sha256", "module_given", "lua_scripts_dir",
          "lua_scripts_sha256", "histories", "steps", "elapsed_s", "compared_steps_per_s", "interrupted",
          "divergences")  # fmt: skip


def junit(document: Summary) -> str:
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


def write_document(document: Summary, directory: Path) -> None:
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
    document = parsed(json.loads((directory / SUMMARY).read_text()))
    write_atomically(directory / HTML, html_report.render(document))
    return directory / HTML
