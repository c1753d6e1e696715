"""A defect planted in a copy of a Lua script is caught, saved, and reproduced by `difftest replay`."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.cli.main import EXIT_DIVERGENCE, EXIT_NOT_REPRODUCED, EXIT_SETUP, main
from difftest.history import format as hist
from difftest.replay.artifacts import expected_verdict, save_divergence
from difftest.replay.replayer import replay_once
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import planted_scripts

HISTORY = hist.History(
    (
        hist.call_step("ENQUEUE", "q", "j1", "p", 0),
        hist.call_step("ENQUEUE", "q", "j2", "p", 0),
        hist.call_step("CLAIM", "q", 100),
        hist.call_step("COMPLETE", "q", "j1", 1),
        hist.call_step("CLAIM", "q", 100),
        hist.call_step("COMPLETE", "q", "j2", 1),
    )
)


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """executors/lua with COMPLETE counting two completions instead of one."""
    return planted_scripts(tmp_path, "complete.lua", "'count', 1)", "'count', 2)")


@pytest.mark.servers
def test_the_unmodified_scripts_agree() -> None:
    assert replay_once(HISTORY, DEFAULT_MODULE).ok


@pytest.mark.servers
def test_planted_defect_is_caught_and_reproduced(
    planted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = replay_once(HISTORY, DEFAULT_MODULE, lua_scripts=planted)
    assert result.divergence is not None
    assert result.divergence.index == 3  # the first COMPLETE
    assert "keyspaces differ" in result.divergence.reason
    artifact = save_divergence(result, tmp_path / "artifact")
    report = (artifact / "report.txt").read_text()
    assert "DIVERGENCE at step 3" in report and "metrics:completed" in report and "EMQ.COMPLETE" in report
    assert len(hist.load(artifact / "history.jsonl").steps) == 4  # the history up to the failing step
    assert expected_verdict(artifact) == {"verdict": "divergence", "step": 3, "reason": result.divergence.reason}
    code = main(["replay", str(artifact), "--lua-scripts", str(planted), "--reports", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == EXIT_DIVERGENCE
    assert "reproduced: yes, the same step and reason" in out
    # the fixed scripts no longer reproduce it
    code = main(["replay", str(artifact), "--reports", str(tmp_path / "r")])
    assert code == EXIT_NOT_REPRODUCED  # a found defect that is gone is never "agree"
    assert "reproduced: NO" in capsys.readouterr().out


@pytest.mark.servers
def test_an_artifact_is_never_overwritten(planted: Path, tmp_path: Path) -> None:
    result = replay_once(HISTORY, DEFAULT_MODULE, lua_scripts=planted)
    save_divergence(result, tmp_path / "a")
    with pytest.raises(FileExistsError):
        save_divergence(result, tmp_path / "a")


@pytest.mark.subprocess  # a fresh cache: the frozen clock is compiled (cc) before the refusal
def test_bad_inputs_get_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "difftest-history", "version": 1}\n{"op": "advance", "ms": "x"}\n')
    assert main(["replay", str(bad)]) == EXIT_SETUP
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.jsonl:2 field 'ms'" in err
    good = tmp_path / "good.jsonl"
    hist.save(HISTORY, good)
    assert main(["replay", str(good), "--module", str(tmp_path / "no.so")]) == EXIT_SETUP
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no.so: no such file" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["run", "--lua-scripts", str(empty)]) == EXIT_SETUP
    assert "lacks" in capsys.readouterr().err
