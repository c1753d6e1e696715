"""The nightly workflow cannot drift: its `run:` lines are real make targets or difftest commands, as in docs/ci.md."""

from __future__ import annotations

import contextlib
import fnmatch
import io
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from difftest.cli.main import build_parser, subcommands
from tests.workflow import ROOT, WORKFLOW, every_command, input_defaults, job_commands, load, triggers

DIFFTEST = ".venv/bin/difftest"
# the nightly's own helper (standard library only: the plan job runs it before any set-up)
NIGHTLY = ("python", "-m", "difftest.report.nightly")


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(m.group(1) for m in re.finditer(r"^([A-Za-z0-9_-]+)\s*:", text, re.MULTILINE))


@cache
def mutants_options() -> frozenset[str]:
    """The options the catalogue runner itself knows, read from its own --help."""
    from mutants.__main__ import main as mutants_main

    out = io.StringIO()
    # whether the runner returns from --help or leaves through argparse's exit, its text is the same
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        mutants_main(["--help"])
    assert "--reports" in out.getvalue(), "python -m mutants --help printed no options"
    return frozenset(re.findall(r"--[a-z][a-z-]*", out.getvalue()))


def check(command: str) -> None:
    """Raise AssertionError unless the command is `make TARGET...` or a difftest command that parses."""
    words = shlex.split(command)
    if words[0] == "make":
        unknown = [t for t in words[1:] if not t.startswith("-") and t not in make_targets()]
        assert words[1:] and not unknown, f"{command!r}: no such Makefile target {unknown}"
        return
    if tuple(words[:4]) == (*NIGHTLY, "known-ok"):  # a command run with exit 6 read as a pass: check it
        assert words[4:], f"{command!r}: known-ok runs a command"
        check(shlex.join(words[4:]))
        return
    if tuple(words[:3]) == NIGHTLY:  # parsed by its own parser, which exits 2 on what it does not accept
        from difftest.report.nightly import build_parser as nightly_parser

        try:
            nightly_parser().parse_args(words[3:])
        except SystemExit:
            raise AssertionError(
                f"{command!r}: python -m difftest.report.nightly does not take these arguments"
            ) from None
        return
    assert words[0] == DIFFTEST, (
        f"{command!r}: the workflow runs Makefile targets, {DIFFTEST} and python -m difftest.report.nightly only"
    )
    arguments = words[1:]
    if arguments[:1] == ["mutants"]:  # the runner parses these itself (difftest passes them on)
        assert "mutants" in subcommands(build_parser())
        if arguments[1:2] == ["merge"]:
            assert len(arguments) >= 4, f"{command!r}: merge OUT DIR..."
            return
        unknown = [w for w in arguments[1:] if w.startswith("--") and w.split("=")[0] not in mutants_options()]
        assert not unknown, f"{command!r}: python -m mutants has no option {unknown}"
        return
    try:
        build_parser().parse_args(arguments)
    except SystemExit:
        raise AssertionError(f"{command!r}: difftest does not accept these arguments") from None


def workflow_commands() -> list[tuple[str, str]]:
    """(as written, as run) for every command of every job (its matrix's first leg, the inputs' defaults)."""
    return every_command(load())


def test_the_workflow_runs_nightly_and_on_demand() -> None:
    on = triggers(load())
    assert "workflow_dispatch" in on
    assert on["schedule"] and all(re.fullmatch(r"(\S+\s+){4}\S+", entry["cron"]) for entry in on["schedule"])


def test_every_command_names_a_real_target_or_difftest_command() -> None:
    found = workflow_commands()
    assert found
    for _, command in found:
        check(command)
    run = [shlex.split(c) for _, c in found]
    assert ["make", "setup"] in run
    campaign = next(w for w in run if w[1:2] == ["run"])
    assert "--backend" in campaign and campaign[campaign.index("--backend") + 1] == "docker"
    # an example budget per shard: a --seconds budget would merge as a union of batches, not the unsharded run
    assert "--examples" in campaign and "--seconds" not in campaign and "--shard" in campaign
    assert "--valkey" in campaign and "--no-database" in campaign
    assert any(w[1:2] == ["mutants"] and "--shard" in w for w in run)
    assert any(w[1:3] == ["mutants", "merge"] for w in run) and any(w[1:2] == ["merge"] for w in run)
    assert any(tuple(w[:4]) == (*NIGHTLY, "summary") for w in run)


