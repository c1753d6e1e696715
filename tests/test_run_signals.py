"""`difftest run` ended by a signal, as CI step timeouts, `timeout` and `docker stop` end it: SIGINT
(Ctrl-C, to the whole process group), SIGTERM and SIGKILL (to the runner alone). Whatever the
signal, nothing of the run is left: no process of it (workers, valkey-server, the resource
tracker), no data directory, clock segment or semaphore in /dev/shm. SIGINT and SIGTERM also write
the report of the work finished so far (exit 130 and 143); SIGKILL cannot, but its workers still
remove their servers and files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHM = Path("/dev/shm")
START_S = 20.0  # until the four servers are up
COMPARED_S = 120.0  # then until the run reports a finished batch (a machine under load is slow)
GONE_S = 20.0  # after the signal: the run, and everything it started, must be gone by then


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def in_group(group: int) -> set[int]:
    """The live processes of a process group (what a shell's job, or `start_new_session`, makes)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else []
        except OSError:
            continue
        if fields and int(fields[2]) == group and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running, and not a zombie (a zombie child of ours is gone for every purpose but its pid)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Footprint:
    """What a running `difftest run` holds, seen from /proc: its processes, its servers, and its
    entries in /dev/shm (data directories, multiprocessing semaphores)."""

    group: int = 0  # the runner's process group: servers started after a look are in it too
    processes: set[int] = field(default_factory=set)
    servers: set[int] = field(default_factory=set)
    shm: set[Path] = field(default_factory=set)

    def add(self, runner: int) -> None:
        self.group = os.getpgid(runner)
        for pid in {runner} | descendants(runner):
            self.processes.add(pid)
            line = _cmdline(pid)
            if line and line[0].endswith("valkey-server"):
                self.servers.add(pid)
                if "--dir" in line:  # <root>/<name>: the root is the group's difftest-* directory
                    workdir = Path(line[line.index("--dir") + 1])
                    if workdir.parent.parent == SHM:
                        self.shm.add(workdir.parent)
            try:
                maps = (Path("/proc") / str(pid) / "maps").read_text()
            except OSError:
                continue
            for row in maps.splitlines():
                where = row.split(maxsplit=5)[5:]
                if where and where[0].startswith(f"{SHM}/sem.mp-"):
                    self.shm.add(Path(where[0].removesuffix(" (deleted)")))

    def left(self) -> tuple[list[int], list[str]]:
        processes = {p for p in self.processes if alive(p)} | in_group(self.group)
        return sorted(processes), sorted(str(p) for p in self.shm if p.exists())


class Run:
    """`difftest run` in its own session, its stderr read as it comes (a progress line per batch)."""

    def __init__(self, reports: Path) -> None:
        command = [sys.executable, "-m", "difftest", "run", "--seconds", "60", "--workers", "2", "--no-database",
                   "--seed", "5", "--reports", str(reports)]  # fmt: skip
        environment = {**os.environ, "DIFFTEST_PROGRESS_SECONDS": "0"}  # a line after every batch
        # its own session: a process group of its own, as a shell gives a command it runs
        self.out = reports.parent / "run-stdout.txt"  # its terminal output, to read its last line
        with self.out.open("wb") as out:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.PIPE,
                                            start_new_session=True, env=environment)  # fmt: skip
        self.lines: list[bytes] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def pid(self) -> int:
        return self.process.pid

    def compared(self) -> bool:
        """Whether a progress line reports finished histories (`progress: 3/60 s, 40 histories, ...`)."""
        return any(re.match(rb"progress: [^,]*, [1-9][\d,]* histories", line) for line in list(self.lines))

    def stderr(self) -> bytes:
        self.reader.join(timeout=30)
        return b"".join(self.lines)


def await_comparing(run: Run) -> Footprint:
    """Wait until both workers' server pairs are up and the run reports a finished batch (so there
    is work to record, however loaded the machine); what the run holds then."""
    deadline = time.monotonic() + START_S
    footprint = Footprint()
    while len(footprint.servers) < 4:
        assert run.process.poll() is None, f"the run ended early: {run.stderr()!r}"
        assert time.monotonic() < deadline, "the four servers did not come up"
        time.sleep(0.1)
        footprint.add(run.pid)
    deadline = time.monotonic() + COMPARED_S
    while not run.compared():
        assert run.process.poll() is None, f"the run ended early: {run.stderr()!r}"
        assert time.monotonic() < deadline, "no batch finished"
        time.sleep(0.05)
    footprint.add(run.pid)
    return footprint


