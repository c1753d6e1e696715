"""`difftest fuzz`, the fuzzing service, as real processes on real servers: a planted defect found once
by two services sharing one database and replayed by its printed line; SIGTERM drains and leaves
nothing; a killed worker is replaced; a dead worker's failure is recorded by another; `fuzz status`
prints the store's figures."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from difftest.base.exits import EXIT_DIVERGENCE, EXIT_OK, EXIT_SETUP, EXIT_TERMINATED
from difftest.fuzz.store import Store, pending_field
from difftest.servers.group import ServerGroup
from tests.helpers import planted_scripts
from tests.test_run_signals import Footprint, _cmdline, await_gone

# what a test that uses one of these fixtures needs (tests/conftest.py marks it so)
FIXTURE_NEEDS = {"database": ("servers",)}

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 240.0  # a guard against a hung service, never a measure of speed (a loaded machine is slow)


@pytest.fixture
def database() -> Iterator[str]:
    """A plain valkey-server on a TCP port: the shared database every service joins."""
    with ServerGroup() as group:
        server = group.add("shared", tcp_port=0)
        yield f"valkey://127.0.0.1:{server.tcp_port}/0"


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """executors/lua with COMPLETE counting two completions instead of one."""
    return planted_scripts(tmp_path, "complete.lua", "'count', 1)", "'count', 2)")


class Fuzz:
    """`difftest fuzz` in its own session (a process group, as a shell gives a command), its output in a
    file; run from `tmp_path`, so that the lines it prints run from there and write nothing in the checkout."""

    def __init__(self, tmp_path: Path, name: str, *args: str) -> None:
        self.out = tmp_path / f"{name}.out"
        self.cwd = tmp_path
        command = [sys.executable, "-m", "difftest", "fuzz", "--reports", str(tmp_path / "reports"), *args]
        with self.out.open("wb") as out:
            self.process = subprocess.Popen(command, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)  # fmt: skip

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait(self) -> int:
        return self.process.wait(timeout=WAIT_S)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)
            self.process.wait()


def until(what: str, condition: Any, *running: Fuzz) -> Any:
    """Poll `condition` until it returns something true (a guard of WAIT_S against a hang)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = condition()
        if found:
            return found
        for fuzz in running:
            assert fuzz.process.poll() is None, f"the service ended early: {fuzz.text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S:.0f} s"
        time.sleep(0.2)


@pytest.mark.servers
@pytest.mark.subprocess
def test_a_planted_defect_is_found_once_by_two_services_and_replays_as_printed(
    database: str, planted: Path, tmp_path: Path
) -> None:
    common = [
        "--database",
        database,
        "--lua-scripts",
        str(planted),
        "--no-dashboard",
        "--histories",
        "60",
        "--no-production-size",
    ]
    first = Fuzz(tmp_path, "first", *common, "--workers", "2")
    second = Fuzz(tmp_path, "second", *common, "--workers", "1", "--no-class-corpus")
    try:
        assert first.wait() == EXIT_DIVERGENCE, first.text()
        assert second.wait() == EXIT_DIVERGENCE, second.text()
    finally:
        first.kill()
        second.kill()
    store = Store(database)
    try:
        findings = store.findings()
        totals = store.totals()
        workers = store.workers()
    finally:
        store.close()
    assert len(findings) == 1, [f["described"] for f in findings]  # one defect: one finding, however often met
    (finding,) = findings
    assert finding["parts"]["verb"] == "COMPLETE" and "emq:{*}:metrics:completed" in finding["parts"]["keys"]
    assert totals["findings"] == 1 and int(finding["seen"]) + totals.get("met_again", 0) >= 2
    assert {record["service"] for record in workers.values()} == {
        line.split()[2].rstrip(",") for fuzz in (first, second) for line in fuzz.text().splitlines()[:1]
    }
    assert all(record["state"] == "stopped" for record in workers.values())
    # each service prints it once (the one that recorded it, and the one that joined), with the line that replays it
    printed = {}
    for fuzz in (first, second):
        lines = re.findall(r"^artifact: (\S+) \(reproduce: (.+)\)$", fuzz.text(), re.M)
        assert len(lines) == 1, fuzz.text()
        printed[fuzz.pid] = lines[0]
    assert {Path(artifact).name for artifact, _ in printed.values()} == {finding["signature"]}
    artifact, reproduce = printed[first.pid]
    assert Path(first.cwd, artifact, "history.jsonl").is_file()
    done = subprocess.run(shlex.split(reproduce), cwd=first.cwd, capture_output=True, text=True, timeout=WAIT_S,
                          check=False)  # fmt: skip
    assert done.returncode == EXIT_DIVERGENCE, done.stdout + done.stderr
    assert "reproduced: yes, the same step and reason" in done.stdout
    # `fuzz status` prints the same finding and its reproduce line
    status = subprocess.run([sys.executable, "-m", "difftest", "fuzz", "status", "--database", database, "--reports",
                             str(tmp_path / "reports")], cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S,
                            check=False)  # fmt: skip
    assert status.returncode == EXIT_OK, status.stderr
    assert f"FINDING {finding['signature']}" in status.stdout and "findings 1 " in status.stdout
    assert f"histories {totals['histories']:,}" in status.stdout


