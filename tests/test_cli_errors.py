"""Runs that end well: every bad budget, count or input is one line on stderr and exit 2 before
anything starts; a budget that compared nothing is void (exit 4), never "agree"; difftest's own
failures are exit 70 with the traceback in a log, never exit 1 (a divergence) and never a bare
traceback. Each case runs the real command line (difftest.cli.main.main) on real servers where it needs
them; no test mocks Valkey."""

from __future__ import annotations

import html
import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from difftest.cli import arguments
from difftest.cli import main as cli
from difftest.cli.main import EXIT_INTERNAL, EXIT_OK, EXIT_SETUP, EXIT_VOID, main
from difftest.coverage import labels as coverage
from difftest.history import format as hist
from difftest.history.format import DEFAULT_START_MS, MAX_MS
from difftest.replay.build import command as printed_command
from executors.native.adapter import DEFAULT_MODULE

ROOT = Path(__file__).resolve().parent.parent
HEADER = '{"format": "difftest-history", "version": 1}'
ENQUEUE = '{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "payload", 0]}'


def outcome(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    """(exit code, stdout, stderr's lines) of `difftest ARGV`, whether main returns or argparse exits."""
    try:
        code = main(argv)
    except SystemExit as leaving:
        code = leaving.code if isinstance(leaving.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def one_line(lines: list[str], *needles: str) -> str:
    """The single stderr line, which names the problem; no traceback anywhere."""
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def history_file(tmp_path: Path, *lines: str, header: str = HEADER) -> Path:
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


# -- budgets and counts: refused by the parser, one line, exit 2 ---------------------------------

# refused after the frozen clock is built: on a fresh cache, a compiler's process (cc)
FRESH_CACHE_CC = pytest.mark.subprocess
BAD_RUN_OPTIONS = [
    (["--seconds", "0"], ["--seconds", "0 seconds"]),
    (["--seconds", "-3"], ["--seconds", "-3 seconds"]),
    (["--seconds", "nan"], ["--seconds", "nan"]),
    (["--seconds", "soon"], ["--seconds", "'soon'"]),
    (["--examples", "0"], ["--examples", "0 histories", "1 to"]),
    (["--examples", "-5"], ["--examples", "-5 histories"]),
    (["--examples", "many"], ["--examples", "'many'"]),
    (["--examples", str(arguments.MAX_EXAMPLES + 1)], ["--examples", "out of range"]),
    (["--workers", "0"], ["--workers", "0 workers", "1 to"]),
    (["--workers", "-1"], ["--workers", "-1 workers"]),
    (["--shard", "3/2"], ["--shard", "3/2", "between 1 and N"]),
    (["--shard", "0/2"], ["--shard", "0/2"]),
    (["--shard", "two"], ["--shard", "'two'", "K/N"]),
    (["--shard", "1/0"], ["--shard", "1/0"]),
    pytest.param(
        ["--examples", "40", "--shard", "2/2"], ["--shard 2/2", "no batch", "--examples 40"], marks=FRESH_CACHE_CC
    ),
    (["--seed", "x"], ["--seed", "'x'"]),
    pytest.param(
        ["--database", "http://x"], ["--database", "http://x", "unknown scheme", "valkey://"], marks=FRESH_CACHE_CC
    ),
    pytest.param(["--database", "/proc/nope"], ["--database /proc/nope", "--no-database"], marks=FRESH_CACHE_CC),
    (["--module", "no/such/libemq_native.so"], ["--module", "no/such/libemq_native.so", "make setup"]),
    (["--lua-scripts", "no/such/dir"], ["--lua-scripts", "no/such/dir", "<verb>.lua"]),
]


@pytest.mark.parametrize(("options", "needles"), BAD_RUN_OPTIONS, ids=lambda v: " ".join(v))
def test_a_bad_run_option_is_one_line_and_exit_2(
    options: list[str], needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    code, _, err = outcome(["run", *options, "--reports", str(reports)], capsys)
    assert code == EXIT_SETUP
    one_line(err, *needles)
    assert not reports.exists(), "a run refused up front makes no run directory"


@pytest.mark.subprocess  # a fresh cache: the frozen clock is compiled (cc) before the refusal
def test_an_unknown_database_scheme_in_the_environment_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DIFFTEST_DATABASE", "http://db-host/0")
    code, _, err = outcome(["run", "--examples", "2", "--reports", str(tmp_path)], capsys)
    assert code == EXIT_SETUP
    one_line(err, "DIFFTEST_DATABASE", "http://db-host/0", "unknown scheme")


BAD_ENVIRONMENT = [
    ("DIFFTEST_FASTBOOT", "maybe", ["DIFFTEST_FASTBOOT='maybe'", "neither 0 nor 1"]),
    ("DIFFTEST_ZYGOTE", "2", ["DIFFTEST_ZYGOTE='2'", "neither 0 nor 1"]),
    ("DIFFTEST_ENGINE_HOOKS", "off", ["DIFFTEST_ENGINE_HOOKS='off'", "neither 0 nor 1"]),
    ("DIFFTEST_WALKER", "rust", ["DIFFTEST_WALKER='rust'", "'module'", "'whole'", "'lua'"]),
    ("DIFFTEST_TRACK_FROM", "lots", ["DIFFTEST_TRACK_FROM='lots'", "number of keys"]),
    ("DIFFTEST_PROGRESS_SECONDS", "soon", ["DIFFTEST_PROGRESS_SECONDS='soon'", ">= 0"]),
    ("DIFFTEST_VALKEY_VERSION", "7.2", ["DIFFTEST_VALKEY_VERSION", "'7.2'", "9.1.2"]),
    # the check asks /bin/true its --version: a process
    pytest.param(
        "DIFFTEST_VALKEY_SERVER",
        "/bin/true",
        ["/bin/true is not a valkey-server", "(GNU coreutils)", "unset it"],
        marks=pytest.mark.subprocess,
    ),
]


@pytest.mark.parametrize(("name", "value", "needles"), BAD_ENVIRONMENT)
def test_a_bad_environment_variable_is_one_line_and_exit_2_before_anything_starts(
    name: str, value: str, needles: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv(name, value)
    reports = tmp_path / "reports"
    history = str(ROOT / "tests/histories/d2_meta_error.jsonl")
    for command in (["run", "--examples", "1", "--no-database"], ["replay", history], ["scenario"]):
        code, out, err = outcome([*command, "--reports", str(reports)], capsys)
        assert code == EXIT_SETUP, (command, out)
        line = one_line(err, *needles)
        assert "\\n" not in line and len(line) < 300
        assert not reports.exists(), "nothing started, no run directory"


def test_the_mutant_runner_checks_the_variables_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DIFFTEST_FASTBOOT", "yes")
    code, _, err = outcome(["mutants", "--only", "null-run"], capsys)
    assert code == EXIT_SETUP  # the same code for bad input as every other command
    one_line(err, "DIFFTEST_FASTBOOT='yes'", "neither 0 nor 1")


def test_the_suite_reads_its_campaign_budget_like_a_flag() -> None:
    from difftest.base.problems import SetupProblem
    from difftest.cli.preflight import campaign_examples

    assert campaign_examples({}) == 40 and campaign_examples({"DIFFTEST_CAMPAIGN_EXAMPLES": "2_000"}) == 2000
    for bad in ("x", "0", "-4", "1.5"):
        with pytest.raises(SetupProblem, match="DIFFTEST_CAMPAIGN_EXAMPLES"):
            campaign_examples({"DIFFTEST_CAMPAIGN_EXAMPLES": bad})


def _elf_copy(tmp_path: Path, name: str, edit: Callable[[bytearray], bytearray]) -> Path:
    copy = tmp_path / name
    copy.write_bytes(bytes(edit(bytearray(DEFAULT_MODULE.read_bytes()))))
    return copy


def _aarch64(data: bytearray) -> bytearray:
    data[18:20] = (183).to_bytes(2, "little")  # e_machine: EM_AARCH64
    return data


@pytest.mark.parametrize(
    ("make", "needle"),
    [(lambda tmp: tmp, "is a directory, not a module file"),
     (lambda tmp: _elf_copy(tmp, "arm.so", _aarch64), "is built for aarch64, not this host's x86_64"),
     (lambda tmp: _elf_copy(tmp, "cut.so", lambda d: d[: len(d) // 2]), "is cut short"),
     (lambda tmp: _elf_copy(tmp, "text.so", lambda d: bytearray(b"#!/bin/sh\n")), "is not an ELF shared object"),
     (lambda tmp: _elf_copy(tmp, "tiny.so", lambda d: d[:30]), "is cut short")],
)  # fmt: skip
def test_a_module_that_cannot_load_here_is_refused_up_front(
    make: Callable[[Path], Path], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.uname().machine != "x86_64" and "aarch64" in needle:
        pytest.skip("the foreign machine of this case is this host's")
    module = make(tmp_path)
    for command in (["run", "--examples", "1"], ["replay", str(ROOT / "tests/histories/d2_meta_error.jsonl")],
                    ["scenario"], ["servers", "build"]):  # fmt: skip
        code, _, err = outcome([*command, "--module", str(module), "--reports", str(tmp_path / "r")], capsys)
        assert code == EXIT_SETUP, command
        one_line(err, "--module", str(module), needle, "make setup")
    assert not (tmp_path / "r").exists()


@pytest.mark.subprocess  # a fresh cache: the frozen clock is compiled (cc) before the refusal
def test_an_unwritable_reports_directory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for command in (
        ["run", "--examples", "2", "--no-database"],
        ["replay", str(ROOT / "tests/histories/d2_meta_error.jsonl")],
    ):
        code, _, err = outcome([*command, "--reports", str(blocker / "reports")], capsys)
        assert code == EXIT_SETUP, command
        one_line(err, str(blocker / "reports"), "writ")


def test_no_compiler_for_the_frozen_clock_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from difftest.servers import compiled

    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    compiled.clock_library.cache_clear()
    try:
        for command in (["run", "--examples", "2", "--no-database"], ["scenario"]):
            code, _, err = outcome([*command, "--reports", str(tmp_path / "r")], capsys)
            assert code == EXIT_SETUP, command
            one_line(err, "frozen clock", "install a C compiler")
    finally:
        compiled.clock_library.cache_clear()
    assert not (tmp_path / "r").exists()


# -- histories: refused at load, naming the line and the field ------------------------------------

BAD_HISTORIES = [
    ([ENQUEUE, '{"op": "advance", "ms": 999999999999999999}'], HEADER, [":3 field 'ms'", "past the last moment"]),
    (
        [ENQUEUE, '{"op": "advance", "ms": 2}'],
        f'{{"format": "difftest-history", "version": 1, "start_ms": {MAX_MS - 1}}}',
        [":3 field 'ms'", str(MAX_MS + 1)],
    ),
    ([ENQUEUE], f'{{"format": "difftest-history", "version": 1, "start_ms": {10**20}}}', [":1 field 'start_ms'"]),
    (['{"op": "raw", "command": ["SHUTDOWN", "NOSAVE"]}'], HEADER, [":2 field 'command'", "SHUTDOWN", "'crash'"]),
    (['{"op": "raw", "command": ["debug", "segfault"]}'], HEADER, [":2 field 'command'", "DEBUG"]),
    (['{"op": "raw", "command": ["CLIENT", "KILL", "TYPE", "normal"]}'], HEADER, [":2 field 'command'", "CLIENT KILL"]),
    (['{"op": "raw", "command": ["REPLICAOF", "10.0.0.1", "6379"]}'], HEADER, [":2 field 'command'", "REPLICAOF"]),
    (['{"op": "raw", "command": ["MONITOR"]}'], HEADER, [":2 field 'command'", "MONITOR"]),
    (['{"op": "raw", "command": ["SUBSCRIBE", "c"]}'], HEADER, [":2 field 'command'", "SUBSCRIBE"]),
    (['{"op": "raw", "command": ["BLPOP", "k", 0]}'], HEADER, [":2 field 'command'", "'BLPOP' is not a data command"]),
    (
        ['{"op": "raw", "command": ["MIGRATE", "127.0.0.1", "9", "k", "0", "100"]}'],
        HEADER,
        [":2 field 'command'", "'MIGRATE' is not a data command"],
    ),
    (
        ['{"op": "raw", "command": ["CONFIG", "GET", "dir"]}'],
        HEADER,
        [":2 field 'command'", "'CONFIG GET'", "'notify'"],
    ),
    (['{"op": "raw", "command": ["CONFIG", "SET", "maxmemory", "1"]}'], HEADER, [":2 field 'command'", "CONFIG SET"]),
    (
        ['{"op": "call", "verb": "ENQUEUE", "queue": 5, "args": ["j1", "p", 0]}'],
        HEADER,
        [":2 field 'queue'", "number 5"],
    ),
]


@pytest.mark.parametrize(("steps", "header", "needles"), BAD_HISTORIES, ids=lambda v: str(v)[:40])
def test_a_bad_history_is_one_line_naming_line_and_field(
    steps: list[str], header: str, needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = history_file(tmp_path, *steps, header=header)
    code, _, err = outcome(["replay", str(path), "--reports", str(tmp_path / "r")], capsys)
    assert code == EXIT_SETUP
    one_line(err, str(path), *needles)


def test_what_a_history_may_still_say() -> None:
    # integers in args and raw commands are a documented convenience (docs/history-format.md's example);
    # FLUSHALL empties the servers' keys, and the data members of a container read a key
    loaded = hist.loads("\n".join([
        f'{{"format": "difftest-history", "version": 1, "start_ms": {MAX_MS - 5}}}', ENQUEUE,
        '{"op": "advance", "ms": 5}', '{"op": "raw", "command": ["FLUSHALL"]}',
        '{"op": "raw", "command": ["OBJECT", "ENCODING", "k"]}', '{"op": "raw", "command": ["ZADD", "k", 5, "m"]}',
    ]))  # fmt: skip
    assert loaded.start_ms == MAX_MS - 5 and len(loaded.steps) == 5
    assert loaded.steps[-1] == hist.raw("ZADD", "k", "5", "m")


@pytest.mark.servers
def test_the_last_moment_of_the_clock_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = history_file(
        tmp_path, ENQUEUE, '{"op": "call", "verb": "CLAIM", "queue": "q", "args": [1000]}',
        '{"op": "advance", "ms": 1999}', '{"op": "call", "verb": "SWEEP", "queue": "q", "args": [10]}',
        header=f'{{"format": "difftest-history", "version": 1, "start_ms": {MAX_MS - 1999}}}',
    )  # fmt: skip
    code, out, _ = outcome(["replay", str(path), "--reports", str(tmp_path / "r")], capsys)
    assert code == EXIT_OK, out


# -- modules: made absolute, checked, and a failed load always says why ---------------------------


@pytest.mark.servers
def test_replay_takes_a_relative_module_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    relative = os.path.relpath(DEFAULT_MODULE, ROOT)
    history = "tests/histories/d2_meta_error.jsonl"
    code, out, _ = outcome(["replay", history, "--module", relative, "--reports", str(tmp_path)], capsys)
    assert code == EXIT_OK, out
    code, _, err = outcome(["replay", history, "--module", "target/libemq_native.so"], capsys)
    assert code == EXIT_SETUP
    one_line(err, "--module", "target/libemq_native.so: no such file")


@pytest.fixture
def not_a_module(tmp_path: Path) -> Path:
    """A real shared library that is no Valkey module: it loads, and has no OnLoad."""
    library = next(p for p in (Path("/lib/x86_64-linux-gnu/libm.so.6"), Path("/usr/lib/x86_64-linux-gnu/libm.so.6"),
                               Path("/lib/aarch64-linux-gnu/libm.so.6")) if p.exists())  # fmt: skip
    copy = tmp_path / "libnot_a_module.so"
    shutil.copy(library, copy)
    copy.chmod(0o755)
    return copy


@pytest.mark.servers
def test_a_module_that_fails_to_load_says_why_and_leaves_no_run_directory(
    not_a_module: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "earlier-run").mkdir()  # an earlier report is never touched
    argv = ["run", "--examples", "2", "--workers", "1", "--no-database", "--module", str(not_a_module)]
    code, _, err = outcome([*argv, "--reports", str(reports)], capsys)
    assert code == EXIT_SETUP
    one_line(err, str(not_a_module), "does not export", "cargo build --release")
    assert [p.name for p in reports.iterdir()] == ["earlier-run"]
    code, _, err = outcome(["scenario", "--module", str(not_a_module), "--reports", str(reports)], capsys)
    assert code == EXIT_SETUP
    one_line(err, "could not load module", "does not export")


# -- a budget that compared nothing is void; the reproduce line carries every option ---------------


@pytest.mark.servers
def test_a_budget_that_compared_nothing_is_void_not_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--seconds", "0.001", "--seed", "3", "--workers", "1", "--no-database", "--reports", str(tmp_path)]
    code, out, err = outcome(argv, capsys)
    assert code == EXIT_VOID
    said = [line for line in err if line.startswith("difftest:")]  # the rest is progress
    one_line(said, "void", "no history was compared", "--seconds 0.001")
    assert not any("Traceback" in line for line in err)
    (run,) = tmp_path.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["verdict"] == "void" and summary["histories"] == 0
    # the program as it runs from here (difftest/replay/build.py): the venv's script when `difftest` is not on PATH
    expected = printed_command("run", "--seed", "3", "--seconds", "0.001", "--workers", "1", "--no-database")
    assert f"reproduce: {expected}" in out
    assert out.splitlines()[-1] == "void: 0 histories compared, nothing was tested"  # the verdict, last


@pytest.mark.servers
def test_the_reproduce_line_carries_every_option_that_changes_the_histories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "examples"
    argv = ["run", "--examples", "2", "--seed", "11", "--workers", "1", "--no-restarts", "--shard", "1/1",
            "--database", str(database), "--reports", str(tmp_path / "reports")]  # fmt: skip
    code, out, _ = outcome(argv, capsys)
    assert code == EXIT_OK, out
    words = ["--seed", "11", "--examples", "2", "--workers", "1", "--no-restarts", "--database", str(database)]
    expected = printed_command("run", *words)
    assert f"reproduce: {expected}" in out
    (run,) = (tmp_path / "reports").iterdir()
    assert html.escape(expected, quote=False) in (run / "report.html").read_text()
    assert json.loads((run / "summary.json").read_text())["database"] == str(database)
    # the terminal: the coverage table folded to one line (coverage.txt holds it all), the verdict last
    lines = out.splitlines()
    assert lines[-1].startswith("agree: 2 histories, ") and lines[-1].endswith(" 0 divergences, coverage complete")
    assert any(line.startswith("behaviour coverage: all ") for line in lines) and len(lines) < 40, len(lines)
    assert len((run / "coverage.txt").read_text().splitlines()) > len(coverage.REQUIRED)


def test_the_terminal_folds_the_coverage_table_to_what_is_missing() -> None:
    from difftest.campaign.progress import verdict_line

    everything = Counter({label: 1 for label in coverage.REQUIRED})
    assert coverage.folded(everything).count("\n") == 0
    short = Counter(everything)
    del short["contract:D1"], short["sweep:ghost"]
    lines = coverage.folded(short).splitlines()
    assert lines[1:] == ["  sweep:ghost  MISSING", "  contract:D1  MISSING"]
    assert lines[0].startswith(f"behaviour coverage: {len(coverage.REQUIRED) - 2:,} of {len(coverage.REQUIRED):,} ")
    assert len(coverage.folded(Counter()).splitlines()) == coverage.FOLDED_MISSING + 2  # bounded, and "... more"
    assert (
        verdict_line("agree", 2000, 92153, 0, 0) == "agree: 2,000 histories, 92,153 steps, 0 divergences, "
        "coverage complete"
    )
    assert verdict_line("agree", 1, 9, 0, 6, require_coverage=True).startswith("coverage incomplete: 1 history, ")
    assert (
        verdict_line("divergence", 40, 900, 1, 0) == "divergence: 40 histories, 900 steps, 1 divergence, "
        "coverage complete"
    )
    assert verdict_line("interrupted", 3, 30, 0, 2, stopped_by="Ctrl-C").endswith(
        "coverage incomplete (2 labels missing); stopped by Ctrl-C"
    )


@pytest.mark.servers
def test_coverage_full_prints_the_whole_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--examples", "1", "--seed", "2", "--workers", "1", "--no-database", "--coverage", "full",
            "--reports", str(tmp_path)]  # fmt: skip
    code, out, _ = outcome(argv, capsys)
    assert code == EXIT_OK, out[-1000:]
    assert sum(1 for line in out.splitlines() if line.startswith("reply:CLAIM:")) >= 2  # the table's rows
    assert out.splitlines()[-1].startswith("agree: 1 history, ")


# -- the tool's own failures: exit 70, one line, the traceback in a log ---------------------------


@pytest.mark.servers
def test_a_lost_connection_is_the_tool_failure_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the loader refuses SHUTDOWN in a file; a history built in Python is not loaded, so it reaches
    # the real servers, and one of them really goes away mid-replay
    stopping = hist.History((hist.call_step("ENQUEUE", "q", "j1", "p", 0), hist.raw("SHUTDOWN", "NOSAVE"),
                             hist.call_step("CLAIM", "q", 100)), DEFAULT_START_MS)  # fmt: skip
    monkeypatch.setattr(hist, "load_with_header", lambda path: (stopping, {}))
    code, _, err = outcome(["replay", str(tmp_path / "any.jsonl"), "--reports", str(tmp_path / "r")], capsys)
    assert code == EXIT_INTERNAL
    line = one_line(err, "internal error", "the Lua server, the reference, was lost", "the traceback is in")
    log = Path(line.rsplit("the traceback is in ", 1)[1])
    assert log.parent == tmp_path / "r" and "ConnectionError" in log.read_text()


def test_an_unexpected_exception_is_exit_70_with_its_traceback_in_a_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: object) -> int:
        raise RuntimeError("a bug in difftest")

    handlers: dict[str, Callable[..., int]] = {**cli.HANDLERS, "report": broken}
    monkeypatch.setattr(cli, "HANDLERS", handlers)
    monkeypatch.chdir(tmp_path)  # no run directory: the log goes under reports/
    code, _, err = outcome(["report", str(tmp_path)], capsys)
    assert code == EXIT_INTERNAL
    line = one_line(err, "difftest: internal error: RuntimeError: a bug in difftest", "the traceback is in reports/")
    log = tmp_path / line.rsplit("the traceback is in ", 1)[1]
    assert "Traceback" in log.read_text() and "a bug in difftest" in log.read_text()


# -- report and merge on directories that are not what difftest wrote ------------------------------


@pytest.mark.parametrize(
    ("text", "needle"),
    [("[1, 2]", "holds a JSON list"), ('{"verdict": "agree", "budget": 5}', "not in the shape"),
     ("{not json", "cannot be read"),
     ('{"verdict": "divergence", "divergences": [{"artifact": 3}], "coverage": []}', "not in the shape"),
     ('{"seed": 3, "histories": 40}', "has no verdict, not one difftest writes"),
     ('{"verdict": "banana"}', 'has the verdict "banana", not one difftest writes'),
     ('{"verdict": ["agree"]}', "not one difftest writes")],
)  # fmt: skip
def test_report_on_a_malformed_summary_is_one_line(
    text: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "summary.json").write_text(text)
    code, _, err = outcome(["report", str(tmp_path)], capsys)
    assert code == EXIT_SETUP
    one_line(err, "summary.json", needle)
    code, _, err = outcome(["merge", str(tmp_path / "out"), str(tmp_path)], capsys)
    assert code == EXIT_SETUP
    one_line(err)


def test_merge_into_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "out").write_text("")
    code, _, err = outcome(["merge", str(tmp_path / "out"), str(tmp_path)], capsys)
    assert code == EXIT_SETUP
    one_line(err, "is a file")


# -- the coverage table fits a terminal ------------------------------------------------------------


def test_the_coverage_table_puts_other_labels_in_rows() -> None:
    reached = Counter({label: 2 for label in coverage.REQUIRED})
    reached.update({f"reply:{verb}:error:EMQ SHAPE wrong number of arguments {n}": n for n in range(60)
                    for verb in ("CLAIM", "ENQUEUE")})  # fmt: skip
    lines = coverage.table(reached).splitlines()
    assert max(len(line) for line in lines) <= 120
    assert any(line.startswith("also reached") for line in lines)
    assert sum(1 for line in lines if line.startswith("reply:CLAIM:error:")) == 60


def test_every_command_documents_the_tool_failure_code() -> None:
    pages = cli.subcommands(cli.build_parser())
    for name in ("run", "replay", "scenario", "merge", "report", "servers"):
        assert f"  {EXIT_INTERNAL:<4} difftest itself failed" in pages[name].format_help(), name
        assert f"  {cli.EXIT_IOERR:<4} the machine refused " in pages[name].format_help(), name
    assert f"  {EXIT_VOID:<4} void" in pages["run"].format_help()
