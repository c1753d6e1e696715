"""Where the native executor's module is built. Its one host, which sends each call as one
EMQ.<VERB> command and takes the reply as it comes, is `difftest.replay.sides.NativeSide`."""

from __future__ import annotations

from pathlib import Path

CRATE_DIR = Path(__file__).resolve().parent
DEFAULT_MODULE = CRATE_DIR / "target" / "release" / "libemq_native.so"
