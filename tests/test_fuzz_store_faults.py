"""The fuzzing service's store as a real dependency with faults, made by the test on a real valkey-server:
paused (SIGSTOP), gone and back, back from an older append-only file (its last writes lost); the
writes a worker could not make are kept and journalled, sent when the store is back, a dead worker's
journal is sent by the service, the dashboard says the store is away, and a whole service fuzzing
through an outage records its finding and whole counts."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from difftest.base.exits import EXIT_DIVERGENCE
from difftest.fuzz.dashboard import start_dashboard, status_document
from difftest.fuzz.outbox import Outbox, journal_path, send_journals
from difftest.fuzz.store import Store
from difftest.servers.group import ServerGroup
from tests.test_fuzz import Fuzz, planted, until  # noqa: F401 (fixtures)

pytestmark = pytest.mark.servers

WORKER = "host:1:0"


@pytest.fixture
def store_server() -> Iterator[Any]:
    """A valkey-server on a TCP port (its data in an append-only file): the store the faults are made on."""
    with ServerGroup() as group:
        yield group.add("store", tcp_port=0)


def url_of(server: Any) -> str:
    return f"valkey://127.0.0.1:{server.tcp_port}/0"


def fields(name: str) -> dict[str, Any]:
    return {"signature": name, "history": "{}\n", "reason": "planted", "steps": 1, "seen": 1, "artifact": ""}


def record(seq: int, histories: int, findings: int = 0) -> dict[str, Any]:
    return {"pid": os.getpid(), "seq": seq, "state": "fuzzing", "histories": histories, "steps": 10 * histories,
            "findings": findings, "met_again": 0}  # fmt: skip


def lines(path: Path) -> list[list[Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_paused_store_keeps_a_finding_in_the_journal_and_backs_off_until_it_is_back(
    store_server: Any, tmp_path: Path
) -> None:
    store, said = Store(url_of(store_server)), []
    journal = journal_path(tmp_path, WORKER)
    outbox = Outbox(store, journal, said.append)
    outbox.beat(WORKER, record(1, 5), f"{WORKER}@1")
    assert not outbox.away and store.totals()["histories"] == 5
    os.kill(store_server.pid, signal.SIGSTOP)
    try:
        outbox.send("finding", "sig-a", WORKER, fields("sig-a"))  # waits out one timeout, then keeps it
        assert outbox.away and outbox.kept() == 1 and "does not answer" in said[-1]
        assert [entry[:2] for entry in lines(journal)] == [["finding", "sig-a"]]
        # within the backoff nothing waits on the store: kept at once, journalled
        outbox.send("seen_again", "sig-a")
        outbox.beat(WORKER, record(2, 9, findings=1), f"{WORKER}@1")
        assert outbox.kept() == 2 and time.monotonic() < outbox.retry_at
        assert [entry[0] for entry in lines(journal)] == ["finding", "seen_again", "beat"]
    finally:
        os.kill(store_server.pid, signal.SIGCONT)
    until("the backoff", lambda: time.monotonic() >= outbox.retry_at)
    outbox.beat(WORKER, record(3, 12, findings=1), f"{WORKER}@1")
    assert not outbox.away and outbox.kept() == 0 and "is back" in said[-1]
    assert not journal.exists()  # all sent: the journal goes
    (finding,) = store.findings()
    assert finding["signature"] == "sig-a" and int(finding["seen"]) == 2
    assert store.totals() == {"histories": 12, "steps": 120, "findings": 1, "met_again": 0, "met_known": 0}
    assert outbox.outcomes == [("sig-a", True)]


def test_a_store_back_from_an_older_append_only_file_gets_the_lost_finding_again(
    store_server: Any, tmp_path: Path
) -> None:
    store, said = Store(url_of(store_server)), []
    outbox = Outbox(store, journal_path(tmp_path, WORKER), said.append)
    outbox.beat(WORKER, record(1, 5), f"{WORKER}@1")
    older = tmp_path / "older"
    shutil.copytree(store_server.workdir / "appendonlydir", older)  # the store as it was (appendfsync always)
    pending = f"{WORKER}:1"
    outbox.send("pend", pending, WORKER, "{}\n", {})
    outbox.send("finding", "sig-b", WORKER, fields("sig-b"))
    outbox.beat(WORKER, record(2, 8, findings=1), f"{WORKER}@1")
    assert [f["signature"] for f in store.findings()] == ["sig-b"] and store.pending() == 1
    # the store dies and comes back from the older file: the finding, the pending failure and the last record are gone
    store_server.kill()
    shutil.rmtree(store_server.workdir / "appendonlydir")
    shutil.copytree(older, store_server.workdir / "appendonlydir")
    store_server.start()
    assert store.findings() == [] and store.totals()["histories"] == 5
    outbox.beat(WORKER, record(3, 9, findings=1), f"{WORKER}@1")  # may first meet the broken connection
    until("the store", lambda: outbox.flush() and outbox.record is None)
    assert any("lost writes" in line for line in said), said
    assert [f["signature"] for f in store.findings()] == ["sig-b"] and store.pending() == 1
    assert store.totals()["histories"] == 9 and store.totals()["findings"] == 1


def test_a_dead_workers_journal_is_sent_once_the_store_is_back(store_server: Any, tmp_path: Path) -> None:
    store, said = Store(url_of(store_server)), []
    journal = journal_path(tmp_path, WORKER)
    store_server.kill()
    outbox = Outbox(store, journal, said.append)
    outbox.beat(WORKER, record(1, 3), f"{WORKER}@7")
    outbox.send("finding", "sig-c", WORKER, fields("sig-c"))
    outbox.add_labels(Counter({"verb:CLAIM": 2}))
    outbox.close()  # the worker ends with the store away: its journal stays
    assert journal.is_file() and [entry[0] for entry in lines(journal)] == ["beat", "finding", "beat", "labels"]
    assert send_journals(store, journal.parent, said.append) == 0 and journal.is_file()  # still away: kept
    store_server.start()
    assert send_journals(store, journal.parent, said.append) == 1 and not journal.exists()
    assert [f["signature"] for f in store.findings()] == ["sig-c"]
    assert store.totals()["histories"] == 3 and store.coverage()["labels"] == {"verb:CLAIM": 2}


def test_the_dashboard_says_the_store_is_away_and_shows_it_again_when_it_is_back(store_server: Any) -> None:
    server = start_dashboard(url_of(store_server), 0)
    page = f"http://127.0.0.1:{server.server_address[1]}/api/snapshot"

    def snapshot() -> dict[str, Any]:
        with urllib.request.urlopen(page, timeout=30) as reply:
            document: dict[str, Any] = json.load(reply)
            return document

    try:
        assert "away" not in snapshot() and snapshot()["database"] == url_of(store_server)
        store_server.kill()
        away = snapshot()
        assert "is away since" in away["away"] and str(store_server.tcp_port) in away["away"]
        store_server.start()
        assert "away" not in until("the store back", lambda: (lambda d: d if "away" not in d else None)(snapshot()))
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.subprocess
@pytest.mark.timeout(900)
def test_a_service_fuzzing_through_an_outage_records_its_finding_and_whole_counts(
    store_server: Any,
    planted: Path,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    database = url_of(store_server)
    fuzz = Fuzz(tmp_path, "service", "--database", database, "--lua-scripts", str(planted), "--no-dashboard",
                "--histories", "60", "--workers", "1", "--no-production-size", "--no-class-corpus")  # fmt: skip
    store = Store(database)
    try:
        until("the worker's first record", lambda: store.workers(), fuzz)
        store_server.kill()  # gone while the service runs
        until("the service to see the store away", lambda: "is away" in fuzz.text(), fuzz)
        until("the worker to see it", lambda: "does not answer" in fuzz.text(), fuzz)
        store_server.start()  # back, from its append-only file
        # a guard against a hang, never a measure: the finding's shrink under a loaded machine takes minutes
        assert fuzz.process.wait(timeout=540) == EXIT_DIVERGENCE, fuzz.text()
    finally:
        fuzz.kill()
    text = fuzz.text()
    assert "is back after" in text, text
    findings = store.findings()
    assert len(findings) == 1 and findings[0]["parts"]["verb"] == "COMPLETE", text
    # and on the dashboard (its document is the store's, with the reproduce line for this machine)
    shown = status_document(store, tmp_path / "reports")["findings"]
    assert [f["signature"] for f in shown] == [findings[0]["signature"]] and " replay " in shown[0]["reproduce_here"]
    totals = store.totals()
    verdict = re.search(r"compared ([\d,]+) new histories \(([\d,]+) steps", text)
    assert verdict is not None, text
    # whole: the store's counts are the service's own, the outage's histories included
    assert totals["histories"] == int(verdict.group(1).replace(",", "")) >= 60
    assert totals["steps"] == int(verdict.group(2).replace(",", ""))
    assert not list((tmp_path / "reports" / "fuzz" / "outbox").glob("*.jsonl"))  # nothing left unsent


@pytest.mark.subprocess
def test_a_store_with_a_password_is_used_and_the_password_never_printed(store_server: Any, tmp_path: Path) -> None:
    import subprocess
    import sys

    from redis import Redis

    from difftest.base.exits import EXIT_OK, EXIT_SETUP

    with Redis(host="127.0.0.1", port=store_server.tcp_port) as admin:
        admin.config_set("requirepass", "s3cret-pw")
    port = store_server.tcp_port
    with_password = f"valkey://:s3cret-pw@127.0.0.1:{port}/0"
    store = Store(with_password)
    store.check()
    outbox = Outbox(store, journal_path(tmp_path, WORKER), lambda line: None)
    outbox.send("finding", "sig-d", WORKER, fields("sig-d"))
    assert [f["signature"] for f in store.findings()] == ["sig-d"]
    status = subprocess.run([sys.executable, "-m", "difftest", "fuzz", "status", "--database", with_password],
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert status.returncode == EXIT_OK and "FINDING sig-d" in status.stdout, status.stdout + status.stderr
    assert "s3cret-pw" not in status.stdout + status.stderr
    wrong = subprocess.run([sys.executable, "-m", "difftest", "fuzz", "status", "--database",
                            f"valkey://:wrong@127.0.0.1:{port}/0"], capture_output=True, text=True, timeout=120,
                           check=False)  # fmt: skip
    assert wrong.returncode == EXIT_SETUP and wrong.stderr.count("\n") == 1, wrong.stderr
    assert "does not answer" in wrong.stderr and ":wrong@" not in wrong.stderr
