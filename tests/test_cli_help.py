"""The command line teaches itself (a paragraph, examples, exit codes) and `difftest mutants` delegates whole."""

from __future__ import annotations

from pathlib import Path

import pytest

import mutants.__main__ as mutants_entry
from difftest.cli import EXIT_MEANINGS, MUTANTS_EXITS, build_parser, main, subcommands


def test_every_help_has_a_paragraph_examples_and_exit_codes() -> None:
    parser = build_parser()
    pages = {"difftest": parser, **subcommands(parser)}
    assert {"run", "replay", "scenario", "mutants"} <= pages.keys()
    for name, page in pages.items():
        text = page.format_help()
        assert page.description and len(page.description.split()) >= 15, f"{name}: no paragraph"
        assert "examples:\n  " in text and "exit codes:\n  0 " in text, name
    # the codes each command really has, word for word
    for name, codes in (("difftest", EXIT_MEANINGS), ("run", EXIT_MEANINGS), ("mutants", MUTANTS_EXITS)):
        documented = pages[name].format_help().split("exit codes:\n", 1)[1]
        for code, meaning in codes.items():
            assert f"  {code:<4} {meaning}" in documented, (name, code)
    for name in ("replay", "scenario"):
        assert "  1    a divergence" in pages[name].format_help()


def test_difftest_mutants_passes_every_argument_to_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def runner(argv: list[str] | None = None) -> int:
        calls.append(list(argv or []))
        return 7  # whatever the runner exits with is difftest's exit code

    monkeypatch.setattr(mutants_entry, "main", runner)
    assert main(["mutants", "--only", "a", "b", "--jobs", "1", "--shard", "2/3"]) == 7
    assert main(["mutants", "merge", "out", "d1", "d2"]) == 7
    assert main(["mutants"]) == 7
    assert calls == [["--only", "a", "b", "--jobs", "1", "--shard", "2/3"], ["merge", "out", "d1", "d2"], []]


def test_difftest_mutants_reaches_the_real_runner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the runner's own check of its arguments, and its code 3 (bad arguments), come back unchanged
    assert main(["mutants", "--only", "no-such-mutant", "--reports", str(tmp_path / "m")]) == 3
    assert "unknown mutant ids: no-such-mutant" in capsys.readouterr().out
    # --help: this command's paragraph and codes, then the runner's options
    assert main(["mutants", "--help"]) == 0
    out = capsys.readouterr().out
    assert "void: the null run found a divergence" in out and "--only ID" in out and "--examples" in out
