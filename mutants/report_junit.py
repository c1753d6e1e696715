"""The JUnit XML of an outcomes document: one test case per record."""

from __future__ import annotations

from junit_xml import TestCase, TestSuite, to_xml_report_string

from mutants.records import Document, Record
from mutants.report_document import CLEAN, NULL_RUN, is_canary, subset_text, upgraded
from mutants.score import CAUGHT, EQUIVALENT, ERROR, UNVIABLE


def junit(document: Document) -> str:
    """One test case per record: the null run passes with no divergence, the canary and every
    mutant pass when caught; a missed or timed-out mutant is a failure, unviable or error an error."""
    cases = []
    document = upgraded(document)
    for record in document["outcomes"]:
        rid, status = record["id"], record["status"]
        classname = "mutants.null-run" if rid == NULL_RUN else f"mutants.{record['executor']}"
        case = TestCase(rid, classname=classname, elapsed_sec=float(record.get("campaign_s", 0.0)),
                        stdout=_describe(record))  # fmt: skip
        reason = record.get("reason", "")
        if rid == NULL_RUN:
            if status != CLEAN:
                case.add_failure_info(f"the null run was {status}: the report is void", reason or None)
        elif status == EQUIVALENT or (status == UNVIABLE and record.get("triage")):
            case.add_skipped_info(f"{status}: triage: {record.get('triage', '')}")
        elif status in (UNVIABLE, ERROR):
            case.add_error_info(f"{status}: {reason[:200]}", reason or None)
        elif status != CAUGHT:
            what = "the canary was not caught: the report is void" if is_canary(record) else f"mutant {status}"
            case.add_failure_info(what, reason or f"no divergence in {record.get('histories', 0)} histories")
        cases.append(case)
    suite = TestSuite("mutants", cases, properties=_properties(document))
    return str(to_xml_report_string([suite]))


def _properties(document: Document) -> dict[str, str]:
    found = {f"budget.{k}": str(v) for k, v in (document.get("budget") or {}).items()}
    found["verdict"] = str(document.get("verdict"))
    found["passed"] = str(document.get("passed"))
    found.update({f"threshold.{k}": str(v) for k, v in (document.get("thresholds") or {}).items()})
    part = document.get("subset")
    if part:
        found["subset"] = subset_text(part)
    return found


def _describe(record: Record) -> str:
    parts = [f"status: {record['status']}", f"restarts: {'on' if record.get('restarts', True) else 'off'}",
             f"histories: {record.get('histories', 0)}", f"steps: {record.get('steps', 0)}"]  # fmt: skip
    if record.get("caught_by"):
        parts.append(f"caught by: {record['caught_by']}")
    if record.get("artifact"):
        parts.append(f"artifact: {record['artifact']}")
    return "\n".join(parts)
