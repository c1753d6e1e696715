"""The nightly workflow cannot drift: its `run:` lines are real make targets or difftest commands, as in the README."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from difftest.cli import build_parser, subcommands

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
DIFFTEST = ".venv/bin/difftest"


def load() -> dict[Any, Any]:
    document = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(document, dict)
    return document


def triggers(document: dict[Any, Any]) -> dict[str, Any]:
    # YAML 1.1 (PyYAML) reads the bare key `on` as the boolean True
    found = document.get("on", document.get(True))
    assert isinstance(found, dict)
    return found


def steps(document: dict[Any, Any]) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Every step with the environment it sees (workflow, job and step `env:`, the innermost winning)."""
    found = []
    for job in document["jobs"].values():
        for step in job["steps"]:
            env = {**document.get("env", {}), **job.get("env", {}), **step.get("env", {})}
            found.append((step, {k: str(v) for k, v in env.items()}))
    return found


def commands(script: str) -> list[str]:
    """The shell commands of a `run:` block: one a line, continuations joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", script)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def expand(command: str, env: dict[str, str]) -> str:
    """$NAME from the step's env; an expression `${{ inputs.x || 'default' }}` stands for its default."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in env, f"{command!r} uses ${name}, which the workflow does not set"
        text = env[name]
        fallback = re.search(r"\|\|\s*'([^']*)'", text)
        return fallback.group(1) if "${{" in text and fallback else text

    return re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", value, command)


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
    assert words[0] == DIFFTEST, f"{command!r}: the workflow runs Makefile targets and {DIFFTEST} only"
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
    """(as written, as run) for every command of every `run:` step."""
    return [
        (command, expand(command, env))
        for step, env in steps(load())
        if "run" in step
        for command in commands(step["run"])
    ]


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
    assert "--backend" in campaign and campaign[campaign.index("--backend") + 1] == "docker" and "--seconds" in campaign
    assert any(w[1:2] == ["mutants"] for w in run)


def test_the_checker_itself_rejects_what_is_not_real() -> None:
    for bad in (
        "make no-such-target",
        f"{DIFFTEST} run --no-such-option",
        f"{DIFFTEST} run --seconds soon",
        f"{DIFFTEST} no-such-command",
        f"{DIFFTEST} mutants --no-such-option 1",
        "pytest tests",
    ):
        with pytest.raises(AssertionError):
            check(bad)
    check(f"{DIFFTEST} mutants merge out shard-1 shard-2")


def test_reports_are_uploaded_always_and_the_mutants_run_after_a_divergence() -> None:
    document = load()
    every = [step for step, _ in steps(document)]
    upload = next(s for s in every if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert "always()" in str(upload.get("if", "")) and upload["with"]["path"].rstrip("/") == "reports"
    mutants = next(s for s in every if DIFFTEST + " mutants" in str(s.get("run", "")))
    assert "cancelled()" in str(mutants.get("if", "")) or "always()" in str(mutants.get("if", ""))
    # a failing command fails its step: nothing swallows the exit code
    for step in every:
        assert "|| true" not in str(step.get("run", "")) and not step.get("continue-on-error", False)


def test_the_readme_shows_the_same_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    for written, _ in workflow_commands():
        assert written in readme, f"README.md does not show the workflow's command {written!r}"