@pytest.mark.servers
@pytest.mark.subprocess
def test_sigterm_drains_a_service_a_killed_worker_is_replaced_and_nothing_is_left(
    database: str, tmp_path: Path
) -> None:
    fuzz = Fuzz(tmp_path, "null", "--database", database, "--workers", "2", "--no-class-corpus", "--no-production-size")
    store = Store(database)
    try:
        footprint = Footprint()

        def two_comparing() -> dict[str, Any] | None:
            footprint.add(fuzz.pid)
            workers = store.live_workers()
            busy = {w: r for w, r in workers.items() if r["histories"] > 0}
            return busy if len(busy) == 2 and len(footprint.servers) >= 4 else None

        busy = until("two workers comparing", two_comparing, fuzz)
        assert footprint.shm, "no /dev/shm entry of the service found: the check would prove nothing"
        (victim, record), *_ = sorted(busy.items())
        os.kill(record["pid"], signal.SIGKILL)

        def replaced() -> bool:  # its first record (before it compares: it replays its share of the corpus first)
            now = store.workers().get(victim, {})
            return now.get("pid") not in (None, record["pid"])

        until("the killed worker replaced", replaced, fuzz)
        footprint.add(fuzz.pid)
        fuzz.process.send_signal(signal.SIGTERM)
        code = fuzz.wait()
        assert code == EXIT_TERMINATED, fuzz.text()
        assert await_gone(footprint) == ([], []), "processes or /dev/shm entries of the service left"
        text = fuzz.text()
        assert "worker 0 ended (exit code -9); started again" in text or "worker 1 ended (exit code -9)" in text
        assert "stopped by SIGTERM" in text and "1 worker(s) replaced" in text
        # drained: every worker recorded its end, and the totals hold every history a worker counted
        workers = store.workers()
        assert all(r["state"] == "stopped" for r in workers.values()), workers
        assert store.totals()["histories"] >= sum(r["histories"] for r in workers.values())
        assert store.findings() == [] and "found 0 new finding(s)" in text
    finally:
        fuzz.kill()
        store.close()


@pytest.mark.servers
@pytest.mark.subprocess
def test_a_failure_a_dead_worker_left_is_recorded_by_another(database: str, planted: Path, tmp_path: Path) -> None:
    from difftest.history import format as hist

    failing = hist.History((
        hist.call_step("ENQUEUE", "q", "j1", "p", 0),
        hist.call_step("CLAIM", "q", 100),
        hist.call_step("COMPLETE", "q", "j1", 1),
        hist.call_step("ENQUEUE", "q", "j2", "p", 0),
    ))  # fmt: skip
    store = Store(database)
    try:
        store.check()
        # a worker of a service on another machine found it, began shrinking and died with its machine
        store.beat("elsewhere:1:0", {"state": "shrinking a failure", "histories": 3}, "elsewhere:1:0@1")
        store.client.hset(store.key("workers"), "elsewhere:1:0",
                          json.dumps({"state": "shrinking a failure", "beat": time.time() - 3600}))  # fmt: skip
        store.pend(pending_field("elsewhere:1:0"), "elsewhere:1:0", hist.dumps(failing), {})
        fuzz = Fuzz(tmp_path, "adopter", "--database", database, "--lua-scripts", str(planted), "--workers", "1",
                    "--no-class-corpus", "--no-dashboard", "--histories", "1")  # fmt: skip
        try:
            assert fuzz.wait() == EXIT_DIVERGENCE, fuzz.text()
        finally:
            fuzz.kill()
        assert "1 failure(s) a stopped service left unrecorded" in fuzz.text()
        (finding,) = store.findings()
        assert finding["steps"] == 3 and finding["parts"]["verb"] == "COMPLETE"  # minimised: the 4th step went
        assert store.pending() == 0
    finally:
        store.close()


@pytest.mark.subprocess  # the build record asks valkey-server its --version first
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    from difftest.cli.main import main

    reports = ["--reports", str(tmp_path / "r")]
    assert main(["fuzz", "--database", str(tmp_path / "dir"), *reports]) == EXIT_SETUP
    assert main(["fuzz", "status", "--database", "valkey://127.0.0.1:1/0", *reports]) == EXIT_SETUP


