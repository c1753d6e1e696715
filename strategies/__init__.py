"""Hypothesis strategies that generate EMQ queue histories for difftest: the state machine the
campaigns run (`machine.py`), and the earlier seed-list strategy the benchmark compares it with."""

from strategies.histories import HistoryShape, histories
from strategies.machine import QueueMachine, run_machine

__all__ = ["HistoryShape", "QueueMachine", "histories", "run_machine"]