def test_the_checker_itself_rejects_what_is_not_real() -> None:
    for bad in (
        "make no-such-target",
        f"{DIFFTEST} run --no-such-option",
        f"{DIFFTEST} run --seconds soon",
        f"{DIFFTEST} no-such-command",
        f"{DIFFTEST} mutants --no-such-option 1",
        "pytest tests",
        "python -m difftest.report.nightly plan --campaign-shards 0 --mutant-shards 1 --valkey 9.1.2",
        "python -m difftest.report.nightly plan --campaign-shards 2 --mutant-shards 1 --valkey 7.2.0",
        "python -m difftest.other plan",
    ):
        with pytest.raises(AssertionError):
            check(bad)
    check(f"{DIFFTEST} mutants merge out shard-1 shard-2")


def test_reports_are_uploaded_always_and_the_mutants_run_after_a_divergence() -> None:
    document = load()
    for name in ("campaign", "mutants", "merge"):
        steps = document["jobs"][name]["steps"]
        uploads = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
        upload = next(s for s in uploads if s["with"]["path"].rstrip("/") == "reports")
        assert "always()" in str(upload.get("if", "")), name
    # the mutant shards do not wait for the campaign, and the merge runs whatever the shards found
    assert "campaign" not in str(document["jobs"]["mutants"].get("needs", ""))
    assert "cancelled()" in str(document["jobs"]["merge"].get("if", ""))
    merge_steps = document["jobs"]["merge"]["steps"]
    mutants = next(s for s in merge_steps if DIFFTEST + " mutants merge" in str(s.get("run", "")))
    summary = next(s for s in merge_steps if "difftest.report.nightly summary" in str(s.get("run", "")))
    for step in (mutants, summary):  # after a divergence (the campaign merge failed) too
        assert "cancelled()" in str(step.get("if", "")) or "always()" in str(step.get("if", ""))
    # a failing command fails its step: nothing swallows the exit code
    for job in document["jobs"].values():
        for step in job["steps"]:
            assert "|| true" not in str(step.get("run", "")) and not step.get("continue-on-error", False)


def test_the_matrix_jobs_their_needs_and_artifact_names() -> None:
    document = load()
    jobs = document["jobs"]
    assert set(jobs) == {"plan", "campaign", "mutants", "fuzz", "merge"}
    assert jobs["campaign"]["needs"] == "plan" and jobs["mutants"]["needs"] == "plan"
    assert set(jobs["merge"]["needs"]) == {"plan", "campaign", "mutants"}
    assert set(jobs["plan"]["outputs"]) == {"seed", "campaign", "mutants", "valkey"}
    for name, output in (("campaign", "campaign"), ("mutants", "mutants"), ("merge", "valkey")):
        assert jobs[name]["strategy"]["matrix"] == f"${{{{ fromJSON(needs.plan.outputs.{output}) }}}}"
        assert jobs[name]["strategy"]["fail-fast"] is False  # one failing shard does not cancel the others

    def uploaded(job: str) -> str:
        """The name of the job's artifact of reports/ (the merge also uploads its score history apart)."""
        steps = [s for s in jobs[job]["steps"] if "upload-artifact" in str(s.get("uses"))]
        return str(next(s for s in steps if s["with"]["path"].rstrip("/") == "reports")["with"]["name"])

    def downloaded(pattern_of: str) -> str:
        steps = [s for s in jobs["merge"]["steps"] if "download-artifact" in str(s.get("uses"))]
        return str(next(s for s in steps if s["with"]["path"] == pattern_of)["with"]["pattern"])

    # a shard's artifact is <kind>-<version>-<K>-of-<N>; the merge of a version downloads exactly its own
    assert uploaded("campaign") == "campaign-${{ matrix.name }}" and uploaded("mutants") == "mutants-${{ matrix.name }}"
    assert downloaded("reports/campaign-shards") == "campaign-${{ matrix.valkey }}-*"
    assert downloaded("reports/mutant-shards") == "mutants-${{ matrix.valkey }}-*"
    assert uploaded("merge") == "nightly-${{ matrix.valkey }}"
    # the defaults: N campaign and M mutant shards per version, every version merged apart
    defaults = input_defaults(document)
    versions = defaults["valkey"].split()
    legs = {name: len({tuple(sorted(e.items())) for e in _legs(name)}) for name in ("campaign", "mutants", "merge")}
    assert legs == {"campaign": int(defaults["campaign_shards"]) * len(versions),
                    "mutants": (int(defaults["mutant_shards"]) + int(defaults["generated_shards"])) * len(versions),
                    "merge": len(versions)}  # fmt: skip
    # the mutant legs name their set; the generated shards' artifacts are not the catalogue merge's
    sets = Counter(leg["set"] for leg in _legs("mutants"))
    assert sets == {"catalogue": int(defaults["mutant_shards"]) * len(versions),
                    "generated": int(defaults["generated_shards"]) * len(versions)}  # fmt: skip
    generated = [leg for leg in _legs("mutants") if leg["set"] == "generated"]
    assert all(leg["name"].startswith("generated-") for leg in generated)
    assert downloaded("reports/generated-shards") == "mutants-generated-${{ matrix.valkey }}-*"
    assert not fnmatch.fnmatch(f"mutants-{generated[0]['name']}", "mutants-" + versions[0] + "-*")
    # a scheduled run has no inputs: the workflow's env falls back to the same defaults
    scheduled = {name: dict(env) for name in jobs for _, _, env in job_commands(document, name, inputs={})}
    assert scheduled == {name: dict(env) for name in jobs for _, _, env in job_commands(document, name)}


