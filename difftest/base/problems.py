"""Errors that mean the set-up is wrong, each with one line that says what and how to fix it."""

from __future__ import annotations


class SetupProblem(Exception):
    """Bad set-up or input: the message is one line naming what is wrong and what to do."""


class ScriptDoesNotCompile(SetupProblem):
    """A Lua script of the executor under test that the Lua server's own compiler refuses (a mutant
    runner reads it as an unviable mutant, as a patch that does not build)."""


class EnvironmentFailure(Exception):
    """The machine refused a write difftest needed (a full disk, a directory no longer writable):
    neither bad input nor a defect of difftest. The message is one line: what, why, how to fix it."""
