"""Report files written whole or not at all, and what a write the machine refused means to a user.

Every report, artifact and log difftest writes goes through `write_atomically`: a temporary file in
the same directory, written, fsynced, then renamed over the name. A full disk or a directory that
stopped being writable leaves the earlier file (or none), never half of one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import tempfile
import traceback
from pathlib import Path

from difftest.base.problems import EnvironmentFailure


def write_atomically(path: Path, data: str | bytes, encoding: str = "utf-8") -> None:
    """`path` holds `data` whole, or (OSError raised) is as it was: the temporary file is removed."""
    raw = data.encode(encoding) if isinstance(data, str) else data
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(raw)
            out.flush()
            os.fsync(out.fileno())  # on disk before the name points at it: a crash leaves old or new
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide a report from the other users of a CI box
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # the rename itself durable (a directory's fsync; best effort)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


# the errors that mean the machine, not difftest, refused: the disk, the file system, permissions
ENVIRONMENT_ERRNOS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is spent",
    errno.EFBIG: "the file size limit was reached",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission was denied",
    errno.EPERM: "the operation was not permitted",
    errno.ENOENT: "the directory was removed",
    errno.ENOTDIR: "a part of the path is no longer a directory",
    errno.EIO: "the disk reported an I/O error",
}


def is_environmental(problem: BaseException) -> bool:
    return isinstance(problem, OSError) and problem.errno in ENVIRONMENT_ERRNOS


# what, wherever it happens, can only be the machine's doing (ENOENT or EACCES elsewhere may be a defect)
SURELY_ENVIRONMENTAL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


def environmental_cause(problem: OSError) -> str:
    return ENVIRONMENT_ERRNOS.get(problem.errno or 0, problem.strerror or str(problem))


def environment_failure(problem: OSError, what: str, where: Path) -> EnvironmentFailure:
    """The one line for a write the machine refused: what was not written, why, and how to fix it."""
    cause = environmental_cause(problem)
    return EnvironmentFailure(f"{what} could not be written to {where}: {cause} ({problem.strerror}); free some "
                              "space or make that directory writable, or pass --reports on another disk")  # fmt: skip


INTERNAL_LOG = "internal-error.log"  # an internal error's traceback, in its run's directory


def write_traceback(problem: BaseException, run_dir: Path | None, reports: Path | None) -> Path:
    """The traceback, in the run's directory, else under the reports directory, else in the
    temporary directory (whichever first takes it); returns the log's path."""
    text = "".join(traceback.format_exception(problem))
    stamp = dt.datetime.now(tz=dt.UTC).strftime("%Y%m%dT%H%M%S")
    elsewhere = f"internal-error-{stamp}-{os.getpid()}.log"  # beside other runs: named apart
    places = [(run_dir, INTERNAL_LOG), (reports, elsewhere), (Path("reports"), elsewhere)]  # the default --reports
    for place, name in places:
        if place is None:
            continue
        try:
            place.mkdir(parents=True, exist_ok=True)
            write_atomically(place / name, text)  # whole, or the next place: never an empty log
            return place / name
        except OSError:
            continue
    handle, name = tempfile.mkstemp(prefix="difftest-internal-error-", suffix=".log")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    return Path(name)
