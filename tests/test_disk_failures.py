"""When the machine refuses a write (a full disk, a reports directory that stops being writable): every
report file is whole or absent, never half written; the run's verdict is printed all the same, and
the exit code says what happened (74, or the divergence's 1, whose shrunk history is printed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from difftest.cli.main import EXIT_DIVERGENCE, EXIT_IOERR
from difftest.history import format as hist
from tests.helpers import planted_scripts

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parent.parent


def test_a_write_past_the_disks_end_leaves_the_earlier_file_whole(tmp_path: Path) -> None:
    # RLIMIT_FSIZE in a child process stands for a full disk: its writes past the limit fail
    # (EFBIG; Python ignores SIGXFSZ), deterministically, for root too
    target = tmp_path / "summary.json"
    target.write_text("the earlier, whole report\n")
    child = f"""
import resource
from pathlib import Path
from difftest.base.files import write_atomically
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
write_atomically(Path({str(tmp_path / "small.txt")!r}), "fits\\n")
try:
    write_atomically(Path({str(target)!r}), "x" * 8192)
except OSError as problem:
    print(problem.errno)
"""
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "27", done  # EFBIG: the write failed
    assert target.read_text() == "the earlier, whole report\n"  # not a half of the new one
    assert (tmp_path / "small.txt").read_text() == "fits\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.txt", "summary.json"]  # no temporary left


@contextmanager
def unwritable(directory: Path) -> Iterator[None]:
    """The directory can no longer be written, also by root (chmod does not stop root: the immutable
    attribute does, on file systems that have it); restored after the block."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        undo = ["chmod", "755", str(directory)]
    else:
        made = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True, check=False)
        if made.returncode != 0:
            pytest.skip(f"cannot make {directory} unwritable as root here: {made.stderr.strip()}")
        undo = ["chattr", "-i", str(directory)]
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


def run_with_reports_frozen(tmp_path: Path, *options: str) -> tuple[int, list[str], list[str], Path]:
    """`difftest run` whose run directory stops being writable as soon as the run names it (nothing is
    written there before the end, but a divergence's artifact): exit code, stdout and stderr lines,
    and the run directory."""
    command = [sys.executable, "-m", "difftest", "run", "--workers", "1", "--no-database",
               "--reports", str(tmp_path / "reports"), *options]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first.startswith("campaign:"), first
    directory = Path(first.rsplit("reports in ", 1)[1].strip())
    try:
        with unwritable(directory):
            out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, (first + out).splitlines(), err.splitlines(), directory


@pytest.mark.servers
def test_a_reports_directory_that_stops_being_writable_keeps_the_verdict(tmp_path: Path) -> None:
    code, out, err, directory = run_with_reports_frozen(tmp_path, "--examples", "1", "--seed", "3")
    assert code == EXIT_IOERR, (out[-5:], err)
    # the verdict of what was compared is the last line, whatever happened to the files
    assert out[-1].startswith("agree: 1 history, ") and "0 divergences, coverage complete" in out[-1], out[-3:]
    assert "reports NOT all written" in out[-1]
    said = [line for line in err if line.startswith("difftest:")]
    assert len(said) == 1 and "could not be written" in said[0] and str(directory) in said[0], err
    assert "Traceback" not in "\n".join(err)
    assert list(directory.iterdir()) == []  # no half-written summary.json, no temporary, no empty log