@pytest.mark.servers
@pytest.mark.subprocess
def test_ctrl_c_to_the_whole_process_group_drains_and_leaves_nothing(database: str, tmp_path: Path) -> None:
    from difftest.base.exits import EXIT_INTERRUPTED

    fuzz = Fuzz(tmp_path, "interrupted", "--database", database, "--workers", "1", "--no-class-corpus")
    store = Store(database)
    try:
        footprint = Footprint()

        def comparing() -> bool:
            footprint.add(fuzz.pid)
            return any(r["histories"] > 0 for r in store.live_workers().values()) and len(footprint.servers) >= 2

        until("the worker comparing", comparing, fuzz)
        os.killpg(fuzz.pid, signal.SIGINT)  # a terminal's Ctrl-C: the servers are signalled too
        assert fuzz.wait() == EXIT_INTERRUPTED, fuzz.text()
        assert await_gone(footprint) == ([], []), "processes or /dev/shm entries of the service left"
        assert "stopped by Ctrl-C" in fuzz.text() and "Traceback" not in fuzz.text()
        assert all(r["state"] == "stopped" for r in store.workers().values())
    finally:
        fuzz.kill()
        store.close()


def test_a_long_series_is_thinned_evenly_for_the_page() -> None:
    from difftest.fuzz.dashboard import thinned

    points = [{"t": float(i), "histories": i} for i in range(10_001)]
    shown = thinned(points, 720)
    assert len(shown) == 720 and shown[0] is points[0] and shown[-1] is points[-1]
    gaps = {b["t"] - a["t"] for a, b in itertools.pairwise(shown)}
    assert gaps <= {13.0, 14.0, 15.0}  # even: 10,000 / 719 = 13.9 between neighbours
    assert thinned(points[:5], 720) == points[:5]


@pytest.mark.servers
@pytest.mark.subprocess
def test_without_a_database_the_store_is_this_machines_own_and_a_later_service_resumes_from_it(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    first = Fuzz(tmp_path, "first", "--state", str(state), "--workers", "1", "--no-class-corpus", "--no-dashboard",
                 "--histories", "5")  # fmt: skip
    try:
        assert first.wait() == EXIT_OK, first.text()
    finally:
        first.kill()
    # its store server stopped with it; its data stayed in the state directory
    assert not [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                if str(state) in " ".join(_cmdline(pid))]  # fmt: skip
    assert list((state / "store").glob("appendonlydir/*")) and not (state / "store.url").exists()
    again = Fuzz(tmp_path, "again", "--state", str(state), "--workers", "1", "--no-class-corpus", "--no-dashboard",
                 "--histories", "5")  # fmt: skip
    try:
        assert again.wait() == EXIT_OK, again.text()
    finally:
        again.kill()
    # the second service's totals add to the first's: the records were resumed, not started again
    status = subprocess.run([sys.executable, "-m", "difftest", "fuzz", "status", "--state", str(state)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=WAIT_S, check=False)  # fmt: skip
    assert status.returncode == EXIT_OK, status.stderr
    histories = int(re.search(r"histories ([\d,]+),", status.stdout)[1].replace(",", ""))  # type: ignore[index]
    assert histories >= 10, status.stdout
    assert "workers: 0 live of 2 known" in status.stdout


@pytest.mark.servers
@pytest.mark.subprocess
def test_a_finding_the_known_findings_file_accepts_is_counted_not_recorded(
    database: str, planted: Path, tmp_path: Path
) -> None:
    from difftest.base.exits import EXIT_KNOWN

    # the planted COMPLETE defect's signature (tests/test_findings.py), accepted until far away
    known = tmp_path / "known.toml"
    known.write_text('[[known]]\nsignature = "divergence:1bb3dbf7ab69"\nreason = "https://example.org/issues/1"\n'
                     'accepted_by = "ana"\nexpires = 2099-01-01\n')  # fmt: skip
    options = ["--database", database, "--lua-scripts", str(planted), "--no-dashboard", "--histories", "40",
               "--no-production-size", "--workers", "1", "--known-findings", str(known)]  # fmt: skip
    fuzz = Fuzz(tmp_path, "known", *options)
    try:
        assert fuzz.wait() == EXIT_KNOWN, fuzz.text()
    finally:
        fuzz.kill()
    store = Store(database)
    try:
        findings, totals = store.findings(), store.totals()
    finally:
        store.close()
    assert findings == [] and totals["findings"] == 0 and totals.get("met_known", 0) >= 1
    assert "fuzz: known: " in fuzz.text() and not (tmp_path / "reports" / "fuzz" / "findings").exists()
