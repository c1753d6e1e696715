"""The coverage layer: what a run reached, in one place: the behaviour labels of every replayed step
(`labels.py`, with the upgrade labels of `upgrades.py`), the Lua scripts' line counts (`lua.py`; the
scripts are instrumented by executors/lua/instrument.py) and the native module's coverage build and
report (`native.py`).
"""
