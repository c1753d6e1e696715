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
from tests.workflow import (
    ROOT,
    context_for,
    input_defaults,
    job_commands,
    load,
    matrix_legs,
    plan_outputs,
    substitute,
)

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
    """Every command of one matrix leg of a job (make setup skipped; the first night: no earlier run
    kept anything, so the steps that look for one and use it are skipped); (command, exit code) each."""
    codes = []
    for step, command, env in job_commands(load(), name, INPUTS, leg):
        if command == "make setup" or step.get("id") == "previous" or "steps.previous.outputs" in str(step.get("if")):
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


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.subprocess
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
            # the workflow's mechanics, not production's size (drawn, it is half of a campaign's steps)
            chosen = " ".join(GENERATED if generated else MUTANTS)
            small = f"--only {chosen} --examples 60 --jobs 1 --no-production-size"
            extra = {".venv/bin/difftest run": "--workers 1 --no-production-size",
                     ".venv/bin/difftest mutants --shard": small}  # fmt: skip
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
            "--no-production-size", "--no-database", "--reports", str(whole)]  # fmt: skip
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


# ---- the fuzz job: the corpus from the night before, through GitHub's artifacts ------------------------


def previous(api: str, artifact: str, output: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "GITHUB_API_URL": api, "GITHUB_REPOSITORY": "owner/difftest", "GITHUB_OUTPUT": str(output),
            "PYTHONPATH": str(ROOT), **env}  # fmt: skip
    return subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "difftest.report.nightly", "previous",
                           "--artifact", artifact], env=full, capture_output=True, text=True, timeout=120)  # fmt: skip


def artifact(number: int, name: str, run: int, day: int, expired: bool = False) -> dict[str, Any]:
    """One entry of GitHub's artifact listing (GET /repos/{owner}/{repo}/actions/artifacts)."""
    return {"id": number, "name": name, "expired": expired, "created_at": f"2026-12-{day:02d}T03:00:00Z",
            "workflow_run": {"id": run, "head_branch": "main"}}  # fmt: skip


@pytest.mark.subprocess
def test_previous_names_the_newest_run_that_keeps_the_artifact_and_fails_when_github_does_not_answer(
    tmp_path: Path,
) -> None:
    from difftest.report.nightly import EXIT_UNAVAILABLE, EXIT_USAGE
    from tests.workflow import artifacts_api

    corpus = "fuzz-corpus-9.1.2"
    listing = {"artifacts": [artifact(11, corpus, 103, 3), artifact(12, corpus, 105, 5, expired=True),
                             artifact(13, corpus, 104, 4), artifact(14, "fuzz-corpus-9.1.0", 106, 6)]}  # fmt: skip
    output = tmp_path / "github-output"
    with artifacts_api(listing) as api:
        done = previous(api, "fuzz-corpus-9.1.2", output)
        assert done.returncode == 0 and done.stdout == "run-id=104\n", done.stderr  # the newest not expired
        assert output.read_text() == "run-id=104\n"
        done = previous(api, "fuzz-corpus-7.2.4", output)  # the first night: none
        assert done.returncode == 0 and done.stdout == "run-id=\n" and "starts without it" in done.stderr
        done = previous(api, "fuzz-corpus-9.1.2", output, GITHUB_REPOSITORY="")
        assert done.returncode == EXIT_USAGE and "--repository" in done.stderr
    with artifacts_api(None, status=503) as api:
        output.unlink()
        done = previous(api, "fuzz-corpus-9.1.2", output)
        assert done.returncode == EXIT_UNAVAILABLE and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not output.exists() and done.stdout == ""  # no run-id at all: the job stops there


