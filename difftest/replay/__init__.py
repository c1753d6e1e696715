"""The replay layer: a history sent to a pair of servers, step by step, observed and judged: the
replayer, each side, replicas, observations, artifacts, the build under test, behaviour labels and
upgrade labels.
"""
