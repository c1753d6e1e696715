"""A campaign's reports under reports/<run-id>/: summary.json, coverage.txt and junit.xml."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from difftest import coverage
from difftest.campaign import CampaignResult


def summary(result: CampaignResult) -> dict[str, Any]:
    config = result.config
    labels = result.labels
    return {
        "seed": config.seed,
        "budget": {"examples": config.examples, "seconds": config.seconds},
        "workers": config.workers,
        "module": str(config.module),
        "lua_scripts": str(config.lua_scripts) if config.lua_scripts else None,
        "histories": result.histories,
        "steps": result.steps,
        "elapsed_s": round(result.elapsed_s, 3),
        "compared_steps_per_s": round(result.steps / result.elapsed_s, 1) if result.elapsed_s else 0.0,
        "interrupted": result.interrupted,
        "divergences": [failure.__dict__ for failure in result.failures],
        "coverage": {label: labels[label] for label in coverage.REQUIRED},
        "coverage_missing": coverage.missing(labels),
        "also_reached": {k: v for k, v in sorted(labels.items()) if k not in coverage.REQUIRED},
        "host": platform.node(),
    }


def junit(result: CampaignResult) -> str:
    """One test case per batch of histories (a divergence fails its batch), and one per
    coverage label (a label the campaign did not reach is skipped, not failed)."""
    cases = []
    for report in result.reports:
        for batch in report.batches:
            case = TestCase(f"batch-{batch}", classname="difftest.campaign.parity")
            if report.failure is not None and report.failure.batch == batch:
                case.add_failure_info(message=report.failure.reason, output=report.failure.artifact)
            cases.append(case)
    labels = result.labels
    for label in coverage.REQUIRED:
        case = TestCase(label, classname="difftest.campaign.coverage")
        if labels[label] == 0:
            case.add_skipped_info(message="not reached by this campaign")
        cases.append(case)
    return str(to_xml_report_string([TestSuite("difftest campaign", cases)]))


def write(result: CampaignResult, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps(summary(result), indent=2) + "\n")
    (directory / "coverage.txt").write_text(coverage.table(result.labels) + "\n")
    (directory / "junit.xml").write_text(junit(result))