@pytest.mark.servers
@pytest.mark.build
@pytest.mark.subprocess
@pytest.mark.timeout(900)  # the fuzz command runs the coverage build, which a fresh clone builds first
def test_the_fuzz_jobs_commands_carry_the_corpus_to_the_next_night(tmp_path: Path) -> None:
    """Two nights of the fuzz job's steps as written (make setup skipped; download-artifact and
    upload-artifact done by copying, GitHub's artifact listing by a stand-in on a local port)."""
    from tests.workflow import artifacts_api, commands, environment

    document = load()
    inputs = {**input_defaults(document), **INPUTS, "fuzz_seconds": "20"}
    job = document["jobs"]["fuzz"]
    context = context_for(document, inputs, plan_outputs(document, inputs), {})
    context["matrix"] = matrix_legs(job, context)[0]
    listing: dict[str, Any] = {"artifacts": []}
    kept: dict[int, Path] = {}  # run id -> its uploaded corpus artifact
    printed: dict[int, list[str]] = {1: [], 2: []}
    with artifacts_api(listing) as api:
        for night in (1, 2):
            cwd = workspace(tmp_path / f"night{night}")
            outputs: dict[str, str] = {}
            for step in job["steps"]:
                guard = str(step.get("if", ""))
                if "steps.previous.outputs.run-id != ''" in guard and not outputs.get("run-id"):
                    continue  # download and import: only when a run kept a corpus
                uses = str(step.get("uses", ""))
                if uses.startswith("actions/download-artifact@"):
                    shutil.copytree(kept[int(outputs["run-id"])], cwd / step["with"]["path"])
                    continue
                if uses.startswith("actions/upload-artifact@") and "corpus" in step["with"]["name"]:
                    kept[night] = tmp_path / f"artifact-{night}"
                    shutil.copytree(cwd / step["with"]["path"], kept[night])
                    name = substitute(step["with"]["name"], context)
                    listing["artifacts"].append(artifact(night, name, night, night))
                    continue
                if "run" not in step:
                    continue
                env = {**environment(document, job, step, context), "GITHUB_API_URL": api,
                       "GITHUB_REPOSITORY": "owner/difftest", "GITHUB_OUTPUT": str(cwd / "github-output")}  # fmt: skip
                for command in commands(step["run"]):
                    if command == "make setup":
                        continue
                    done = shell(command, env, cwd, tmp_path / "summary.md")
                    assert done.returncode == 0, (
                        f"night {night}: {command}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
                    )
                    printed[night].append(done.stdout)
                if step.get("id") == "previous":
                    outputs = dict(line.split("=", 1) for line in (cwd / "github-output").read_text().splitlines())
    first = corpus_digests(kept[1] / "corpus.jsonl")
    second = corpus_digests(kept[2] / "corpus.jsonl")
    assert first and first <= second  # the second night saved the first night's corpus with its own
    text = "\n".join(printed[2])
    assert "run-id=1" in text and f"{len(first):,} new histories, 0 already held" in text
    assert "run-id=\n" in "\n".join(printed[1])


def corpus_digests(path: Path) -> set[str]:
    from difftest.fuzz.corpusfile import digest_of

    return {digest_of(json.loads(line)["history"]) for line in path.read_text().splitlines()[1:]}


def test_carry_brings_the_night_befores_history_whole_and_never_over_tonights(tmp_path: Path) -> None:
    from difftest.report.nightly import EXIT_OK, EXIT_USAGE, main

    kept = tmp_path / "previous" / "mutants-scores.jsonl"
    tonight = tmp_path / "reports" / "mutants-scores.jsonl"
    # the first night: nothing kept, nothing written (the merges start the file)
    assert main(["carry", str(kept), str(tonight)]) == EXIT_OK and not tonight.exists()
    kept.parent.mkdir()
    kept.write_text('{"score": 1}\n{"score": 2}\n')
    assert main(["carry", str(kept), str(tonight)]) == EXIT_OK
    assert tonight.read_text() == kept.read_text() and not list(tonight.parent.glob(".*.tmp"))
    tonight.write_text('{"score": 3}\n')  # tonight's run wrote it already: never replaced
    assert main(["carry", str(kept), str(tonight)]) == EXIT_USAGE and tonight.read_text() == '{"score": 3}\n'
