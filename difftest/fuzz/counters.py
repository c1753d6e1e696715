"""The native module's coverage counters read straight from its servers' raw profiles, after every history.

The coverage build (difftest/coverage/native.py) keeps each server's counters in a mapped file
(LLVM's continuous mode): the counters section of a `.profraw` file is the live array of 64-bit
counts, page-aligned. Reading it needs no llvm tool: the header says where the section starts and
how many counters there are. A worker reads its own servers' files after each history: the counters
that moved during the history (what it reached) and those no history of the worker had moved
before (what it reached first). Files of servers that have exited are folded into the worker's
totals and removed, so a restart-heavy history does not leave thousands of files behind.
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import dataclass, field
from pathlib import Path

from difftest.base.processes import alive

MAGIC = 0xFF6C70726F667281  # "\xfflprofr\x81": a 64-bit raw profile
_HEADER_FIELDS = 16  # version 10: magic, version, binary ids size, data, padding, counters, ..., value kind last


@dataclass(frozen=True)
class Layout:
    """Where a raw profile's counters are: their byte offset and how many."""

    offset: int
    count: int


def layout(head: bytes) -> Layout | None:
    """The counters' place from a raw profile's header (versions 8 to 10); None if it is no profile."""
    if len(head) < 8 * _HEADER_FIELDS:
        return None
    words = struct.unpack_from("<16Q", head)
    magic, version = words[0], words[1] & 0xFFFFFFFF
    if magic != MAGIC or not 8 <= version <= 10:
        return None
    binary_ids, data, padding_before, counters = words[2], words[3], words[4], words[5]
    header = 8 * (16 if version >= 10 else 14 if version >= 9 else 13)
    data_record = 64 if version >= 10 else 48 if version == 8 else 56
    # version 10's record: name ref, hash, counter ptr, bitmap ptr, function ptr, values ptr (6 x 8),
    # counters (4), value sites (2 x 2), bitmap bytes (4) = 64
    offset = header + binary_ids + data * data_record + padding_before
    return Layout(offset, counters)


def read_counters(path: Path) -> list[int] | None:
    """A raw profile's counts, or None while it is not (yet) a whole profile."""
    try:
        with path.open("rb") as stream:
            found = layout(stream.read(8 * _HEADER_FIELDS))
            if found is None:
                return None
            stream.seek(found.offset)
            body = stream.read(8 * found.count)
    except OSError:
        return None
    if len(body) != 8 * found.count:
        return None
    return list(struct.unpack(f"<{found.count}Q", body))


def _pid_of(path: Path) -> int | None:
    digits = "".join(ch for ch in path.stem.rsplit("-", 1)[-1] if ch.isdigit())
    return int(digits) if digits else None


@dataclass
class Counters:
    """One worker's view of its servers' profiles in `directory` (its own, named native-<pid>.profraw)."""

    directory: Path
    total: int = 0  # counters in the module
    reached: bytearray = field(default_factory=bytearray)  # per counter: 1 once any history moved it
    _last: dict[Path, list[int]] = field(default_factory=dict)  # each live file's counts at the last look

    def look(self) -> tuple[set[int], set[int]]:
        """Since the last look: the counters that moved, and those of them no earlier look had seen move."""
        moved: set[int] = set()
        for path in sorted(self.directory.glob("*.profraw")):
            counts = read_counters(path)
            if counts is None:
                continue
            if len(counts) != self.total:
                self.total = max(self.total, len(counts))
                self.reached.extend(b"\0" * (self.total - len(self.reached)))
            before = self._last.get(path)
            if before is None or len(before) != len(counts):
                moved.update(i for i, c in enumerate(counts) if c)
            else:
                moved.update(i for i, (c, b) in enumerate(zip(counts, before, strict=True)) if c != b)
            pid = _pid_of(path)
            if pid is not None and not alive(pid):
                self._last.pop(path, None)  # its server is gone: counted now, the file goes
                with contextlib.suppress(OSError):
                    path.unlink()
            else:
                self._last[path] = counts
        new = {i for i in moved if not self.reached[i]}
        for i in new:
            self.reached[i] = 1
        return moved, new

    def bitmap(self) -> bytes:
        """The counters reached as a bitmap, most significant bit first (what Valkey's SETBIT numbers)."""
        out = bytearray((self.total + 7) // 8)
        for i, hit in enumerate(self.reached):
            if hit:
                out[i // 8] |= 0x80 >> (i % 8)
        return bytes(out)
