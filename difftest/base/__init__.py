"""The base layer: what every layer uses and that knows nothing of queues: problems (the errors a run
reports), exit codes, atomic files and file locks.
"""
