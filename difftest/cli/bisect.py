"""`difftest bisect`: the first commit of a repository whose executors reproduce a divergence artifact."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from difftest.base.exits import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_IOERR,
    EXIT_MEANINGS,
    EXIT_NOT_REPRODUCED,
    EXIT_OK,
    EXIT_SETUP,
    EXIT_TERMINATED,
    OneLineParser,
)
from difftest.base.problems import SetupProblem
from difftest.cli.arguments import DEFAULT_REPORTS, subcommand
from difftest.cli.rundirs import check_reports, make_run_dir, new_run_dir

NATIVE = "executors/native"  # the crate, built at each commit with `cargo build --release`
LUA = "executors/lua"  # the <verb>.lua scripts, replayed as --lua-scripts
ARTIFACT_FIX = "pass a failure artifact (reports/<run>/failures/batch-N) or a history (.jsonl)"
STOP_WAIT_S = 10.0  # a child stopped by SIGTERM has this long to clean up (servers, files) before SIGKILL
# each replay runs this very difftest (not one the current directory or the bisected repository holds):
# -P keeps the current directory off the path, PYTHONPATH names this difftest's own tree first
HARNESS = (sys.executable, "-P", "-m", "difftest")
HARNESS_ROOT = Path(__file__).resolve().parents[2]
# git's own words, read in the C locale: where a step leaves the bisection
FIRST_BAD = re.compile(r"^([0-9a-f]{40,64}) is the first bad commit$", re.MULTILINE)
LEFT = re.compile(r"^Bisecting: (\d+) revisions? left to test after this \(roughly (\d+) steps?\)$", re.MULTILINE)
ONLY_SKIPPED = "The first bad commit could be any of:"
DIVERGENCE = re.compile(r"^verdict: DIVERGENCE at step (\d+): (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    """One commit tested: `verdict` is git bisect's word for it (bad: the artifact reproduces)."""

    verdict: str  # "bad", "good" or "skip"
    what: str  # how the module came (built, cached) and what the replay said, for the progress line


@dataclass(frozen=True)
class Found:
    """The end of a bisection: the first bad commit, or the commits it is one of (skips in the way),
    and the earliest commit tested bad (whose build is kept)."""

    candidates: tuple[str, ...]
    tested_bad: str


