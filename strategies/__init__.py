"""Hypothesis strategies that generate EMQ queue histories for difftest."""

from strategies.histories import HistoryShape, histories

__all__ = ["HistoryShape", "histories"]
