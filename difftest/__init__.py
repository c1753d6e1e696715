"""difftest: differential testing of the EMQ Lua scripts against the native Valkey module."""

__version__ = "0.1.0"
