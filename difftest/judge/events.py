"""Keyspace notifications: the events a step fires on each server, as data, and the pure verdict on them.

With `notify-keyspace-events` on (a history's `notify` step), each server has one subscriber
connection; the replay puts a marker (a PUBLISH on the admin connection) after every step's walk,
and the messages between two markers are the step's events, in the order the server fired them
(docs/contract-decisions.md, "Keyspace notifications"). Nothing here reads a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from difftest.spec.replies import Reply

if TYPE_CHECKING:
    from difftest.history.resolve import Resolved

KEYSPACE, KEYEVENT = b"__keyspace@", b"__keyevent@"
# the marker channel: no key event is published on it (theirs all start with `__key`)
MARKER_CHANNEL = b"difftest:step"
PATTERNS = (KEYSPACE + b"*", KEYEVENT + b"*")


@dataclass(frozen=True, order=True)
class Event:
    """One message of a keyspace notification: its channel kind (`keyspace`, `keyevent`), the
    database, the event's name and the key (for keyevent the channel names the event, the
    message the key; for keyspace the reverse: both read here as event and key)."""

    channel: str
    db: int
    event: bytes
    key: bytes

    def __str__(self) -> str:
        key = self.key.decode("utf-8", "backslashreplace")
        return f"{self.channel}@{self.db} {self.event.decode('utf-8', 'backslashreplace')} {key}"


Events = tuple[Event, ...]


def fires(flags: str, event_class: str, event: bytes, key: bytes, db: int = 0) -> Events:
    """The messages one event of `event_class` (a flag letter: h for hash commands) fires under
    `flags`: a keyspace message, then a keyevent message, each if its channel is on."""
    if event_class not in flags and not (event_class in "g$lshzxetd" and "A" in flags):
        return ()
    out = []
    if "K" in flags:
        out.append(Event("keyspace", db, event, key))
    if "E" in flags:
        out.append(Event("keyevent", db, event, key))
    return tuple(out)


def parse_message(message: Reply) -> Event | int | None:
    """A subscriber's message: an Event, a marker (its sequence number), or None (a subscription's
    confirmation and anything else a subscriber may be sent)."""
    if not isinstance(message, list) or not message:
        return None
    kind = message[0]
    if kind == b"message" and len(message) == 3 and message[1] == MARKER_CHANNEL:
        payload = message[2]
        return int(payload) if isinstance(payload, bytes) else None
    if kind != b"pmessage" or len(message) != 4:
        return None
    channel, payload = message[2], message[3]
    if not isinstance(channel, bytes) or not isinstance(payload, bytes):
        return None
    for prefix, name in ((KEYSPACE, "keyspace"), (KEYEVENT, "keyevent")):
        if channel.startswith(prefix):
            db, _, rest = channel[len(prefix) :].partition(b"__:")
            if not db.isdigit():
                return None
            if name == "keyspace":
                return Event(name, int(db), payload, rest)
            return Event(name, int(db), rest, payload)
    return None


KEYMISS = b"keymiss"


def writes_only(events: Events) -> Events:
    """The events without key misses (the `m` class): a miss reports a read of an absent key, and the
    module reads differently by design (it peeks at every key it will write before its first write,
    where a script meets the key at its write), so the misses differ where the writes do not."""
    return tuple(event for event in events if event.event != KEYMISS)


def _stamped_row(resolved: Resolved, native_reply: Reply) -> bytes | None:
    """The row whose `lease_epoch` a successful native EXTEND re-stamped (N1), if any."""
    call, guarded = resolved.call, resolved.guarded
    if call is None or call.verb != "EXTEND" or guarded is None or resolved.via_scripts:
        return None
    if not resolved.sends_transition or native_reply != 1:
        return None
    return guarded.layout.row(guarded.job)


def expected_native(resolved: Resolved, flags: str, lua: Events, native_reply: Reply, db: int = 0) -> Events:
    """What the native must fire, given what the scripts fired: the same messages in the same order,
    except that a native EXTEND that held its fence fires one `hset` on the row after them, its
    `lease_epoch` re-stamp (N1; the scripts' EXTEND never writes the row), in the history's
    database `db`."""
    row = _stamped_row(resolved, native_reply)
    if row is None:
        return lua
    return lua + fires(flags, "h", b"hset", row, db)


def events_problem(
    resolved: Resolved, resyncs: bool, flags: str, lua: Events, native: Events, native_reply: Reply, db: int = 0
) -> str | None:
    """The verdict on one step's events (pure): None when the native fired what it must, else why
    not. Not judged: a raw step (the harness's write: a field only the native rows hold makes HDEL
    fire there alone), and a step a re-synchronising row allowed (D1-D5, D7-D9, N2-N4: the two
    executors did different things on purpose, and that row judged both keyspaces exactly)."""
    if resolved.is_raw or resyncs:
        return None
    if "m" in flags:  # key misses are reads: set aside on both sides (docs/contract-decisions.md)
        lua, native = writes_only(lua), writes_only(native)
    want = expected_native(resolved, flags, lua, native_reply, db)
    if want == native:
        return None
    at = next((i for i, (a, b) in enumerate(zip(want, native, strict=False)) if a != b), min(len(want), len(native)))
    stamp = " (with N1's hset on the row)" if want is not lua else ""
    expected = str(want[at]) if at < len(want) else "nothing more"
    seen = str(native[at]) if at < len(native) else "nothing more"
    return (f"events differ at message {at}: the native must fire {expected}{stamp}, it fired {seen} "
            f"(lua {len(lua)} messages, native {len(native)})")  # fmt: skip


def show(events: Events) -> list[str]:
    return [str(event) for event in events] or ["(none)"]


__all__ = ["Event", "Events", "events_problem", "expected_native", "fires", "parse_message"]
