"""The command line teaches itself (a paragraph, examples, exit codes) and `difftest mutants` delegates whole."""

from __future__ import annotations

from pathlib import Path

import pytest

import mutants.__main__ as mutants_entry
from difftest.base import exits
from difftest.cli.main import EXIT_MEANINGS, EXIT_SETUP, MUTANTS_EXITS, build_parser, main, subcommands

ROOT = Path(__file__).resolve().parent.parent


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
    # the runner's own check of its arguments: bad input is 2 (as for every command), one line on
    # stderr, nothing on stdout (no "report:" line for files never written), no directory left
    assert main(["mutants", "--only", "no-such-mutant", "--reports", str(tmp_path / "m")]) == EXIT_SETUP
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "unknown mutant ids: no-such-mutant" in err
    assert not (tmp_path / "m").exists()
    # --help: this command's paragraph and codes, then the runner's options
    assert main(["mutants", "--help"]) == 0
    out = capsys.readouterr().out
    assert "void: the null run found a divergence" in out and "--only ID" in out and "--examples" in out


def test_one_table_of_exit_codes_for_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    # the README's table is the one exits.py prints; every code of a --help means what the table says
    assert exits.markdown() in (ROOT / "README.md").read_text()
    parser = build_parser()
    pages = {"difftest": parser, **subcommands(parser)}
    for name, page in pages.items():
        listed = page.format_help().split("exit codes:\n", 1)[1]
        for code in (exits.EXIT_INTERRUPTED, exits.EXIT_TERMINATED):  # an interrupted command says both
            if f"  {exits.EXIT_INTERRUPTED:<4}" in listed:
                assert f"  {code:<4}" in listed, (name, code)
    assert f"  {exits.EXIT_TERMINATED:<4} terminated (SIGTERM)" in pages["replay"].format_help()
    # the runner: the same codes for the same things, its --help printed from the same table
    assert MUTANTS_EXITS[exits.EXIT_SETUP].startswith("bad input") and MUTANTS_EXITS[exits.EXIT_VOID].startswith("void")
    assert exits.EXIT_COVERAGE not in MUTANTS_EXITS and set(MUTANTS_EXITS) <= set(EXIT_MEANINGS)
    assert mutants_entry.main(["--help"]) == 0
    runner_help = capsys.readouterr().out
    for code, meaning in MUTANTS_EXITS.items():
        assert f"  {code:<4} {meaning}" in runner_help, code