def await_gone(footprint: Footprint) -> tuple[list[int], list[str]]:
    deadline = time.monotonic() + GONE_S
    while (left := footprint.left()) != ([], []) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def ended_by(how: str, tmp_path: Path) -> tuple[int, tuple[list[int], list[str]], bytes]:
    """Start a run, signal it while it compares, and return its exit code, what of it is left
    (processes, /dev/shm entries) once it had time to go, and its stderr (then its stdout)."""
    run = Run(tmp_path / "reports")
    try:
        footprint = await_comparing(run)
        assert footprint.shm, "no /dev/shm entry of the run found: the check would prove nothing"
        if how == "SIGINT":
            os.killpg(run.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        else:
            run.process.send_signal(getattr(signal, how))  # timeout, docker stop, a CI step's limit: the runner
        run.process.wait(timeout=GONE_S + 30)
        return run.process.returncode, await_gone(footprint), run.stderr() + run.out.read_bytes()
    finally:
        if run.process.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.process.wait()


def summary_of(reports: Path) -> dict[str, Any]:
    found = list(reports.glob("*/summary.json"))
    assert len(found) == 1, f"summary.json: {found}"
    document: dict[str, Any] = json.loads(found[0].read_text())
    return document


@pytest.mark.servers
@pytest.mark.subprocess
@pytest.mark.parametrize(("how", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupted_run_removes_everything_and_reports_its_work(how: str, code: int, tmp_path: Path) -> None:
    returned, (processes, shm), output = ended_by(how, tmp_path)
    assert returned == code, output.decode(errors="replace")[-2000:]
    # the terminal ends with the interrupted verdict, and no traceback (not even an ignored one)
    last = output.decode(errors="replace").splitlines()[-1]
    assert last.startswith("interrupted: ") and f"stopped by {'Ctrl-C' if how == 'SIGINT' else how}" in last, last
    assert b"Traceback" not in output and b"Exception ignored" not in output
    assert processes == [], f"processes of the run left: {processes}"
    assert shm == [], f"/dev/shm entries of the run left: {shm}"
    summary = summary_of(tmp_path / "reports")
    assert summary["verdict"] == "interrupted"
    assert summary["histories"] > 0, "the work done was not recorded"
    assert summary["steps"] >= summary["histories"]
    batches = summary["batches"]  # the finished ones: a batch in flight is dropped
    assert batches and sum(b["histories"] for b in batches) == summary["histories"]
    assert summary["progress"] and len(summary["coverage_missing"]) < len(summary["coverage"])
    assert any((tmp_path / "reports").glob("*/report.html"))


@pytest.mark.servers
@pytest.mark.subprocess
def test_a_killed_runner_takes_its_workers_and_servers_with_it(tmp_path: Path) -> None:
    returned, (processes, shm), _ = ended_by("SIGKILL", tmp_path)
    assert returned == -signal.SIGKILL
    assert processes == [], f"processes of the run left: {processes}"
    assert shm == [], f"/dev/shm entries of the run left: {shm}"


@pytest.mark.subprocess
def test_an_interrupt_that_lands_in_a_gc_callback_prints_nothing() -> None:
    """Ctrl-C during a garbage collection raises in Hypothesis's gc callback, where Python can only
    print it as "Exception ignored"; the campaign remembers the signal and prints nothing of it.
    (In a process of its own: pytest takes such exceptions over in its own.)"""
    child = """
import gc, sys
from difftest.campaign.driver import quiet_swallowed_interrupts
def interrupted(phase, info):
    if phase == "start":
        raise KeyboardInterrupt
gc.callbacks.append(interrupted)
print("before", file=sys.stderr, flush=True)
gc.collect()
print("quiet", file=sys.stderr, flush=True)
with quiet_swallowed_interrupts():
    gc.collect()
gc.callbacks.remove(interrupted)
print("after", file=sys.stderr, flush=True)
"""
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, check=True)
    before, quiet = done.stderr.split("quiet\n")
    assert "Exception ignored" in before and "KeyboardInterrupt" in before  # what it printed without
    assert quiet == "after\n"


@pytest.mark.subprocess
def test_the_next_start_removes_what_killed_processes_left(tmp_path: Path) -> None:
    from difftest.servers.leftovers import OWNER_FILE, sweep_leftovers

    gone = _dead_pid()
    mine = os.getpid()
    for name, owner in (("difftest-dead", gone), ("difftest-live", mine), ("difftest-other", None)):
        (tmp_path / name).mkdir()
        if owner is not None:
            (tmp_path / name / OWNER_FILE).write_text(f"{owner}\n")
    removed = sweep_leftovers(tmp_path)
    # a dead owner's directory goes; a live one's, or one of no campaign, stays
    assert {p.name for p in removed} == {"difftest-dead"}
    assert {p.name for p in tmp_path.iterdir()} == {"difftest-live", "difftest-other"}


@pytest.mark.subprocess
def test_a_group_names_its_owner_and_the_next_group_removes_a_killed_ones() -> None:
    """A server group's directory in /dev/shm names the process that made it; one whose maker was
    killed (SIGKILL: no cleanup ran, as a test fixture's under a killed pytest) goes at the next
    group's start, and a live maker's stays."""
    from difftest.servers.group import ServerGroup
    from difftest.servers.leftovers import OWNER_FILE

    child = subprocess.Popen(
        [sys.executable, "-c", "from difftest.servers.group import ServerGroup\n"
         "import time\ngroup = ServerGroup()\nprint(group.root, flush=True)\ntime.sleep(120)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    root = Path(child.stdout.readline().strip())
    try:
        assert root.parent == Path("/dev/shm") and (root / OWNER_FILE).read_text() == f"{child.pid}\n"
        with ServerGroup() as alive_beside:  # its maker runs: left alone
            assert root.exists() and (alive_beside.root / OWNER_FILE).read_text() == f"{os.getpid()}\n"
    finally:
        child.kill()
        child.wait()
    assert root.exists()  # nothing removed it: its maker was killed
    with ServerGroup():
        assert not root.exists()


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _lua_server(runner: int) -> int | None:
    """The running Lua server of a run (a fork of its zygote, titled by its socket; without the
    zygote, the server exec'd with --dir .../lua)."""
    found = {pid: " ".join(_cmdline(pid)) for pid in descendants(runner)}
    lua = {pid: line for pid, line in found.items() if "valkey-server" in line and "/lua/valkey.sock" in line}
    forked = [pid for pid, line in lua.items() if "unixsocket:" in line]
    return (forked or list(lua) or [None])[0]


@pytest.mark.servers
@pytest.mark.subprocess
def test_a_lost_lua_server_stops_the_run_never_repaired(tmp_path: Path) -> None:
    """The Lua server, the reference, never crashes by a history's doing: killed mid-campaign, the run
    stops with difftest's own failure code (70, one line naming it), is not repaired, and says no
    verdict (README, exit codes)."""
    command = [sys.executable, "-m", "difftest", "run", "--seconds", "60", "--workers", "1", "--no-database",
               "--seed", "5", "--reports", str(tmp_path / "reports")]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + START_S
        while (lua := _lua_server(process.pid)) is None:
            assert process.poll() is None and time.monotonic() < deadline, "the Lua server did not come up"
            time.sleep(0.05)
        time.sleep(0.5)  # the campaign under way (the corpus runs first)
        os.kill(lua, signal.SIGKILL)
        out, err = process.communicate(timeout=COMPARED_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 70, (out[-500:], err[-2000:])
    said = [line for line in err.splitlines() if line.startswith("difftest:")]
    assert len(said) == 1 and "the Lua server, the reference, was lost" in said[0], err[-2000:]
    assert "agree" not in out and "Traceback" not in err


@pytest.mark.servers
def test_a_lua_server_lost_between_histories_is_not_started_again() -> None:
    """The path that used to repair it: the next history's reset started a dead Lua server again."""
    from difftest.history import format as hist
    from difftest.replay.replayer import ReferenceLost, Replayer
    from executors.native.adapter import DEFAULT_MODULE

    history = hist.History((hist.call_step("ENQUEUE", "q", "j1", "p", 0),))
    with Replayer(DEFAULT_MODULE) as replayer:
        assert replayer.replay(history).divergence is None
        pid = replayer.lua_server.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + GONE_S
        while replayer.lua_server.running and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(ReferenceLost, match="the Lua server, the reference, was lost"):
            replayer.replay(history)
        assert not replayer.lua_server.running  # not started again