# -- processes: each in a session of its own, stopped with everything it started on any way out ----


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait while the block cleans up (a second Ctrl-C must not leave a worktree)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _stop(child: subprocess.Popen[str]) -> None:
    """SIGTERM to the child's process group (cargo's rustc, a replay's servers' owner), SIGKILL if it lingers."""
    with _signals_held():
        try:
            os.killpg(child.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            child.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def _run(command: Sequence[str | Path], cwd: Path | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run to the end, output captured; Ctrl-C or SIGTERM here stops the child's whole group first."""
    words = [str(word) for word in command]
    pipe = subprocess.PIPE
    with subprocess.Popen(words, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=pipe, stderr=pipe, text=True,
                          errors="replace", start_new_session=True) as child:  # fmt: skip
        try:
            out, err = child.communicate()
        except BaseException:
            _stop(child)
            raise
    return subprocess.CompletedProcess(words, child.returncode, out, err)


def _git_environment() -> dict[str, str]:
    """git in the C locale (its words are read), no prompt, and no variable that points it elsewhere."""
    environ = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    return {**environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}


def _harness_environment() -> dict[str, str]:
    paths = [str(HARNESS_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def _git(where: Path, *words: str) -> subprocess.CompletedProcess[str]:
    # no hook of the user's repository runs (post-checkout at every step of the bisection)
    return _run(["git", "-c", "core.hooksPath=/dev/null", "-C", where, *words], env=_git_environment())


def _git_out(where: Path, *words: str) -> str:
    done = _git(where, *words)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(words)} failed in {where}: {_last_line(done.stderr)}")
    return done.stdout.strip()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


# -- the input: an artifact, a repository, two commits ---------------------------------------------


def _artifact(path: Path) -> tuple[Path, bool]:
    """The artifact's history file (absolute) and whether it records the divergence it reproduces."""
    from difftest.history import format as hist
    from difftest.replay.artifacts import EXPECT_FIELD, history_path

    if not path.exists():
        raise SetupProblem(f"{path}: no such file or directory; {ARTIFACT_FIX}")
    history = history_path(path)
    if history != path and not history.exists():
        raise SetupProblem(f"{path} is a directory without history.jsonl; {ARTIFACT_FIX}")
    _, header = hist.load_with_header(history)  # a malformed file: one line (HistoryError), exit 2
    return history.absolute(), isinstance(header.get(EXPECT_FIELD), dict)


def _toplevel(repo: Path | None) -> Path:
    if repo is not None and not repo.is_dir():
        raise SetupProblem(f"--repo {repo}: no such directory; pass the git repository whose {NATIVE} and {LUA} "
                           "to bisect")  # fmt: skip
    done = _git(repo if repo is not None else Path.cwd(), "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        if repo is None:
            raise SetupProblem("the current directory is not inside a git repository: pass --repo PATH, the "
                               f"repository whose {NATIVE} and {LUA} to bisect")  # fmt: skip
        raise SetupProblem(f"--repo {repo} is not a git working tree ({_last_line(done.stderr)}): pass a "
                           "repository's directory")  # fmt: skip
    return Path(done.stdout.strip())


def _commit(repo: Path, rev: str, option: str) -> str:
    done = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise SetupProblem(f"{option} {rev}: no such commit in {repo}; pass a commit git knows there "
                           "(a hash, a branch, a tag, HEAD~5)")  # fmt: skip
    return done.stdout.strip()


def _subject(repo: Path, commit: str) -> str:
    return _git_out(repo, "log", "-1", "--format=%s", commit)


def _tree(repo: Path, commit: str, path: str) -> str | None:
    """The git tree of `path` at `commit` (the key a build is cached by), None when it has none."""
    listed = _git_out(repo, "ls-tree", "-d", commit, "--", path).split()  # "040000 tree <hash>\t<path>"
    return listed[2] if len(listed) >= 3 and listed[1] == "tree" else None


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _here(path: Path) -> str:
    relative = os.path.relpath(path)
    return str(path) if relative.startswith(os.pardir) else relative


# -- the temporary worktree: the user's checkout never changes -------------------------------------


def _remove_worktree(repo: Path, tree: Path) -> None:
    """The worktree gone, its directory and git's record of it (also when its adding was interrupted)."""
    _git(repo, "worktree", "remove", "--force", "--force", str(tree))
    shutil.rmtree(tree, ignore_errors=True)
    done = _git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
    common = Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else repo / ".git"
    for record in (common / "worktrees").glob("*/gitdir"):
        with contextlib.suppress(OSError):
            if Path(record.read_text().strip()).parent == tree:
                shutil.rmtree(record.parent, ignore_errors=True)


# -- one commit: its module built (or cached), its scripts, the artifact replayed on them -----------


class Bisection:
    """The state of one `difftest bisect`: the worktree git bisect moves, the builds by tree, the outcomes."""

    def __init__(self, repo: Path, artifact: Path, expects: bool, work: Path, target: Path,
                 any_divergence: bool, cargo: str) -> None:  # fmt: skip
        self.repo, self.artifact, self.expects, self.work = repo, artifact, expects, work
        self.tree = work / "worktree"
        self.target, self.any_divergence, self.cargo = target, any_divergence, cargo
        self.modules: dict[str, Path | str] = {}  # native tree -> the built .so, or why it does not build
        self.scripts: dict[str, Path] = {}  # lua tree -> a copy of its scripts
        self.outcomes: dict[str, Outcome] = {}
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)

    def clean(self) -> None:
        """The worktree as its commit has it (what a build wrote in it, say a new Cargo.lock, dropped)."""
        _git_out(self.tree, "reset", "--hard", "--quiet")
        _git_out(self.tree, "clean", "-ffdxq")

    def checkout(self, commit: str) -> None:
        self.clean()
        if _git_out(self.tree, "rev-parse", "HEAD") != commit:
            _git_out(self.tree, "checkout", "--detach", "--quiet", commit)

    def build(self, native: str) -> tuple[Path | str, str]:
        """The module of the crate at this tree, built once per tree: the .so or why not, and how it came."""
        if native in self.modules:
            return self.modules[native], "module cached"
        crate = self.tree / NATIVE
        started = time.monotonic()
        env = {**os.environ, "CARGO_TARGET_DIR": str(self.target), "CARGO_TERM_COLOR": "never"}
        done = _run([self.cargo, "build", "--release", "--message-format=json-render-diagnostics",
                     "--manifest-path", crate / "Cargo.toml"], cwd=crate, env=env)  # fmt: skip
        took = f"{time.monotonic() - started:.1f}s"
        built = _cdylib(done.stdout, crate / "Cargo.toml") if done.returncode == 0 else None
        result: Path | str
        if built is None:
            errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
            reason = errors[0] if errors else _last_line(done.stderr)
            result = f"cargo: {reason}" if done.returncode else "cargo built no cdylib (.so)"
        else:
            kept = self.work / "builds" / native / built.name
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(built, kept)
            result = kept
        self.modules[native] = result
        return result, f"built in {took}" if isinstance(result, Path) else f"build failed in {took}"

    def scripts_of(self, lua: str) -> Path:
        if lua not in self.scripts:
            copy = self.work / "lua" / lua
            shutil.copytree(self.tree / LUA, copy, ignore=shutil.ignore_patterns("__pycache__"))
            self.scripts[lua] = copy
        return self.scripts[lua]

    def test(self, commit: str) -> Outcome:
        if commit not in self.outcomes:
            self.outcomes[commit] = self._test(commit)
        return self.outcomes[commit]

    def _test(self, commit: str) -> Outcome:
        native, lua = _tree(self.repo, commit, NATIVE), _tree(self.repo, commit, LUA)
        missing = [path for path, tree in ((NATIVE, native), (LUA, lua)) if tree is None]
        if native is None or lua is None:
            return Outcome("skip", f"skipped: no {' and no '.join(missing)}")
        if native not in self.modules or lua not in self.scripts:
            self.checkout(commit)
        module, how = self.build(native)
        if isinstance(module, str):
            return Outcome("skip", f"{how}, skipped: {module}")
        scripts = self.scripts_of(lua)
        done = _run([*HARNESS, "replay", self.artifact, "--module", module, "--lua-scripts", scripts,
                     "--reports", self.work / "replays"], env=_harness_environment())  # fmt: skip
        verdict, what = self.verdict(done)
        return Outcome(verdict, f"{how}, {what}")

    def verdict(self, done: subprocess.CompletedProcess[str]) -> tuple[str, str]:
        """The replay's exit code and lines, as git bisect's word: bad (reproduces), good, or skip."""
        if done.returncode in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            raise KeyboardInterrupt  # the replay was stopped: so is the bisection
        if done.returncode in (EXIT_OK, EXIT_NOT_REPRODUCED):
            return "good", "does not reproduce"
        found = DIVERGENCE.search(done.stdout)
        if done.returncode != 1 or found is None:
            return "skip", f"skipped: the replay failed (exit {done.returncode}): {_last_line(done.stderr)}"
        if not self.expects or "reproduced: yes" in done.stdout:
            return "bad", "reproduces"
        other = f"diverges otherwise (step {found.group(1)}: {found.group(2)[:100]})"
        return ("bad", f"{other}, counted as reproducing") if self.any_divergence else ("skip", f"skipped: {other}")

    def label(self, commit: str) -> str:
        return f"{commit[:12]} {_subject(self.repo, commit)!r}"

    # -- the bisection ----------------------------------------------------------------------------

    def ends(self, good: str, bad: str, args: argparse.Namespace) -> None:
        """The artifact must reproduce at --bad and not at --good, else one line (exit 2)."""
        at_bad = self.test(bad)
        self.say(f"--bad  {self.label(bad)}: {at_bad.what}")
        if at_bad.verdict != "bad":
            raise SetupProblem(f"the artifact does not reproduce at --bad {args.bad} ({bad[:12]}): {at_bad.what}; "
                               "pass a --bad commit where it reproduces")  # fmt: skip
        at_good = self.test(good)
        self.say(f"--good {self.label(good)}: {at_good.what}")
        if at_good.verdict == "bad":
            raise SetupProblem(f"the artifact already reproduces at --good {args.good} ({good[:12]}): pass an older "
                               "--good commit, one where it does not")  # fmt: skip
        if at_good.verdict != "good":
            raise SetupProblem(f"--good {args.good} ({good[:12]}) cannot be tested: {at_good.what}; pass a --good "
                               "commit whose module builds and where the artifact does not reproduce")  # fmt: skip

    def bisect(self, good: str, bad: str) -> Found:
        """git bisect in the worktree: each commit it proposes tested and marked, until it names the first bad."""
        self.clean()
        done = _git(self.tree, "bisect", "start", bad, good)
        step = 0
        while True:
            text = done.stdout
            first = FIRST_BAD.search(text)
            if first is not None:
                return Found((first.group(1),), first.group(1))
            if ONLY_SKIPPED in text:
                candidates = re.findall(r"^[0-9a-f]{40,64}$", text.split(ONLY_SKIPPED, 1)[1], re.MULTILINE)
                if not candidates:
                    raise RuntimeError(f"git bisect named no commit after {ONLY_SKIPPED!r}: {text!r}")
                return Found(tuple(candidates), _git_out(self.tree, "rev-parse", "refs/bisect/bad"))
            if done.returncode != 0 or LEFT.search(text) is None:
                raise RuntimeError(f"git bisect said what difftest cannot read: {_last_line(done.stderr + text)}")
            commit = _git_out(self.tree, "rev-parse", "HEAD")
            outcome = self.test(commit)
            self.clean()  # git bisect moves a clean worktree only
            done = _git(self.tree, "bisect", outcome.verdict)
            step += 1
            left = LEFT.search(done.stdout)
            rest = ""
            if left is not None:
                commits, steps = _count(int(left.group(1)), "commit"), _count(int(left.group(2)), "step")
                rest = f"; {commits} left to test, roughly {steps}"
            self.say(f"step {step}: {self.label(commit)}: {outcome.what} -> {outcome.verdict}{rest}")

    def keep(self, found: Found, out: Path) -> tuple[Path, Path]:
        """The build and scripts of the earliest commit tested bad, copied to the bisection's directory."""
        commit = found.tested_bad
        native, lua = _tree(self.repo, commit, NATIVE), _tree(self.repo, commit, LUA)
        assert native is not None and lua is not None  # tested bad: it has both
        module = self.modules[native]
        assert isinstance(module, Path)  # tested bad: it built
        place = out / commit[:12]
        place.mkdir(parents=True)
        kept_module = place / module.name
        shutil.copy2(module, kept_module)
        kept_scripts = place / "lua"
        shutil.copytree(self.scripts[lua], kept_scripts)
        return kept_module.absolute(), kept_scripts.absolute()


def _cdylib(messages: str, manifest: Path) -> Path | None:
    """The shared object cargo's JSON messages name for the crate at `manifest`."""
    for line in messages.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if (message.get("reason") == "compiler-artifact" and "cdylib" in message.get("target", {}).get("kind", [])
                and Path(message.get("manifest_path", "")) == manifest):  # fmt: skip
            for name in message.get("filenames", []):
                if name.endswith((".so", ".dylib")):
                    return Path(name)
    return None


def command_bisect(args: argparse.Namespace) -> int:
    """Ctrl-C raises KeyboardInterrupt even where bisect was started with SIGINT ignored (a shell's
    background job, a CI step): as `run` and the mutant runner do, the handler is its own."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _bisect(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _bisect(args: argparse.Namespace) -> int:
    from difftest.replay import build

    artifact, expects = _artifact(args.artifact)
    repo = _toplevel(args.repo)
    good, bad = _commit(repo, args.good, "--good"), _commit(repo, args.bad, "--bad")
    if good == bad:
        raise SetupProblem(f"--good {args.good} and --bad {args.bad} are the same commit: pass an older --good")
    if _git(repo, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise SetupProblem(f"--good {args.good} is not an ancestor of --bad {args.bad}: pass a --good commit "
                           "that --bad descends from")  # fmt: skip
    check_reports(args.reports)
    cargo = shutil.which("cargo")
    if cargo is None:
        raise SetupProblem(f"cargo is not on PATH: install Rust (https://rustup.rs), which builds {NATIVE} "
                           "at each commit")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="difftest-bisect-")).absolute()
    target = args.cargo_target_dir.absolute() if args.cargo_target_dir is not None else work / "target"
    bisection = Bisection(repo, artifact, expects, work, target, args.any_divergence, cargo)
    try:
        count = _git_out(repo, "rev-list", "--count", f"{good}..{bad}")
        first = "" if target.exists() else " (the first build compiles the crate's dependencies too: minutes)"
        bisection.say(f"bisect: {_here(artifact)} over the {count} commits of {repo} after --good {good[:12]} "
                      f"up to --bad {bad[:12]}{first}")  # fmt: skip
        _git_out(repo, "worktree", "add", "--detach", "--quiet", str(bisection.tree), bad)
        bisection.ends(good, bad, args)
        found = bisection.bisect(good, bad)
        out = new_run_dir(args.reports, "bisect")
        make_run_dir(out)
        module, scripts = bisection.keep(found, out)
    finally:
        with _signals_held():
            _remove_worktree(repo, bisection.tree)
            shutil.rmtree(work, ignore_errors=True)
    if len(found.candidates) == 1:
        bisection.say(f"the first bad commit: {found.candidates[0]} {_subject(repo, found.candidates[0])}")
    else:
        bisection.say(f"the first bad commit is one of these {len(found.candidates)} (the skipped ones could "
                      "not be tested):")  # fmt: skip
        for commit in found.candidates:
            bisection.say(f"  {commit} {_subject(repo, commit)}")
    bisection.say(f"kept: the module and scripts of {found.tested_bad[:12]} in {_here(out / found.tested_bad[:12])}")
    bisection.say("reproduce: " + build.command("replay", _here(args.artifact.absolute()), "--module", _here(module),
                                                "--lua-scripts", _here(scripts)))  # fmt: skip
    (out / "bisect.txt").write_text("\n".join(bisection.lines) + "\n")
    return EXIT_OK


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    """`bisect`'s page: the artifact, the two ends, the repository."""
    bisect = subcommand(
        commands, "bisect", "name the first commit where a failure artifact reproduces",
        f"""Find the first commit of a git repository where a failure artifact (or a history) reproduces:
        git bisect between --good and --bad in a temporary worktree (your checkout and its own bisection
        are never touched), and at each commit it proposes the native module built from {NATIVE} with
        cargo build --release (one build per tree of the crate, in one cargo target directory) and the
        artifact replayed on it with that commit's {LUA} scripts, by this difftest. A commit whose module
        does not build, or without executors/, is skipped, as git bisect skip does; so is one where the
        artifact diverges otherwise than recorded (unless --any-divergence). The artifact must reproduce at
        --bad and not at --good. At the end: the first bad commit (or the commits it is one of, when skips
        leave it open), and the replay command that reproduces it on that commit's build, kept under
        --reports.""",
        [
            "difftest bisect reports/<run>/failures/batch-3 --good v1.4 --bad HEAD",
            "difftest bisect divergence/history.jsonl --good 1a2b3c4 --bad main --repo ../emq",
        ],
        {EXIT_OK: "the first bad commit named (or, with skipped commits in the way, the commits it is one of)",
         EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP] + " (also: the artifact does not reproduce at --bad, or "
         "does at --good)", EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL], EXIT_IOERR: EXIT_MEANINGS[EXIT_IOERR],
         EXIT_INTERRUPTED: EXIT_MEANINGS[EXIT_INTERRUPTED] + " (the worktree and the builds too)",
         EXIT_TERMINATED: EXIT_MEANINGS[EXIT_TERMINATED]},
    )  # fmt: skip
    bisect.add_argument("artifact", type=Path, help="a failure artifact's directory or a history (.jsonl)")
    bisect.add_argument("--good", required=True, metavar="REV", help="a commit where the artifact does not reproduce")
    bisect.add_argument("--bad", required=True, metavar="REV", help="a later commit where it reproduces")
    bisect.add_argument("--repo", type=Path, default=None, metavar="PATH",
                        help="the git repository holding executors/ (default: the current directory's)")  # fmt: skip
    bisect.add_argument("--reports", type=Path, default=DEFAULT_REPORTS,
                        help="where the bisection's directory goes, with the found commit's build "
                        "(default: reports/)")  # fmt: skip
    bisect.add_argument("--cargo-target-dir", type=Path, default=None, metavar="DIR",
                        help="build in this cargo target directory and keep it, so that a later bisection "
                        "reuses the dependencies' builds (default: a fresh one, removed at the end)")  # fmt: skip
    bisect.add_argument("--any-divergence", action="store_true",
                        help="count a commit where the artifact diverges otherwise than recorded as reproducing "
                        "(default: skip it)")  # fmt: skip
