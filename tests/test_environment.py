"""A variable of the environment set for a block (difftest/base/environment.py) is restored after it,
also when the block fails, and unset again when it was unset."""

from __future__ import annotations

import os

import pytest

from difftest.base.environment import variable_set

NAME = "DIFFTEST_TEST_ENVIRONMENT_VARIABLE"


def test_a_variable_is_set_in_the_block_and_unset_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)
    with variable_set(NAME, "inside"):
        assert os.environ[NAME] == "inside"
    assert NAME not in os.environ


def test_a_variable_gets_its_value_back_when_the_block_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, "before")
    with pytest.raises(RuntimeError), variable_set(NAME, "inside"):
        raise RuntimeError("the block failed")
    assert os.environ[NAME] == "before"