def _legs(job: str) -> list[dict[str, str]]:
    from tests.workflow import context_for, matrix_legs, plan_outputs

    document = load()
    defaults = input_defaults(document)
    context = context_for(document, defaults, plan_outputs(document), {})
    return matrix_legs(document["jobs"][job], context)


def test_the_fuzz_job_carries_its_corpus_from_the_night_before_and_never_saves_less() -> None:
    from tests.workflow import context_for, expand, plan_outputs, substitute

    document = load()
    job = document["jobs"]["fuzz"]
    assert job["needs"] == "plan" and job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.valkey) }}"
    assert job["permissions"] == {"contents": "read", "actions": "read"}  # the artifacts of earlier runs, no more
    steps = {step.get("id"): step for step in job["steps"] if step.get("id")}
    assert list(steps) == ["previous", "download", "import", "export"]
    defaults = input_defaults(document)
    leg = _legs("fuzz")[0]
    context = context_for(document, defaults, plan_outputs(document), leg)
    commands = {
        step.get("id"): shlex.split(expand(command, env)) for step, command, env in job_commands(document, "fuzz")
    }
    uploads = [s for s in job["steps"] if "upload-artifact" in str(s.get("uses"))]
    corpus_upload = next(s for s in uploads if "corpus" in s["with"]["name"])
    corpus_name = substitute(corpus_upload["with"]["name"], context)
    # the same artifact is looked for, downloaded and uploaded: previous/corpus.jsonl is what export wrote
    assert commands["previous"][-2:] == ["--artifact", corpus_name]
    assert substitute(steps["download"]["with"]["name"], context) == corpus_name
    assert steps["download"]["with"]["run-id"] == "${{ steps.previous.outputs.run-id }}"
    assert commands["import"][-1] == steps["download"]["with"]["path"] + "/corpus.jsonl"
    assert commands["export"][-1] == corpus_upload["with"]["path"].rstrip("/") + "/corpus.jsonl"
    assert corpus_upload["with"]["if-no-files-found"] == "error"
    # download and import only when a run kept one; no export unless the night before's corpus came in
    for key in ("download", "import"):
        assert steps[key]["if"] == "${{ steps.previous.outputs.run-id != '' }}"
    guard = steps["export"]["if"]
    assert "!cancelled()" in guard and "steps.previous.outcome == 'success'" in guard
    assert "steps.previous.outputs.run-id == ''" in guard and "steps.import.outcome == 'success'" in guard
    assert "steps.export.outcome == 'success'" in corpus_upload["if"]
    # the findings go up whatever happened; the service runs with coverage, so the corpus keeps more than labels
    findings = next(s for s in uploads if s is not corpus_upload)
    assert "always()" in findings["if"] and findings["with"]["path"].rstrip("/") == "reports"
    fuzz = next(words for _, c in workflow_commands() if (words := shlex.split(c))[1:2] == ["fuzz"]
                and "--seconds" in words)  # fmt: skip
    assert {"--native-coverage", "--lua-coverage", "--no-dashboard"} <= set(fuzz)
    assert fuzz[fuzz.index("--seconds") + 1] == defaults["fuzz_seconds"]


