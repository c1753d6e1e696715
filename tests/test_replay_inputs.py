"""What `difftest replay` reads: a regular file (or an artifact's directory) within a documented
bound; a FIFO, a device, a socket, a symlink loop, an oversized file or a history past MAX_STEPS is
one line and exit 2 before any server starts, never a hang, an unbounded read or exit 70. A long
run of steps is cut into bounded pipelines and still replays every step."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from difftest.cli.main import EXIT_OK, EXIT_SETUP, main
from difftest.history import format as hist
from difftest.history.resolve import resolve
from difftest.replay import replayer as replay
from executors.native.adapter import DEFAULT_MODULE

HEADER = '{"format": "difftest-history", "version": 1}'


def enqueues(count: int) -> str:
    steps = (json.dumps({"op": "call", "verb": "ENQUEUE", "queue": "q", "args": [f"j{i}", "p", 0]})
             for i in range(count))  # fmt: skip
    return "\n".join([HEADER, *steps]) + "\n"


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(main(argv)), daemon=True)
    runner.start()
    runner.join(30)  # a FIFO used to hang here for good
    assert result == [EXIT_SETUP], "replay hung or did not refuse"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    for needle in needles:
        assert needle in err[0], (needle, err[0])


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "history.jsonl"
    os.mkfifo(fifo)
    refused(["replay", str(fifo)], capsys, str(fifo), "a FIFO", "not a regular file")
    refused(["replay", str(tmp_path)], capsys, "a FIFO")  # as an artifact's history too


def test_a_device_is_refused_not_read_without_bound(capsys: pytest.CaptureFixture[str]) -> None:
    refused(["replay", "/dev/zero"], capsys, "/dev/zero", "a character device", "not a regular file")


def test_a_symlink_loop_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    refused(["replay", str(tmp_path / "a")], capsys, str(tmp_path / "a"), "symbolic links")


def test_a_socket_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(f"/tmp/difftest-test-{os.getpid()}.sock")  # short: a socket's path has a length limit
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        try:
            refused(["replay", str(path)], capsys, "a socket")
        finally:
            path.unlink()


def test_a_directory_without_a_history_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["replay", str(tmp_path)], capsys, str(tmp_path), "without history.jsonl")


def test_a_file_past_the_bound_is_refused_at_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as out:
        out.truncate(hist.MAX_FILE_BYTES + 1)  # sparse: no disk spent
    refused(["replay", str(big)], capsys, str(big), f"{hist.MAX_FILE_BYTES // 2**20} MiB")


def test_a_history_past_the_step_limit_is_refused_at_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long = tmp_path / "long.jsonl"
    long.write_text(enqueues(hist.MAX_STEPS + 1))
    refused(["replay", str(long)], capsys, str(long), f"{hist.MAX_STEPS + 1:,} steps", f"{hist.MAX_STEPS:,}",
            "docs/design-notes.md")  # fmt: skip
    long.write_text(enqueues(hist.MAX_STEPS))
    assert len(hist.load(long).steps) == hist.MAX_STEPS  # the limit itself loads


def test_a_long_run_of_steps_is_cut_into_bounded_pipelines() -> None:
    steps = resolve(hist.loads(enqueues(2 * replay.SEGMENT_STEPS + 3)).steps)
    assert [len(s) for s in replay.segments(steps)] == [replay.SEGMENT_STEPS, replay.SEGMENT_STEPS, 3]


@pytest.mark.servers
def test_a_history_longer_than_a_segment_replays_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(replay, "SEGMENT_STEPS", 16)  # a few cut pipelines, each step still walked and judged
    path = tmp_path / "h.jsonl"
    path.write_text(enqueues(50))
    assert main(["replay", str(path), "--reports", str(tmp_path / "r")]) == EXIT_OK
    assert "50 steps compared" in capsys.readouterr().out
    with replay.Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(hist.load(path))
    assert result.ok and len(result.observations) == 50
    assert [len(o.native_after) for o in result.observations] == [n + 2 for n in range(50)]  # rows and pending
