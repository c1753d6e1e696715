"""`difftest bisect` on a real repository: a copy of executors/ in git, a defect planted in a known
commit, a commit whose crate does not compile just before it; real cargo builds, real servers, the
real command line. It names the planted commit, skips the broken one, leaves the user's checkout as
it was, and prints a replay that reproduces on the kept build. Bad input is one line, exit 2."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from difftest.base.exits import EXIT_DIVERGENCE, EXIT_INTERRUPTED, EXIT_OK, EXIT_SETUP, EXIT_TERMINATED
from executors.native.adapter import CRATE_DIR

pytestmark = [pytest.mark.servers, pytest.mark.build, pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parent.parent
GIT = ["git", "-c", "user.name=difftest", "-c", "user.email=difftest@example.invalid", "-c", "commit.gpgsign=false"]
# what the planted defect changes (mutants/catalogue/lua/lua-complete-double-counts.patch): COMPLETE
# counts a finished job twice in metrics:completed
DEFECT = ("complete.lua", "'count', 1)", "'count', 2)")
BROKEN = "\nfn broken( {\n"  # the crate does not compile with this at the end of src/lib.rs
HISTORY = [
    {"format": "difftest-history", "version": 1, "start_ms": 1767225600000, "note": "COMPLETE's counter"},
    {"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "payload", 0]},
    {"op": "call", "verb": "CLAIM", "queue": "q", "args": [100]},
    {"op": "call", "verb": "COMPLETE", "queue": "q", "args": ["j1", 1]},
]


def git(repo: Path, *words: str) -> str:
    done = subprocess.run([*GIT, "-C", str(repo), *words], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def checkout_state(repo: Path) -> tuple[str, ...]:
    """What a user sees of their checkout: its files' state, HEAD, the worktrees, a bisection under way."""
    bisecting = subprocess.run([*GIT, "-C", str(repo), "bisect", "log"], capture_output=True, text=True, check=False)
    return (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"), git(repo, "worktree", "list"),
            git(repo, "for-each-ref", "refs/bisect"), bisecting.stdout)  # fmt: skip


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} is no longer in {path}: update the planted edit"
    path.write_text(text.replace(old, new))


