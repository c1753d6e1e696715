"""The spec layer: the EMQ transitions as data and pure functions: the command table, calls, error
texts, replies, guards, the domains histories draw from, the logical keyspace (snapshot) and the
model.
"""
