"""The build under test reaches the replay: every printed command runs as printed from here and
carries the module, the scripts and the Valkey version a divergence was found on; artifacts and
summary.json record them (paths and sha256); replay uses the record unless told otherwise, and a
recorded divergence that is gone is exit 5, never 0. Scripts that do not compile are refused at
start. Real servers, real module, the real command line."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.base.problems import ScriptDoesNotCompile
from difftest.cli.main import EXIT_DIVERGENCE, EXIT_NOT_REPRODUCED, EXIT_SETUP, main
from difftest.replay import build
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import LUA_DIR, planted_scripts

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"found": ("servers",)}

ROOT = Path(__file__).resolve().parent.parent


def outcome(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def reproduce_of(out: str, prefix: str) -> str:
    """The command of the first printed line that starts with `prefix` (after 'reproduce: ')."""
    line = next(line for line in out.splitlines() if line.startswith(prefix))
    return line.split("reproduce: ", 1)[1].rstrip(")")


@pytest.fixture
def found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """A divergence found by `difftest run` on a module copied elsewhere and scripts with a defect."""
    module = tmp_path / "my-build" / "libemq_native.so"
    module.parent.mkdir()
    shutil.copy(DEFAULT_MODULE, module)
    scripts = planted_scripts(tmp_path, "complete.lua", "'count', 1)", "'count', 2)")
    argv = ["run", "--examples", "5", "--workers", "1", "--seed", "1", "--no-database", "--module", str(module),
            "--lua-scripts", str(scripts), "--reports", str(tmp_path / "reports")]  # fmt: skip
    code, out, _ = outcome(argv, capsys)
    assert code == EXIT_DIVERGENCE, out
    (run,) = (tmp_path / "reports").iterdir()
    return {"module": module, "scripts": scripts, "out": out, "run": run,
            "artifact": Path(json.loads((run / "summary.json").read_text())["divergences"][0]["artifact"])}  # fmt: skip


def test_every_reproduce_line_and_record_carries_the_build(found: dict[str, object]) -> None:
    module, scripts, out, run = found["module"], found["scripts"], str(found["out"]), found["run"]
    assert isinstance(module, Path) and isinstance(scripts, Path) and isinstance(run, Path)
    artifact = found["artifact"]
    assert isinstance(artifact, Path)
    on_build = ["--module", str(module), "--lua-scripts", str(scripts)]
    run_line = reproduce_of(out, "reports: ")
    artifact_line = reproduce_of(out, "artifact: ")
    for line in (run_line, artifact_line):
        assert shlex.split(line)[: len(build.program())] == build.program()
        assert shlex.join(on_build) in line, line
    summary = json.loads((run / "summary.json").read_text())
    assert summary["reproduce"] == run_line and summary["divergences"][0]["reproduce"] == artifact_line
    digest = build.sha256_file(module)
    assert summary["module"] == str(module) and summary["module_sha256"] == digest
    assert summary["lua_scripts"] == str(scripts) and summary["lua_scripts_sha256"] == build.sha256_scripts(scripts)
    assert summary["valkey"]
    report = json.loads((artifact / "report.json").read_text())
    assert report["build"]["module_sha256"] == digest and report["build"]["lua_scripts_dir"] == str(scripts)
    assert report["build"]["valkey"] == summary["valkey"]
    assert shlex.join(on_build) in report["reproduce"]
    text = (artifact / "report.txt").read_text()
    assert f"to reproduce: {report['reproduce']}" in text and digest in text
    assert shlex.join(on_build) in (run / "report.html").read_text().replace("&#x27;", "'")


@pytest.mark.subprocess
def test_the_printed_replay_runs_as_printed_and_reproduces(found: dict[str, object]) -> None:
    line = reproduce_of(str(found["out"]), "artifact: ")
    done = subprocess.run([*shlex.split(line), "--reports", str(Path(str(found["run"])) / "again")],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == EXIT_DIVERGENCE, done.stdout + done.stderr
    assert "reproduced: yes, the same step and reason" in done.stdout


def test_replay_uses_the_recorded_build_unless_told(found: dict[str, object], capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:  # fmt: skip
    artifact, module = str(found["artifact"]), found["module"]
    assert isinstance(module, Path)
    reports = ["--reports", str(tmp_path / "r")]
    code, out, err = outcome(["replay", artifact, *reports], capsys)  # no flags: the recorded build
    assert code == EXIT_DIVERGENCE and "reproduced: yes" in out and not err
    # told otherwise: the reference scripts do not have the defect, so the divergence is gone: exit 5
    code, out, _ = outcome(["replay", artifact, "--lua-scripts", str(LUA_DIR), *reports], capsys)
    assert code == EXIT_NOT_REPRODUCED and "reproduced: NO" in out
    with module.open("ab") as grown:  # a module rebuilt since: one line of warning, then the replay
        grown.write(b"\0")
    code, out, err = outcome(["replay", artifact, *reports], capsys)
    assert code == EXIT_DIVERGENCE and "reproduced: yes" in out
    assert len(err) == 1 and "warning" in err[0] and str(module) in err[0] and "changed" in err[0]
    module.unlink()  # gone: refused, naming the flag that replays it on another build
    code, _, err = outcome(["replay", artifact, *reports], capsys)
    assert code == EXIT_SETUP and len(err) == 1 and str(module) in err[0] and "--module" in err[0]
    code, out, _ = outcome(["replay", artifact, "--module", str(DEFAULT_MODULE), *reports], capsys)
    assert code == EXIT_DIVERGENCE and "reproduced: yes" in out
    scripts = found["scripts"]
    assert isinstance(scripts, Path)
    scripts.rename(scripts.with_name("moved"))  # the recorded scripts gone too: refused, naming the flag
    code, _, err = outcome(["replay", artifact, "--module", str(DEFAULT_MODULE), *reports], capsys)
    assert code == EXIT_SETUP and len(err) == 1 and str(scripts) in err[0] and "--lua-scripts" in err[0]


def test_replay_help_lists_the_not_reproduced_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--help"]) == 0
    assert f"  {EXIT_NOT_REPRODUCED}    an artifact's recorded divergence did not reproduce" in capsys.readouterr().out
    assert f"| {EXIT_NOT_REPRODUCED} |" in (ROOT / "README.md").read_text()


def test_the_program_is_printed_as_it_runs_from_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    venv_bin = Path(sys.prefix) / "bin"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # after `make run`: difftest is not on PATH
    monkeypatch.chdir(ROOT)
    (word,) = build.program()
    assert word == os.path.relpath(venv_bin / "difftest") and (ROOT / word).is_file()
    monkeypatch.chdir(tmp_path)
    assert build.program() == [str(venv_bin / "difftest")]  # from elsewhere: its absolute path
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")  # an activated venv: the plain name
    assert build.program() == ["difftest"]
    assert build.command("replay", "a b") == "difftest replay 'a b'"


BROKEN = "local x = = 1\n"


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    scripts = planted_scripts(tmp_path, "promote.lua", "local", "local")
    (scripts / "promote.lua").write_text((scripts / "promote.lua").read_text() + BROKEN)
    return scripts


@pytest.mark.servers
@pytest.mark.parametrize("command", [["run", "--examples", "2", "--workers", "2", "--no-database"],
                                     ["replay", str(ROOT / "tests/histories/d2_meta_error.jsonl")],
                                     ["scenario"]], ids=lambda c: c[0])  # fmt: skip
def test_scripts_that_do_not_compile_are_refused_at_start(
    command: list[str], broken: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = len((broken / "promote.lua").read_text().splitlines())
    code, out, err = outcome([*command, "--lua-scripts", str(broken), "--reports", str(tmp_path / "r")], capsys)
    assert code == EXIT_SETUP, out
    assert len(err) == 1, err
    assert str(broken / "promote.lua") in err[0] and "does not compile" in err[0]
    assert f"user_script:{lines}:" in err[0]  # the compiler's own message, at the appended line
    assert "NOSCRIPT" not in out + err[0] and not (tmp_path / "r").exists()


@pytest.mark.servers
def test_a_lua_mutant_that_does_not_compile_is_unviable(broken: Path, tmp_path: Path) -> None:
    from mutants.score import UNVIABLE, Budget, campaign

    outcome = campaign(DEFAULT_MODULE, broken, tmp_path / "m", Budget(examples=2, timeout_s=60))
    assert outcome.status == UNVIABLE and "does not compile" in outcome.reason
    with pytest.raises(ScriptDoesNotCompile):
        from difftest.replay.replayer import check_scripts

        check_scripts(broken)


@pytest.mark.servers
@pytest.mark.subprocess
def test_a_chosen_valkey_version_is_recorded_printed_and_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from difftest.history import format as hist
    from difftest.servers import valkeys

    version = valkeys.NEWEST  # installed into the cache on first use, as every --valkey is
    scripts = planted_scripts(tmp_path, "complete.lua", "'count', 1)", "'count', 2)")
    history = tmp_path / "h.jsonl"
    hist.save(hist.History((hist.call_step("ENQUEUE", "q", "j1", "p", 0), hist.call_step("CLAIM", "q", 100),
                            hist.call_step("COMPLETE", "q", "j1", 1))), history)  # fmt: skip
    reports = ["--reports", str(tmp_path / "r")]
    code, out, _ = outcome(
        ["replay", str(history), "--lua-scripts", str(scripts), "--valkey", version, *reports], capsys
    )
    assert code == EXIT_DIVERGENCE
    line = reproduce_of(out, "artifact: ")
    assert f"--valkey {version}" in line
    artifact = shlex.split(line)[len(build.program()) + 1]
    recorded = json.loads((Path(artifact) / "report.json").read_text())["build"]
    assert recorded["valkey"] == version and recorded["valkey_requested"] is True
    code, out, _ = outcome(["replay", artifact, *reports], capsys)  # no --valkey: the recorded one is chosen
    assert code == EXIT_DIVERGENCE and "reproduced: yes" in out
    assert f"--valkey {version}" in reproduce_of(out, "artifact: ")
