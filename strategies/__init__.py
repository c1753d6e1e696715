"""Hypothesis strategies that generate EMQ queue histories for difftest: the state machine the
campaigns run (`machine.py`), the step builders and pools its rules share (`steps.py`, `pools.py`),
and the one module that works on Hypothesis's engine (`engine.py`)."""

from strategies.machine import QueueMachine, run_machine
from strategies.shape import HistoryShape

__all__ = ["HistoryShape", "QueueMachine", "run_machine"]
