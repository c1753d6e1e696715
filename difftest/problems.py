"""Errors that mean the set-up is wrong, each with one line that says what and how to fix it."""

from __future__ import annotations


class SetupProblem(Exception):
    """Bad set-up or input: the message is one line naming what is wrong and what to do."""
