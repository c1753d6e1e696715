"""The report of a run (or of merged shards): outcomes.json, the Stryker mutation-testing-elements
JSON, JUnit XML and a self-contained HTML page, all from one outcomes document."""

from __future__ import annotations

import json
from pathlib import Path

from difftest.base.files import write_atomically
from mutants.catalogue import Mutant
from mutants.records import Document

# the formats live in their own modules; their names are read from here by the runner, the CLI and the tests
from mutants.report_document import (
    ALL_CAUGHT,
    CLEAN,
    DEFAULT_THRESHOLDS,
    HTML,
    INCOMPLETE,
    INTERRUPTED,
    JUNIT,
    NULL_RUN,
    OUTCOMES,
    RUNNING,
    SOME_NOT_CAUGHT,
    STRYKER,
    VOID,
    Thresholds,
    accepted,
    budget_text,
    is_canary,
    is_clean,
    passes,
    score,
    scored,
    subset,
    subset_text,
    summarise,
    upgraded,
)
from mutants.report_html import html_page
from mutants.report_junit import junit
from mutants.report_merge import MergeProblem, merge
from mutants.report_stryker import LANGUAGES, STRYKER_STATUS, Location, patch_location, stryker

__all__ = [
    "ALL_CAUGHT", "CLEAN", "DEFAULT_THRESHOLDS", "HTML", "INCOMPLETE", "INTERRUPTED", "JUNIT", "LANGUAGES",
    "NULL_RUN", "OUTCOMES", "RUNNING", "SOME_NOT_CAUGHT", "STRYKER", "STRYKER_STATUS", "VOID", "Location",
    "MergeProblem", "Thresholds", "accepted", "budget_text", "html_page", "is_canary", "is_clean", "junit", "merge",
    "passes", "patch_location", "score", "scored", "stryker", "subset", "subset_text", "summarise", "upgraded",
    "write_all", "write_outcomes",
]  # fmt: skip


def write_outcomes(directory: Path, document: Document) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / OUTCOMES, json.dumps(summarise(document), indent=2) + "\n")


def write_all(directory: Path, document: Document, catalogue: list[Mutant] | None = None) -> None:
    """outcomes.json, mutation-report.json, junit.xml and report.html under `directory`."""
    write_outcomes(directory, document)
    write_atomically(directory / STRYKER, json.dumps(stryker(document, catalogue), indent=2) + "\n")
    write_atomically(directory / JUNIT, junit(document))
    write_atomically(directory / HTML, html_page(document))
