"""Where the native executor's module is built. Its one host, which sends each call as one
EMQ.<VERB> command and takes the reply as it comes, is `difftest.replay.sides.NativeSide`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CRATE_DIR = Path(__file__).resolve().parent
RELEASE_DIR = CRATE_DIR / "target" / "release"  # the plain release build (scripts/setup.sh)
DEFAULT_MODULE = RELEASE_DIR / "libemq_native.so"
SEEDED_PARTS = ("deps", "build", ".fingerprint")


def seed_dependencies(target: Path, release: Path = RELEASE_DIR) -> bool:
    """Give a cargo target directory with no release build yet a copy of the plain release build's
    dependencies; True when it copied.

    A build of the crate with the same profile, features and lock file (a mutant's copy of the crate,
    the crate instrumented alone with `cargo rustc -- FLAGS`) compiles its dependencies exactly as the
    plain build did, so cargo finds the copies fresh and compiles the crate alone: 9 s instead of
    130 s for a first instrumented build (docs/design-notes.md, "Native code coverage"). A copy, not
    hard links: cargo rewrites fingerprint files in place. The crate's own artifacts are left out."""
    built, source = target / "release", release / "deps"
    if built.exists() or not source.is_dir():
        return False
    scratch = target / "release.seeding"
    shutil.rmtree(scratch, ignore_errors=True)
    own = shutil.ignore_patterns("emq-native-*", "emq_native-*", "libemq_native*")
    for part in SEEDED_PARTS:
        if (release / part).is_dir():
            shutil.copytree(release / part, scratch / part, symlinks=True, ignore=own)
    os.replace(scratch, built)
    return True