def test_the_merge_carries_the_mutation_score_history_and_never_saves_less() -> None:
    from tests.workflow import context_for, expand, plan_outputs, substitute

    document = load()
    job = document["jobs"]["merge"]
    assert job["permissions"] == {"contents": "read", "actions": "read"}
    steps = job["steps"]
    ids = [step.get("id") for step in steps if step.get("id")]
    assert ids == ["previous", "download", "carry"]
    by_id = {step["id"]: step for step in steps if step.get("id")}
    leg = _legs("merge")[0]
    context = context_for(document, input_defaults(document), plan_outputs(document), leg)
    commands = {step.get("id"): shlex.split(expand(c, env)) for step, c, env in job_commands(document, "merge")}
    history = next(s for s in steps if "upload-artifact" in str(s.get("uses")) and "scores" in s["with"]["name"])
    name = substitute(history["with"]["name"], context)
    assert (
        commands["previous"][-2:] == ["--artifact", name]
        and substitute(by_id["download"]["with"]["name"], context) == name
    )
    # what the night before uploaded comes back where tonight's merges append (their default, beside OUT):
    # the mutation scores and the findings history, both in the one artifact
    kept = history["with"]["path"].split()
    assert [Path(p).name for p in kept] == ["mutants-scores.jsonl", "findings-history.jsonl"]
    carried = [shlex.split(expand(c, env)) for step, c, env in job_commands(document, "merge")
               if step.get("id") == "carry"]  # fmt: skip
    assert sorted(c[-2:] for c in carried) == sorted([by_id["download"]["with"]["path"] + "/" + Path(p).name, p]
                                                     for p in kept)  # fmt: skip
    campaign_merge = next(w for _, c, env in job_commands(document, "merge")
                          if (w := shlex.split(expand(c, env)))[1:2] == ["merge"])  # fmt: skip
    assert "--findings-history" not in campaign_merge and Path(campaign_merge[2]).parent == Path(kept[1]).parent
    merges = [
        w
        for _, c, env in job_commands(document, "merge")
        if (w := shlex.split(expand(c, env)))[1:3] == ["mutants", "merge"]
    ]
    assert merges and all("--score-history" not in w for w in merges)
    assert all(Path(w[3]).parent == Path(kept[0]).parent for w in merges)
    for key in ("download", "carry"):
        assert by_id[key]["if"] == "${{ steps.previous.outputs.run-id != '' }}"
    guard = history["if"]
    assert "steps.previous.outcome == 'success'" in guard and "steps.carry.outcome == 'success'" in guard
    # the merges run whatever the history's steps did (a step without `if` would be skipped after a failure)
    after = steps[steps.index(by_id["carry"]) + 1 :]
    assert all("cancelled()" in str(s.get("if", "")) or "always()" in str(s.get("if", "")) for s in after)


def test_the_ci_guide_shows_the_same_commands() -> None:
    guide = (ROOT / "docs" / "ci.md").read_text()
    for written, _ in workflow_commands():
        assert written in guide, f"docs/ci.md does not show the workflow's command {written!r}"


# ---- supply chain: pinned actions, no credentials left in the checkout, the two linters -------------------

# `uses: owner/name@<40 hex> # v1.2.3`: a tag can be moved to other code, a commit cannot; the comment
# says which release the hash is (and lets a bump tool read it)
PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s+[\w.-]+/[\w./-]+@[0-9a-f]{40}\s+#\s+v\d+(?:\.\d+)*\s*$")


