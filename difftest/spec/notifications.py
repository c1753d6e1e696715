"""The values the `notify-keyspace-events` setting takes: a history's notify step is checked against them."""

from __future__ import annotations

# what CONFIG SET notify-keyspace-events accepts (Valkey 8.0 to 9.1; probed on 9.1.2): K and E
# choose the channels, the rest the classes of events (A: all but m and n)
FLAG_LETTERS = "KEA" + "g$lshzxetmdn"


def flags_problem(flags: str) -> str | None:
    """Why `flags` is not a value `notify-keyspace-events` takes, or None."""
    bad = sorted({ch for ch in flags if ch not in FLAG_LETTERS})
    if bad:
        return f"{''.join(bad)!r} not among the letters Valkey accepts ({FLAG_LETTERS}; empty: off)"
    return None
