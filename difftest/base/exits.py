"""The exit codes of every command (difftest's and the mutant runner's) and the one table of their meanings."""

from __future__ import annotations

import argparse
import sys
from typing import NamedTuple, NoReturn

EXIT_OK = 0  # the executors agree (and, with --require-coverage, every label was reached)
EXIT_DIVERGENCE = 1  # a divergence (of the executors, or of an executor and the spec): its artifact is under reports/
EXIT_SETUP = 2  # bad set-up or input: one line on stderr says what and how to fix it
EXIT_COVERAGE = 3  # --require-coverage and a behaviour label was not reached
EXIT_VOID = 4  # nothing valid was tested: the budget compared no history (mutants: the self-checks failed)
EXIT_NOT_REPRODUCED = 5  # replay of an artifact: its recorded divergence did not happen again (they agree now)
# only findings the known-findings file accepts were met (known-findings.toml): never 0, since the
# executors did diverge, and never 1, which is kept for what nobody knows yet
EXIT_KNOWN = 6
EXIT_INTERNAL = 70  # the tool itself failed (sysexits' EX_SOFTWARE): one line, the traceback in a log
# the machine refused a write (a full disk, a reports directory no longer writable; sysexits' EX_IOERR):
# one line; the verdict is on the terminal all the same, and a divergence or an interruption outranks it
EXIT_IOERR = 74
EXIT_INTERRUPTED = 130  # Ctrl-C: servers and temporary files removed, reports so far kept
EXIT_TERMINATED = 143  # SIGTERM (timeout, docker stop, a CI step's limit): the same as Ctrl-C


class Meaning(NamedTuple):
    difftest: str  # what the code means for difftest's own commands (run, replay, scenario, merge, ...)
    commands: str  # which of them exit with it
    mutants: str | None  # what it means for `difftest mutants` (the mutant runner); None: never


# The one table: every --help prints its codes from it, and the README's exit table is what
# `python -m difftest.base.exits` prints (tests/test_cli_help.py holds them equal).
MEANINGS: dict[int, Meaning] = {
    EXIT_OK: Meaning("the two executors agree under the parity contract", "all",
                     "every mutant caught (with --threshold-break: the score at or above it)"),
    EXIT_DIVERGENCE: Meaning("a divergence (the executors, or an executor and the spec's model): its artifact is "
                             "under reports/", "run, merge, replay, scenario, fuzz",
                             "a mutant survived (missed, timed out, unviable or errored), or the score is below "
                             "--threshold-break; merge: shards missing or unfinished"),
    EXIT_SETUP: Meaning("bad set-up or input: one line on stderr says what and how to fix it", "all",
                        "bad input (an unknown mutant id, a bad --shard, --jobs or threshold, an --in-diff ref git "
                        "does not know, a bad variable, a triage naming an unknown generated mutant; --generated "
                        "without cargo-mutants, which could not be installed: the line says how; merge: shards "
                        "that do not fit together): one line on stderr, nothing written"),
    EXIT_COVERAGE: Meaning("--require-coverage and a behaviour label was not reached", "run, merge", None),
    EXIT_VOID: Meaning("void: the budget ended before any history was compared (verdict void)", "run, merge, fuzz",
                       "void: the null run found a divergence, the canary was not caught, or the unmodified "
                       "pair does not build"),
    EXIT_NOT_REPRODUCED: Meaning("replay of an artifact: its recorded divergence did not happen again "
                                 "(reproduced: NO)", "replay", None),
    EXIT_KNOWN: Meaning("known: the only findings met are accepted in the known-findings file (each counted in "
                        "the report); none new, none expired", "run, merge, fuzz",
                        "the only mutants not caught are survivors the known-findings file accepts"),
    EXIT_INTERNAL: Meaning("difftest itself failed: one line on stderr, the traceback in a log it names", "all",
                           "the runner itself failed: one line on stderr, the traceback in a log it names"),
    EXIT_IOERR: Meaning("the machine refused a write (a full disk, a directory no longer writable): one line; "
                        "the verdict is still printed, and a divergence (1) or an interruption outranks this code",
                        "all", "the machine refused a write (a full disk, a directory no longer writable): one line"),
    EXIT_INTERRUPTED: Meaning("interrupted: servers and temporary files removed", "all but report",
                              "interrupted (Ctrl-C): campaigns stopped, servers removed, the report so far written"),
    EXIT_TERMINATED: Meaning("terminated (SIGTERM): as 130, the report of the work done written", "all but report",
                             "terminated (SIGTERM): as 130"),
}  # fmt: skip

EXIT_MEANINGS = {code: meaning.difftest for code, meaning in MEANINGS.items()}  # difftest's own commands
MUTANTS_EXITS = {code: meaning.mutants for code, meaning in MEANINGS.items() if meaning.mutants is not None}


def markdown() -> str:
    """The README's exit table: every code, its meaning, the commands that exit with it, and its
    meaning for `difftest mutants`."""
    lines = ["| code | meaning | commands | `mutants` (and `mutants merge`) |", "| --- | --- | --- | --- |"]
    for code, meaning in MEANINGS.items():
        commands = ", ".join(
            f"`{c}`" if c not in ("all", "all but report") else c for c in meaning.commands.split(", ")
        )
        commands = commands.replace("all but report", "all but `report`")
        lines.append(f"| {code} | {meaning.difftest} | {commands} | {meaning.mutants or '(never)'} |")
    return "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line (argparse's own print the usage first), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_SETUP, f"{self.prog}: {message} (see {self.prog} --help)\n")


if __name__ == "__main__":
    sys.stdout.write(markdown() + "\n")