def unpinned(text: str) -> list[str]:
    """The `uses:` lines of a workflow's text not pinned to a full commit hash with its version beside it."""
    return [line.strip() for line in text.splitlines() if re.match(r"^\s*(?:-\s+)?uses:", line)
            and not PINNED.match(line)]  # fmt: skip


def persisting_checkouts(document: dict[str, Any]) -> list[str]:
    """The checkout steps that leave the job's token in .git/config (then in any artifact of the tree)."""
    return [f"{name}: {step['uses']}" for name, job in document["jobs"].items() for step in job["steps"]
            if str(step.get("uses", "")).startswith("actions/checkout@")
            and (step.get("with") or {}).get("persist-credentials") is not False]  # fmt: skip


def test_every_action_is_pinned_to_a_commit_and_no_checkout_keeps_the_token() -> None:
    text = WORKFLOW.read_text()
    assert re.search(r"^\s*(?:-\s+)?uses:", text, re.MULTILINE), "no uses: line found"
    assert unpinned(text) == []
    assert persisting_checkouts(load()) == []
    # the checks themselves refuse what they are there to refuse: a tag, a short hash, no version comment
    hashed = "a" * 40
    bad = ["- uses: actions/checkout@v4", f"  uses: actions/checkout@{hashed[:39]} # v4",
           f"- uses: actions/checkout@{hashed}", f"- uses: actions/checkout@{hashed} # main"]  # fmt: skip
    assert unpinned("\n".join([*bad, f"- uses: actions/checkout@{hashed} # v4.4.0"])) == [b.strip() for b in bad]
    steps = [{"uses": f"actions/checkout@{hashed}"},
             {"uses": f"actions/checkout@{hashed}", "with": {"persist-credentials": "false"}},
             {"uses": f"actions/checkout@{hashed}", "with": {"persist-credentials": False}}]  # fmt: skip
    assert len(persisting_checkouts({"jobs": {"j": {"steps": steps}}})) == 2


def _linter(name: str) -> str:
    """The linter beside this interpreter (the dev extras install it in .venv) or on PATH; skip without it."""
    here = Path(sys.executable).with_name(name)
    found = str(here) if here.is_file() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' installs it)")
    return found


@pytest.mark.subprocess
def test_zizmor_finds_nothing() -> None:
    # --offline: the audits that need no GitHub API (unpinned uses, persisted credentials, injections...)
    done = subprocess.run([_linter("zizmor"), "--offline", "--no-progress", str(WORKFLOW.parent)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings" in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.subprocess
def test_actionlint_finds_nothing() -> None:
    done = subprocess.run([_linter("actionlint"), "-no-color", str(WORKFLOW)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_gating_commands_read_the_known_findings_exit_as_a_pass() -> None:
    # the campaign shards, their merge and the mutant shards and merges exit 6 when they met only
    # findings known-findings.toml accepts: the nightly passes them (with a warning), and nothing else
    from tests.workflow import KNOWN_OK

    text = WORKFLOW.read_text()
    wrapped = [line.split(KNOWN_OK, 1)[1] for line in text.splitlines() if KNOWN_OK in line]
    words = [shlex.split(command) for command in wrapped]
    assert sum(w[1:2] == ["run"] for w in words) == 1 and sum(w[1:2] == ["merge"] for w in words) == 1
    assert sum(w[1:3] == ["mutants", "merge"] for w in words) == 2 and sum(w[1:2] == ["mutants"] for w in words) == 3
    assert (ROOT / "known-findings.toml").is_file()


@pytest.mark.subprocess
def test_known_ok_passes_exit_6_and_nothing_else() -> None:
    from difftest.report.nightly import main as nightly

    assert nightly(["known-ok", sys.executable, "-c", "raise SystemExit(6)"]) == 0
    assert nightly(["known-ok", sys.executable, "-c", "raise SystemExit(1)"]) == 1
    assert nightly(["known-ok", sys.executable, "-c", "pass"]) == 0
    assert nightly(["known-ok"]) == 2
