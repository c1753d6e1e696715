"""A variable of the environment set for a block and restored after: how a campaign hands a setting to
every process it starts (its workers and servers inherit the environment), as the coverage channels do."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def variable_set(name: str, value: str) -> Iterator[None]:
    """`name` is `value` inside the block; after it, what it was before (or unset, as it was)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