@pytest.mark.servers
def test_a_divergence_whose_artifact_cannot_be_written_is_printed_and_replays(tmp_path: Path) -> None:
    planted = planted_scripts(tmp_path, "complete.lua", "'count', 1)", "'count', 2)")
    code, out, err, directory = run_with_reports_frozen(tmp_path, "--examples", "1", "--seed", "3",
                                                        "--lua-scripts", str(planted))  # fmt: skip
    assert not (directory / "failures").exists()
    assert code == EXIT_DIVERGENCE, (out[-5:], err)  # the divergence outranks the lost files
    assert out[-1].startswith("divergence: ") and "1 divergence," in out[-1], out[-3:]
    assert any(line.startswith("artifact: NOT written to ") for line in out)
    assert any("artifact of batch 0 could not be written" in line for line in err), err
    # the shrunk history is on the terminal: saved by hand, it replays to the same divergence
    start = next(i for i, line in enumerate(out) if '"format": "difftest-history"' in line)
    end = next(i for i in range(start + 1, len(out)) if not out[i].startswith("{"))
    saved = tmp_path / "printed.jsonl"
    saved.write_text("\n".join(out[start:end]) + "\n")
    assert hist.load(saved).steps
    # (no --lua-scripts: the printed header names the build it was found on, and replay runs on it)
    replayed = subprocess.run([sys.executable, "-m", "difftest", "replay", str(saved),
                               "--reports", str(tmp_path / "again")], cwd=ROOT, capture_output=True, text=True,
                              check=False)  # fmt: skip
    assert replayed.returncode == EXIT_DIVERGENCE, replayed.stdout[-500:]


def test_report_on_a_full_disk_is_one_line_and_exit_74_the_earlier_page_kept(tmp_path: Path) -> None:
    summary = {"verdict": "agree", "seed": 1, "budget": {"examples": 1, "seconds": None}, "histories": 1,
               "steps": 3, "divergences": [], "coverage": {}}  # fmt: skip
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "report.html").write_text("<p>the earlier page</p>\n")
    child = f"""
import resource, sys
from difftest.cli.main import main
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.RLIM_INFINITY))  # the page is larger: a full disk
sys.exit(main(["report", {str(tmp_path)!r}]))
"""
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == EXIT_IOERR, done
    (line,) = done.stderr.splitlines()
    assert "report.html could not be written" in line and "file size limit" in line, line
    assert (tmp_path / "report.html").read_text() == "<p>the earlier page</p>\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "summary.json"]


@pytest.mark.servers
def test_a_run_whose_disk_fills_keeps_its_verdict_and_leaves_no_half_file(tmp_path: Path) -> None:
    """The issue's case itself, where this machine lets us: a small file system of its own (tmpfs), all
    but 24 KB taken, as --reports. The history shows on the terminal, no file is half written."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(disk)], capture_output=True,
                             text=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"no small file system of our own here (mount: {mounted.stderr.strip()})")
    try:
        (disk / "filler").write_bytes(b"\0" * 136 * 1024)
        command = [sys.executable, "-m", "difftest", "run", "--examples", "1", "--seed", "3", "--workers", "1",
                   "--no-database", "--reports", str(disk / "reports")]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
        assert done.returncode == EXIT_IOERR, (done.stdout[-500:], done.stderr[-1000:])
        assert done.stdout.splitlines()[-1].startswith("agree: 1 history, ")
        said = [line for line in done.stderr.splitlines() if line.startswith("difftest:")]
        assert len(said) == 1 and "the disk is full" in said[0], said
        left = [p for p in (disk / "reports").rglob("*") if p.is_file()]
        assert all(json.loads(p.read_text()) for p in left if p.suffix == ".json"), left  # whole, if there
        assert not [p for p in left if p.name.endswith(".tmp") or p.name.endswith(".log")], left
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_merge_on_a_full_disk_prints_its_verdict_and_exits_74(tmp_path: Path) -> None:
    """The merged verdict outlives the merged files: printed last, the one line saying what was lost."""
    from tests.test_shards import batch, shard, write_summary

    a = write_summary(tmp_path / "a", shard(1, 2, [batch(0), batch(2)]))
    b = write_summary(tmp_path / "b", shard(2, 2, [batch(1), batch(3)]))
    child = f"""
import resource, sys
from difftest.cli.main import main
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.RLIM_INFINITY))  # the reports are larger
sys.exit(main(["merge", {str(tmp_path / "out")!r}, {str(a)!r}, {str(b)!r}]))
"""
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == EXIT_IOERR, done
    last = done.stdout.splitlines()[-1]
    assert last.startswith("agree: 160 histories, 1,600 steps, 0 divergences, ") and "NOT all written" in last, last
    (line,) = done.stderr.splitlines()
    assert "could not be written" in line and "file size limit" in line, line
