"""The nightly matrix run here: every campaign and mutant shard job's commands, then the merge job's, as
the workflow writes them (the inputs made tiny), on real servers; the merged campaign equals the
unsharded run, the mutant merge scores every mutant, and the job summary says so.

What differs from GitHub: no `make setup` (this checkout is set up), `--backend local` for
`--backend docker` (the same servers, without building images), `--workers 1`, and the mutant shards
limited to two Lua mutants on a small budget; artifacts are copied where download-artifact puts them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from difftest.servers.valkeys import NEWEST
from tests.test_shards import comparable
from tests.workflow import ROOT, context_for, input_defaults, job_commands, load, matrix_legs, plan_outputs

SEED = "20261204"
INPUTS = {"examples": "80", "campaign_shards": "2", "mutant_shards": "2", "generated_shards": "1", "valkey": NEWEST,
          "seed": SEED}  # fmt: skip
# both caught within 60 histories; lua-complete-double-counts was not, once the generator also spent
# steps on the classes of issue 18 (218 histories at the catalogue's default budget)
MUTANTS = ["lua-enqueue-overwrites-duplicates", "lua-promote-uses-now"]
# the generated set's leg: two Lua operator mutants, each caught in its first histories
GENERATED = ["lua-claim-del-hset-1", "lua-enqueue-del-zadd-1"]


def workspace(path: Path) -> Path:
    """A job's checkout: the venv where the workflow's commands expect it."""
    path.mkdir(parents=True)
    (path / ".venv").symlink_to(ROOT / ".venv")
    return path


def shell(command: str, env: dict[str, str], cwd: Path, summary: Path) -> subprocess.CompletedProcess[str]:
    """One `run:` line through bash, as the runner does (quotes, globs, $VARS), with `python` the venv's
    (setup-python's on GitHub) and the checkout importable (the runner's working directory)."""
    python_dir = cwd / ".bin"
    python_dir.mkdir(exist_ok=True)
    if not (python_dir / "python").exists():
        (python_dir / "python").symlink_to(ROOT / ".venv" / "bin" / "python")
    full = {**os.environ, **env, "PATH": f"{python_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "GITHUB_STEP_SUMMARY": str(summary)}  # fmt: skip
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=full, capture_output=True, text=True, timeout=900)


def run_job(name: str, leg: int, cwd: Path, summary: Path, extra: dict[str, str]) -> list[tuple[str, int]]:
    """Every command of one matrix leg of a job (make setup skipped); (command, exit code) each."""
    codes = []
    for step, command, env in job_commands(load(), name, INPUTS, leg):
        if command == "make setup":
            continue
        assert "always()" in str(step.get("if", "always()")) or "cancelled()" in str(step.get("if", "cancelled()"))
        command = command.replace("--backend docker", "--backend local")
        for prefix, tail in extra.items():
            if command.startswith(prefix):
                command = f"{command} {tail}"
        done = shell(command, env, cwd, summary)
        codes.append((command, done.returncode))
        assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return codes


def artifact_name(job: str, matrix: dict[str, str]) -> str:
    step = next(s for s in load()["jobs"][job]["steps"] if "upload-artifact" in str(s.get("uses")))
    return str(step["with"]["name"]).replace("${{ matrix.name }}", matrix["name"])


@pytest.mark.timeout(1500)  # the generated mutants' leg adds a null run, a canary and cargo-mutants' listing
def test_the_workflows_shard_and_merge_commands_give_the_unsharded_verdict(tmp_path: Path) -> None:
    document = load()
    inputs = {**input_defaults(document), **INPUTS}
    outputs = plan_outputs(document, inputs)
    summary = tmp_path / "step-summary.md"
    # the plan job's own command gives the matrices the other jobs read
    ((_, plan_command, plan_env),) = job_commands(document, "plan", INPUTS)
    planned = shell(plan_command, plan_env, workspace(tmp_path / "plan"), summary)
    assert planned.returncode == 0, planned.stderr
    assert dict(line.split("=", 1) for line in planned.stdout.splitlines()) == outputs
    merge_ws = workspace(tmp_path / "merge")
    for job, kind in (("campaign", "campaign-shards"), ("mutants", "mutant-shards")):
        legs = matrix_legs(document["jobs"][job], context_for(document, inputs, outputs, {}))
        assert [leg["shard"] for leg in legs] == (["1/2", "2/2"] if job == "campaign" else ["1/2", "2/2", "1/1"])
        for index, leg in enumerate(legs):
            generated = leg.get("set") == "generated"
            small = f"--only {' '.join(GENERATED if generated else MUTANTS)} --examples 60 --jobs 1"
            extra = {".venv/bin/difftest run": "--workers 1", ".venv/bin/difftest mutants --shard": small}
            cwd = workspace(tmp_path / f"{job}-{leg['name']}")
            run_job(job, index, cwd, summary, extra)
            # upload-artifact of reports/, download-artifact into reports/<kind>/<artifact name>/
            where = "generated-shards" if generated else kind
            shutil.copytree(cwd / "reports", merge_ws / "reports" / where / artifact_name(job, leg))
    run_job("merge", 0, merge_ws, summary, {})
    merged = json.loads((merge_ws / "reports" / "campaign" / "summary.json").read_text())
    # the unsharded run of the same seed and budget, on the same Valkey
    whole = tmp_path / "whole"
    argv = ["run", "--valkey", NEWEST, "--seed", SEED, "--examples", INPUTS["examples"], "--workers", "1",
            "--no-database", "--reports", str(whole)]  # fmt: skip
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "difftest"), *argv], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = whole.iterdir()
    unsharded: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    assert comparable(merged) == comparable(unsharded)
    assert merged["valkey"] == unsharded["valkey"] == NEWEST and len(merged["shards"]) == 2
    mutation = json.loads((merge_ws / "reports" / "mutants" / "outcomes.json").read_text())
    assert mutation["verdict"] == "all caught" and set(mutation["chosen"]) == set(MUTANTS)
    generated = json.loads((merge_ws / "reports" / "generated" / "outcomes.json").read_text())
    assert generated["verdict"] == "all caught" and set(generated["chosen"]) == set(GENERATED)
    assert generated["catalogue"] == "generated" and (merge_ws / "reports" / "generated" / "report.html").is_file()
    text = summary.read_text()
    assert f"Valkey {NEWEST}" in text and "**agree**" in text and f"{merged['histories']:,}" in text
    assert "**all caught**" in text and "mutation score 2/2" in text and "unreached labels" in text
    assert (merge_ws / "reports" / "campaign" / "report.html").is_file()


def test_a_missing_shard_or_a_divergence_fails_the_summary(tmp_path: Path) -> None:
    from difftest.report.nightly import main

    summary = tmp_path / "summary.md"
    os.environ["GITHUB_STEP_SUMMARY"] = str(summary)
    try:
        # no merged report at all (the merge refused a missing shard): the step fails and says so
        assert main(["summary", "--campaign", str(tmp_path / "campaign"), "--mutants", str(tmp_path / "m")]) == 1
        assert "no merged report" in summary.read_text() and "no merged mutation report" in summary.read_text()
        (tmp_path / "campaign").mkdir()
        failure = {"batch": 3, "steps": 4, "reason": "reply differs", "link": "../s/failures/batch-3"}
        (tmp_path / "campaign" / "summary.json").write_text(json.dumps(
            {"verdict": "divergence", "seed": 1, "budget": {"examples": 80}, "histories": 7, "steps": 9,
             "divergences": [failure], "coverage_missing": ["sweep:die"], "valkey": NEWEST}))  # fmt: skip
        assert main(["summary", "--campaign", str(tmp_path / "campaign")]) == 1
        text = summary.read_text()
        assert "**divergence**" in text and "reply differs" in text and "`sweep:die`" in text
    finally:
        del os.environ["GITHUB_STEP_SUMMARY"]


def test_the_summary_follows_the_mutation_gate_and_marks_a_subset(tmp_path: Path) -> None:
    from difftest.report.nightly import mutants_section

    (tmp_path / "m").mkdir()
    document = {"verdict": "some not caught", "passed": True, "thresholds": {"high": 80, "low": 60, "break": 50},
                "score": {"caught": 3, "viable": 4, "percent": 75.0},
                "subset": {"ran": 4, "of": 61, "left_out": ["lua-x", "native-y"]},
                "outcomes": [{"id": "null-run", "status": "clean"},
                             {"id": "native-z", "status": "missed"}]}  # fmt: skip
    (tmp_path / "m" / "outcomes.json").write_text(json.dumps(document))
    lines, good = mutants_section(tmp_path / "m", None)
    text = "\n".join(lines)
    assert good and "break threshold 50 %: passed" in text and "`native-z`: missed" in text
    assert "a subset score: 4 of 61 mutants ran" in text and "`lua-x`, `native-y`" in text
    (tmp_path / "m" / "outcomes.json").write_text(json.dumps({**document, "passed": False}))
    assert mutants_section(tmp_path / "m", None)[1] is False
    # a report from before the gate: good only when every mutant was caught
    older = {k: v for k, v in document.items() if k not in ("passed", "thresholds", "subset")}
    (tmp_path / "m" / "outcomes.json").write_text(json.dumps(older))
    assert mutants_section(tmp_path / "m", None)[1] is False