def difftest(*words: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "difftest", *(str(word) for word in words)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


@dataclass(frozen=True)
class Planted:
    base: Path  # the test's directory: bisect runs from here
    repo: Path
    commits: list[str]  # oldest first
    side: list[str]  # a branch from commits[3]: the defect planted where the crate does not compile
    artifact: Path  # the divergence the defect makes, saved by `difftest replay`
    target: Path  # the cargo target directory the bisections share


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    """A repository of nine commits: 1 good, 2-4 a README, 5 breaks the crate, 6 mends it, 7 plants
    the defect, 8-9 a README; bisected from 1 to 9, git bisect proposes 5 first (the middle)."""
    base = tmp_path_factory.mktemp("bisect")
    repo = base / "repo"
    (repo / "executors").mkdir(parents=True)
    shutil.copytree(ROOT / "executors" / "lua", repo / "executors" / "lua",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copytree(CRATE_DIR, repo / "executors" / "native", ignore=shutil.ignore_patterns("target", "__pycache__"))
    readme = repo / "README.md"
    readme.write_text("# the queue\n")
    git(repo, "init", "--quiet")
    commits = [commit(repo, "the executors")]
    for n in (2, 3, 4):
        readme.write_text(readme.read_text() + f"line {n}\n")
        commits.append(commit(repo, f"README, line {n}"))
    lib = repo / "executors" / "native" / "src" / "lib.rs"
    whole = lib.read_text()
    lib.write_text(whole + BROKEN)
    commits.append(commit(repo, "a half-written function"))
    lib.write_text(whole)
    commits.append(commit(repo, "the function dropped"))
    script, old, new = DEFECT
    edit(repo / "executors" / "lua" / script, old, new)
    commits.append(commit(repo, "count completions (the planted defect)"))
    for n in (8, 9):
        readme.write_text(readme.read_text() + f"line {n}\n")
        commits.append(commit(repo, f"README, line {n}"))
    assert len(commits) == 9
    # a side branch from 4: the crate broken and the defect planted in one commit, the crate mended in the next
    main = git(repo, "symbolic-ref", "--short", "HEAD")
    git(repo, "checkout", "--quiet", "-b", "side", commits[3])
    lib.write_text(whole + BROKEN)
    edit(repo / "executors" / "lua" / script, old, new)
    side = [commit(repo, "a half-written function, and the planted defect")]
    lib.write_text(whole)
    side.append(commit(repo, "the function dropped, on the side"))
    git(repo, "checkout", "--quiet", main)
    # the artifact: the history replayed on the defective scripts (and this checkout's module) diverges
    (base / "history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in HISTORY))
    found = difftest("replay", base / "history.jsonl", "--lua-scripts", repo / "executors" / "lua",
                     "--reports", base / "found", cwd=base)  # fmt: skip
    assert found.returncode == EXIT_DIVERGENCE, found.stdout + found.stderr
    assert "verdict: DIVERGENCE at step 2" in found.stdout and "metrics:completed" in found.stdout
    (artifact,) = (base / "found").glob("*/divergence")
    # a cargo target directory seeded with this checkout's dependency builds (mtimes kept, so cargo
    # reuses them): only the crate itself is compiled, not its dependencies
    target = base / "target"
    built = CRATE_DIR / "target" / "release"
    if built.is_dir():
        shutil.copytree(built, target / "release", symlinks=True,
                        ignore=shutil.ignore_patterns("*emq_native*", "emq-native-*", "incremental"))  # fmt: skip
    return Planted(base, repo, commits, side, artifact, target)


@pytest.mark.timeout(900)  # without this checkout's dependency builds to seed from, cargo builds them first
def test_bisect_names_the_planted_commit_and_skips_the_broken_one(history: Planted) -> None:
    base, repo, commits = history.base, history.repo, history.commits
    artifact, target = history.artifact, history.target
    good, broken, mended, planted, bad = commits[0], commits[4], commits[5], commits[6], commits[8]
    (repo / "notes.txt").write_text("the user's own work in progress\n")  # an untracked file stays as it is
    # the user's own bisection, under way in their checkout (without moving it), is theirs: untouched
    git(repo, "bisect", "start", "--no-checkout", commits[8], commits[0])
    git(repo, "bisect", "good", commits[2])
    before = checkout_state(repo)
    scratch = base / "tmp"  # the bisection's temporary directory goes here, to be seen removed
    scratch.mkdir()
    done = difftest("bisect", artifact, "--good", good, "--bad", bad, "--repo", repo, "--reports", base / "bisects",
                    "--cargo-target-dir", target, cwd=base, env={**os.environ, "TMPDIR": str(scratch)})  # fmt: skip
    out = done.stdout
    assert done.returncode == EXIT_OK, out + done.stderr
    assert f"the first bad commit: {planted} count completions (the planted defect)" in out
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert steps, out
    # the broken commit is the middle: git bisect proposes it first, and it is skipped for its build
    assert steps[0].startswith(f"step 1: {broken[:12]} ") and "build failed" in steps[0], out
    assert steps[0].endswith("-> skip") or "-> skip;" in steps[0], out
    assert any(line.startswith("step ") and mended[:12] in line and "-> good" in line for line in steps), out
    # one crate tree besides the broken one: built once (at --bad), every other commit reuses it
    assert out.count("built in") == 1 and out.count("build failed") == 1, out
    # the user's checkout and bisection are as they were, no worktree left, the temporary directory gone
    after = checkout_state(repo)
    git(repo, "bisect", "reset")
    assert after == before and "# good: " in after[-1]
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert not list(scratch.iterdir())
    # the reproduce line, run as printed (from where bisect ran), reproduces on the kept build
    (line,) = [line for line in out.splitlines() if line.startswith("reproduce: ")]
    words = shlex.split(line.removeprefix("reproduce: "))
    assert words[words.index("--module") + 1].startswith(f"bisects{os.sep}") and planted[:12] in line
    again = subprocess.run([*words, "--reports", str(base / "again")], cwd=base, capture_output=True, text=True,
                           timeout=120, check=False)  # fmt: skip
    assert again.returncode == EXIT_DIVERGENCE, again.stdout + again.stderr
    assert "reproduced: yes, the same step and reason" in again.stdout
    (run,) = (base / "bisects").iterdir()
    assert "the first bad commit" in (run / "bisect.txt").read_text()


@pytest.mark.timeout(900)
def test_a_skipped_commit_in_the_way_names_the_commits_the_first_bad_is_one_of(history: Planted) -> None:
    base, repo, commits, side = history.base, history.repo, history.commits, history.side
    done = difftest("bisect", history.artifact, "--good", commits[3], "--bad", side[1], "--repo", repo,
                    "--reports", base / "open", "--cargo-target-dir", history.target, cwd=base)  # fmt: skip
    out = done.stdout
    assert done.returncode == EXIT_OK, out + done.stderr
    assert "the first bad commit is one of these 2" in out
    assert f"  {side[0]} a half-written function" in out and f"  {side[1]} the function dropped" in out
    # the build kept is the earliest commit tested bad: --bad here
    (line,) = [line for line in out.splitlines() if line.startswith("reproduce: ")]
    assert f"{side[1][:12]}{os.sep}" in line
    assert len(git(repo, "worktree", "list").splitlines()) == 1


@pytest.mark.timeout(900)
def test_an_artifact_that_reproduces_at_good_already_is_refused(history: Planted) -> None:
    base, repo, commits = history.base, history.repo, history.commits
    artifact, target = history.artifact, history.target
    done = difftest("bisect", artifact, "--good", commits[6], "--bad", commits[8], "--repo", repo,
                    "--reports", base / "refused", "--cargo-target-dir", target, cwd=base)  # fmt: skip
    assert done.returncode == EXIT_SETUP, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert "already reproduces at --good" in line and "pass an older --good" in line
    assert len(git(repo, "worktree", "list").splitlines()) == 1 and not (base / "refused").exists()


def test_bad_input_is_one_line_and_exit_2(history: Planted) -> None:
    base, repo, commits, artifact = history.base, history.repo, history.commits, history.artifact
    good, bad = commits[0], commits[8]
    cases: dict[str, tuple[Path, str, str, Path]] = {  # what the line says: artifact, --good, --bad, --repo
        "no such file or directory": (base / "no-such-artifact", good, bad, repo),
        "without history.jsonl": (repo, good, bad, repo),
        "--good no-such-rev: no such commit": (artifact, "no-such-rev", bad, repo),
        "not a git working tree": (artifact, good, bad, base),
        "is not an ancestor of --bad": (artifact, bad, good, repo),
    }
    for expected, (path, good_rev, bad_rev, where) in cases.items():
        done = difftest("bisect", path, "--good", good_rev, "--bad", bad_rev, "--repo", where,
                        "--reports", base / "bad-input", cwd=base)  # fmt: skip
        assert done.returncode == EXIT_SETUP, (expected, done.stdout, done.stderr)
        (line,) = done.stderr.splitlines()
        assert expected in line and line.startswith("difftest: "), (expected, line)
        assert done.stdout == "", (expected, done.stdout)
    assert not (base / "bad-input").exists()
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def _processes_naming(text: str) -> list[str]:
    """The command lines of the processes still running that name `text` (a directory of the test's)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(text in word for word in words):
            found.append(" ".join(words))
    return found


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("number", "code"), [(signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGTERM, EXIT_TERMINATED)])
def test_a_stopped_bisection_leaves_no_worktree_build_or_process(history: Planted, number: int, code: int) -> None:
    base, repo, commits = history.base, history.repo, history.commits
    before = checkout_state(repo)
    scratch = base / f"tmp-{number}"
    scratch.mkdir()
    words = [sys.executable, "-m", "difftest", "bisect", str(history.artifact), "--good", commits[0], "--bad",
             commits[8], "--repo", str(repo), "--reports", str(base / f"stopped-{number}")]  # fmt: skip
    # a target directory of its own in the temporary one: cargo compiles the dependencies, and is stopped doing so
    with subprocess.Popen(words, cwd=base, env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as bisect:  # fmt: skip
        assert bisect.stdout is not None
        first = bisect.stdout.readline()
        assert first.startswith("bisect: "), first
        deadline = time.monotonic() + 60
        while not any("rustc" in line for line in _processes_naming(str(scratch))):
            assert time.monotonic() < deadline, "cargo never started compiling"
            time.sleep(0.1)
        bisect.send_signal(number)
        out, err = bisect.communicate(timeout=120)
    assert bisect.returncode == code, first + out + err
    assert "interrupted: stopped by" in out
    assert checkout_state(repo) == before
    assert not list(scratch.iterdir()) and not (base / f"stopped-{number}").exists()
    deadline = time.monotonic() + 10  # rustc, killed with its cargo, may take a moment to go
    while _processes_naming(str(scratch)):
        assert time.monotonic() < deadline, _processes_naming(str(scratch))
        time.sleep(0.1)
