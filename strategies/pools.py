"""The small pools the rules draw values from, and the restricted users.

Tiny pools of queues, ids, tokens and durations make transitions collide and deadlines meet; every
pool lists its plainest value first, which is what a choice shrinks to. The transitions' weights are
the command table's (`difftest.spec.domains.PLAIN_VERB_WEIGHTS`, `aimed_verb_weights`).
"""

from __future__ import annotations

from difftest.spec import domains
from difftest.spec.commands import SETS, TRANSITIONS

QUEUES = (b"q", b"r")
IDS = (b"j1", b"j2", b"j3", b"\x00", b"\xff\xfe")
PAYLOADS = (b"p", b"", b"\x00\xff\r\n", "caf\u00e9".encode())
ERRORS = (b"boom", b"", b"\x00")
WORKERS = ("A", "B")
DURATIONS = (1, 5, 10, 50, 100)
ADVANCES = (1, 4, 5, 6, 9, 10, 11, 49, 50, 51, 99, 100, 101, 250)
# the clock moved by production's pauses: a poll interval, a minute, an hour, a day, a week (`long_advance`)
LONG_ADVANCES = (5_000, 60_000, 3_600_000, 86_400_000, 604_800_000)
TOKENS = (1, 1, 2, 2, 3, 0, 4)
# pools the step builders pick from on many steps, built once
DELAYS = (0, 0, 0, *DURATIONS)  # an ENQUEUE's delay: mostly none
BACKOFFS = (0, *DURATIONS)
EDGE_BYTES = tuple(domains.BYTES_EDGES.values())
I64_MAX = str(2**63 - 1).encode()
# every class of Valkey's integer form (difftest/spec/domains.py), those refused by their form first (so
# that a malformed integer shrinks to one), then those read as integers, which the argument's range decides
BAD_INTEGERS: tuple[bytes, ...] = tuple(
    c.raw for c in sorted(domains.INT_CLASSES.values(), key=lambda c: not isinstance(c.form, str))
)


# One user per key kind a transition reaches and per restricted permission (none, read only, write
# only), derived from the command table (difftest/spec/domains.py); each mostly calls the transitions
# that reach the key it is restricted on.
USERS = domains.permission_users(QUEUES)
USER_PROBES: dict[str, tuple[str, ...]] = {
    user: tuple(verb for verb, t in TRANSITIONS.items() if r.kind in domains.reached_keys(t))
    for user, r in domains.RESTRICTIONS.items()
}
# the derived keys (rows, meta, metrics), which the native checks itself, more often than the
# declared sets, which the server checks alike for both executors
USER_KIND_WEIGHTS = {kind: 6 if kind == domains.ROWS_KEY else 1 if kind in SETS else 2 for kind in domains.KEY_KINDS}
USER_KINDS = tuple(kind for kind, weight in USER_KIND_WEIGHTS.items() for _ in range(weight))
# a caller who may read rows but not write them: EXTEND re-stamps the row it may only read (N2),
# SWEEP writes the rows of the leases it exempts (D7 held to the caller's permissions)
READ_ROWS_USER = domains.acl_user(domains.ROWS_KEY, "read")
USER_PROBES[READ_ROWS_USER] = (*USER_PROBES[READ_ROWS_USER], *["EXTEND"] * 4, *["SWEEP"] * 4)
