"""The instrument layer: what the executors' own code reached: Lua line counts and the native coverage
build.
"""
