"""The fuzzing service's corpus as a file (`difftest fuzz export` / `import`), as the nightly carries it
from one night to the next: exported whole, imported into a new store without loss or duplicates, a
bad file refused before the store is touched, and a later service replays what was imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.base.exits import EXIT_OK, EXIT_SETUP
from difftest.fuzz.corpusfile import FORMAT, VERSION, digest_of, read_corpus

WAIT_S = 300.0  # a guard against a hang, never a measure of speed


def difftest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "difftest", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=WAIT_S, check=False)  # fmt: skip


def entries(path: Path) -> dict[str, dict[str, object]]:
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["format"] == f"{FORMAT} {VERSION}"
    found = [json.loads(line) for line in lines[1:]]
    return {digest_of(entry["history"]): entry for entry in found}


def labels_of(cwd: Path, state: Path) -> int:
    status = difftest(cwd, "fuzz", "status", "--state", str(state))
    assert status.returncode == EXIT_OK, status.stderr
    line = next(line for line in status.stdout.splitlines() if "behaviour labels" in line)
    return int(line.split("reached: ")[1].split(" behaviour labels")[0])


@pytest.mark.servers
@pytest.mark.subprocess
def test_a_corpus_goes_through_a_file_into_a_new_store_whole_once_and_is_replayed_there(tmp_path: Path) -> None:
    night1, night2 = tmp_path / "night1", tmp_path / "night2"
    done = difftest(tmp_path, "fuzz", "--state", str(night1), "--workers", "1", "--histories", "20", "--seed", "7",
                    "--no-dashboard", "--no-production-size", "--reports", str(tmp_path / "r1"))  # fmt: skip
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    exported = tmp_path / "out" / "corpus.jsonl"
    done = difftest(tmp_path, "fuzz", "export", str(exported), "--state", str(night1))
    assert done.returncode == EXIT_OK, done.stderr
    first = entries(exported)
    assert first and f"{len(first):,} histories" in done.stdout
    assert not list(exported.parent.glob(".*.tmp"))  # written atomically: no temporary left

    # a new store (the next night's runner): everything comes in, once
    done = difftest(tmp_path, "fuzz", "import", str(exported), "--state", str(night2))
    assert done.returncode == EXIT_OK, done.stderr
    assert f"{len(first):,} new histories, 0 already held" in done.stdout
    done = difftest(tmp_path, "fuzz", "import", str(exported), "--state", str(night2))
    assert f"0 new histories, {len(first):,} already held" in done.stdout
    again = tmp_path / "again.jsonl"
    assert difftest(tmp_path, "fuzz", "export", str(again), "--state", str(night2)).returncode == EXIT_OK
    assert entries(again).keys() == first.keys()

    # a bad file is one line and exit 2, and the store is as it was; a history that no longer loads is
    # counted and left out, the rest of its file still comes in
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "difftest-corpus 0"}\n')
    done = difftest(tmp_path, "fuzz", "import", str(exported), str(bad), "--state", str(night2))
    assert done.returncode == EXIT_SETUP and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "difftest-corpus 0" in done.stderr and "Traceback" not in done.stderr
    lines = exported.read_text().splitlines()
    one = json.loads(lines[1])
    history = one["history"].splitlines()
    changed = "\n".join([history[0], history[1].replace('"verb": "', '"verb": "X'), *history[2:]]) + "\n"
    mixed = tmp_path / "mixed.jsonl"
    newer = json.loads(lines[1])
    newer["history"] = one["history"].replace('"start_ms": ', '"start_ms": 1', 1)  # another history, still valid
    mixed.write_text("\n".join([lines[0], json.dumps({**one, "history": changed}), json.dumps(newer)]) + "\n")
    read = read_corpus(mixed.read_text(), "mixed")
    assert len(read.refused) == 1 and read.refused[0].startswith("line 2:") and len(read.entries) == 1
    done = difftest(tmp_path, "fuzz", "import", str(mixed), "--state", str(night2))
    assert done.returncode == EXIT_OK, done.stderr
    assert "1 new histories, 0 already held; 1 refused" in done.stdout and "line 2:" in done.stdout
    assert difftest(tmp_path, "fuzz", "export", str(tmp_path), "--state", str(night2)).returncode == EXIT_SETUP

    # the next night's service replays the imported corpus before it generates: with no class corpus and
    # a budget of the corpus's size it reaches every label the first night reached
    budget = str(len(first) + 1)
    done = difftest(tmp_path, "fuzz", "--state", str(night2), "--workers", "1", "--no-class-corpus", "--histories",
                    budget, "--seed", "8", "--no-dashboard", "--no-production-size",
                    "--reports", str(tmp_path / "r2"))  # fmt: skip
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert labels_of(tmp_path, night2) >= labels_of(tmp_path, night1) > 0


def test_export_and_import_take_files_and_the_other_actions_none(tmp_path: Path) -> None:
    from difftest.cli.main import main

    state = ["--state", str(tmp_path / "state")]
    assert main(["fuzz", "export", *state]) == EXIT_SETUP
    assert main(["fuzz", "export", "a.jsonl", "b.jsonl", *state]) == EXIT_SETUP
    assert main(["fuzz", "import", *state]) == EXIT_SETUP
    assert main(["fuzz", "import", str(tmp_path / "missing.jsonl"), *state]) == EXIT_SETUP
    assert main(["fuzz", "status", "extra.jsonl", *state]) == EXIT_SETUP
