"""Whole-keyspace snapshots as logical values (a hash as a map, a zset as member → score).

DUMP bytes are not comparable (equal hashes dump differently by encoding), so one server-side
script walks the keyspace and returns every key's type, logical value and TTL in one reply: the
history's database, and every other database that holds keys (`qualified` names their keys). A TTL
is the key's PTTL: every server of a pair reads one frozen clock, so equal PTTLs are equal absolute
expiry times.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Callable, Iterable, Iterator, KeysView, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

import immutables
import msgpack
from immutables import MapItems, MapKeys, MapValues

if TYPE_CHECKING:  # the judge reads snapshots and must not need a client library
    import valkey

# A value valkey-py or msgpack decoded from a walk's reply (bytes, an integer, or a list of them): both
# libraries leave it untyped; the walker script's layout says what each is
Raw: TypeAlias = Any
# a walk's reply: two strings (a whole walk's entries and epochs), a third (other databases' keys), or
# four (a tracked walk's, `is_tracked`)
Walk: TypeAlias = list[Raw]
_Default = TypeVar("_Default")

Value: TypeAlias = bytes | dict[bytes, bytes] | Mapping[bytes, bytes] | frozenset[bytes] | tuple[bytes, ...] | None


@dataclass(frozen=True)
class Entry:
    """One key: its type, its logical value, and its TTL in ms (-1: none)."""

    kind: str
    value: Value
    pttl: int


# A keyspace as the judge reads it: a plain dict (tests, the model's raw writes) or a Keyspace
Snapshot: TypeAlias = Mapping[bytes, Entry]
_ABSENT = object()


class Keyspace(Mapping[bytes, Entry]):
    """A snapshot as the replay makes it, step after step: a persistent map (immutables.Map, a HAMT:
    the next step's snapshot shares every entry it did not write, so a history of thousands of steps
    over thousands of keys holds each key's versions once, not a copy of the keyspace a step), that
    knows where it came from: the snapshot before it (held weakly) and the keys whose entries may
    differ from it (`written`, a superset of those that do), so that the judge's checks look at what
    a step wrote instead of the whole keyspace (`written_since`). Equal to a dict of the same
    entries; pickled as one."""

    __slots__ = ("__weakref__", "_base", "_map", "get", "volatile", "written")

    def __init__(self, entries: Mapping[bytes, Entry] | immutables.Map[bytes, Entry] | None = None,
                 base: Snapshot | None = None, written: frozenset[bytes] | None = None) -> None:  # fmt: skip
        if isinstance(entries, immutables.Map):
            self._map: immutables.Map[bytes, Entry] = entries
        else:
            self._map = immutables.Map(entries.items() if entries else ())
        # the map's own get, bound: the judge's lookups cost what a dict's do, not a method's call
        # (Any: an attribute cannot spell the map's get's overloads; Mapping.get's types hold for callers)
        self.get: Callable[..., Any] = self._map.get
        self._base = weakref.ref(base) if isinstance(base, Keyspace) and written is not None else None
        self.written = written if self._base is not None else None
        self.volatile: frozenset[bytes] | None = None  # its keys with a TTL, once asked (volatile_keys)

    @property
    def base(self) -> Snapshot | None:
        """The snapshot this one was made from (None: not known, or no longer held anywhere)."""
        return self._base() if self._base is not None else None

    def then(self, changed: Mapping[bytes, Entry], gone: Iterable[bytes] = ()) -> Keyspace:
        """The keyspace after `changed` entries were set and the keys `gone` deleted, made from this
        one (its base: this, its written keys: those)."""
        mutation = self._map.mutate()
        written = set(changed)
        for key, entry in changed.items():
            mutation[key] = entry
        for key in gone:
            written.add(key)
            mutation.pop(key, None)
        return Keyspace(mutation.finish(), self, frozenset(written))

    def __getitem__(self, key: bytes) -> Entry:
        return self._map[key]

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    # the map's own views (immutables.Map's, not Mapping's: cheaper, and what its stubs give)
    def items(self) -> MapItems[bytes, Entry]:  # type: ignore[override]
        return self._map.items()

    def keys(self) -> MapKeys[bytes]:  # type: ignore[override]
        return self._map.keys()

    def values(self) -> MapValues[Entry]:  # type: ignore[override]
        return self._map.values()

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, Keyspace):
            written = written_between(self, other)  # (one made from the other: the keys written since)
            if written is None:
                return self._map == other._map
            get, get_other = self._map.get, other._map.get
            return all(get(key) == get_other(key) for key in written)
        if isinstance(other, Mapping):
            return len(self._map) == len(other) and all(other.get(k, _ABSENT) == v for k, v in self._map.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Keyspace({dict(sorted(self._map.items()))!r})"

    def __reduce__(self) -> tuple[type[dict[bytes, Entry]], tuple[dict[bytes, Entry]]]:
        return (dict, (dict(self._map.items()),))


# how far `Members.ordered` and `moved_members` follow a zset's writes back (a PROMOTE over
# thousands writes its zsets thousands of times in one call; past this they sort or compare whole)
MEMBERS_CHAIN = 8_192
_NO_MEMBERS: immutables.Map[bytes, bytes] = immutables.Map()


class BytesMap(Mapping[bytes, bytes]):
    """A persistent map of bytes to bytes (immutables.Map) read as a Mapping: equal to a dict of the
    same items, pickled as one (the judge's values stay comparable with what a walk reads)."""

    __slots__ = ("_map",)

    def __init__(self, items: Mapping[bytes, bytes] | immutables.Map[bytes, bytes] = _NO_MEMBERS) -> None:
        self._map: immutables.Map[bytes, bytes] = (items if isinstance(items, immutables.Map)
                                                    else items._map if isinstance(items, BytesMap)
                                                    else immutables.Map(items))  # fmt: skip

    def __getitem__(self, key: bytes) -> bytes:
        return self._map[key]

    @overload
    def get(self, key: bytes) -> bytes | None: ...

    @overload
    def get(self, key: bytes, default: bytes | _Default) -> bytes | _Default: ...

    def get(self, key: bytes, default: object = None) -> object:
        return self._map.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def items(self) -> MapItems[bytes, bytes]:  # type: ignore[override]
        return self._map.items()

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, BytesMap):
            return self._map is other._map or self._map == other._map
        if isinstance(other, Mapping):
            return len(self._map) == len(other) and all(other.get(k, _ABSENT) == v for k, v in self._map.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(dict(sorted(self._map.items())))

    def __reduce__(self) -> tuple[type[dict[bytes, bytes]], tuple[dict[bytes, bytes]]]:
        return (dict, (dict(self._map.items()),))


class Members(BytesMap):
    """A zset's members (member -> score, as stored) as the spec's model writes them, call after call:
    a persistent map, so that each of a bulk step's thousands of calls makes a zset sharing every
    member it did not write with the one before (a copy a call would cost the square of the queue's
    size, in time and in memory), that knows what it was made from (`changes_since`), and that keeps
    its members in zset order from the order of the one it was made from (`ordered`: a CLAIM's head
    without sorting the queue again). Equal to a dict of the same members; pickled as one."""

    __slots__ = ("_change", "_depth", "_order", "_parent")

    def __init__(self, members: Mapping[bytes, bytes] | immutables.Map[bytes, bytes] = _NO_MEMBERS,
                 parent: Members | None = None, change: tuple[bytes, bytes | None] | None = None) -> None:  # fmt: skip
        super().__init__(members)
        # what it was made from, held (a chain of MEMBERS_CHAIN writes at most: a new chain past it)
        depth = parent._depth + 1 if parent is not None else 0
        if depth >= MEMBERS_CHAIN:
            parent, depth = None, 0
        self._depth: int = depth
        self._parent: Members | None = parent
        self._change = change if self._parent is not None else None  # (member, its score before, None: absent)
        # (score as a number, member, score) in zset order, once asked; handed on to the next one made
        self._order: list[tuple[float, bytes, bytes]] | None = None

    def with_score(self, member: bytes, score: bytes) -> Members:
        """The members with `member` at `score` (ZADD)."""
        return Members(self._map.set(member, score), self, (member, self._map.get(member)))

    def without(self, member: bytes) -> Members:
        """The members without `member` (ZREM); itself when it is not one."""
        if member not in self._map:
            return self
        return Members(self._map.delete(member), self, (member, self._map[member]))

    def ordered(self) -> list[tuple[float, bytes, bytes]]:
        """(score as a number, member, score) by score, then member: the zset's order."""
        order = self._order
        if order is None:
            parent = self._parent
            if parent is not None and parent._order is not None and self._change is not None:
                order, parent._order = parent._order, None  # (taken, not copied: a chain of writes)
                member, was = self._change
                if was is not None:
                    del order[bisect.bisect_left(order, (float(was), member, was))]
                now = self._map.get(member)
                if now is not None:
                    bisect.insort(order, (float(now), member, now))
            else:
                order = sorted((float(score), member, score) for member, score in self._map.items())
            self._order = order
        return order

    def changes_since(self, before: Mapping[bytes, bytes]) -> set[bytes] | None:
        """The members written since `before` (a superset of those added, removed or moved), when
        these members were made from it write by write; None when not known."""
        changed: set[bytes] = set()
        node: Members | None = self
        for _ in range(MEMBERS_CHAIN):
            if node is before or (node is not None and isinstance(before, Members) and node._map is before._map):
                return changed
            if node is None or node._change is None or node._parent is None:
                return None
            changed.add(node._change[0])
            node = node._parent
        return None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Members) and other is not self and other._map is not self._map:
            change = self._change
            if (change is not None and self._parent is not None and other._parent is self._parent
                    and other._change == change and self._map.get(change[0]) == other._map.get(change[0])):  # fmt: skip
                return True  # one write made each from the same members, to the same score
            return self._map == other._map
        return super().__eq__(other)


def moved_members(before: Entry | None, after: Entry | None) -> set[bytes] | frozenset[bytes] | KeysView[bytes]:
    """The members in one of two zset entries and not the other (any other entry: none): what the
    judge's checks of a step compare, read from the writes that made `after` where it knows them."""
    if (after is not None and before is not None and after.kind == "zset" and before.kind == "zset"
            and isinstance(after.value, Members) and isinstance(before.value, Mapping)):  # fmt: skip
        changed = after.value.changes_since(before.value)
        if changed is not None:
            was, now = before.value, after.value
            return {member for member in changed if (member in was) != (member in now)}
    return zset_members(before) ^ zset_members(after)


def as_keyspace(snapshot: Snapshot) -> Keyspace:
    """`snapshot` as a Keyspace (itself when it is one)."""
    return snapshot if isinstance(snapshot, Keyspace) else Keyspace(snapshot)


# how many walks back `written_since` follows a snapshot's bases before it gives up (a check that
# last ran a few steps before: a step the judge skipped, a raw write's)
WRITTEN_SINCE_STEPS = 16


def written_since(after: Snapshot, before: Snapshot | None) -> frozenset[bytes] | None:
    """The keys whose entries may differ between `before` and `after`, a later snapshot made from it
    walk by walk (None: not known: compare the two whole)."""
    if after is before:
        return frozenset()
    if before is None:
        return None
    keys: set[bytes] = set()
    node: Snapshot | None = after
    for _ in range(WRITTEN_SINCE_STEPS):
        if not isinstance(node, Keyspace) or node.written is None:
            return None
        keys |= node.written
        node = node.base
        if node is before:
            return frozenset(keys)
    return None


def zset_members(entry: Entry | None) -> KeysView[bytes] | frozenset[bytes]:
    """A zset entry's members (none for any other entry, or none at all): what the judge's checks
    of a step compare set by set."""
    if entry is not None and entry.kind == "zset" and isinstance(entry.value, Mapping):
        value = entry.value
        return value.keys() if isinstance(value, dict) else frozenset(value)
    return frozenset()


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    """[k1, v1, k2, v2, ...] as {k1: v1, ...} (zip over one iterator: in C, a zset of thousands a step)."""
    pairs = iter(flat)
    return dict(zip(pairs, pairs, strict=False))


def _logical(kind: str, raw: list[Raw]) -> Value:
    if kind == "string":
        return bytes(raw[0])
    if kind in ("hash", "zset"):
        return _pairs(raw)
    if kind == "set":
        return frozenset(raw)
    if kind == "list":
        return tuple(raw)
    return None  # a type the walker does not read (stream, module types): compared by type only


def parse_walk(rows: list[list[Raw]]) -> dict[bytes, Entry]:
    """The walker script's reply as a Snapshot (pure)."""
    snapshot: dict[bytes, Entry] = {}
    for key, kind, raw, pttl in rows:
        kind_text = kind.decode() if isinstance(kind, bytes) else str(kind)
        snapshot[bytes(key)] = Entry(kind_text, _logical(kind_text, raw), int(pttl))
    return snapshot


def take_snapshot(client: valkey.Valkey) -> Snapshot:
    """The whole keyspace, `lease_epoch` fields included, in one round trip."""
    return with_epochs(*parse_canonical(client.execute_command(b"EVAL", CANONICAL_WALK_SCRIPT, b"0")))


def diff(left: Snapshot, right: Snapshot) -> dict[bytes, tuple[Entry | None, Entry | None]]:
    """Keys whose entries differ, with both sides (None where a side lacks the key); only the keys
    written between the two are looked at where their snapshots say which (`written_between`)."""
    written = written_between(left, right)
    keys = set(left) | set(right) if written is None else written
    return {key: (left.get(key), right.get(key)) for key in sorted(keys) if left.get(key) != right.get(key)}


def same_keys(left: Snapshot, right: Snapshot) -> bool:
    """Whether two snapshots are equal: an object with itself at once, and only the keys written
    between them compared where their snapshots say which (`==` walks every key)."""
    if left is right:
        return True
    written = written_between(left, right)
    if written is None:
        return left == right
    get_left, get_right = left.get, right.get
    return all(get_left(key) == get_right(key) for key in written)


def written_between(left: Snapshot, right: Snapshot) -> frozenset[bytes] | None:
    """The keys whose entries may differ between two snapshots where one was made from the other, or
    both from a third (a prediction made from the keyspace before a step, and the walk after it);
    None: not known."""
    found = written_since(left, right)
    if found is None:
        found = written_since(right, left)
    if found is None:
        for one, other in ((left, right), (right, left)):
            if isinstance(other, Keyspace) and other.written is not None:
                base = other.base
                since = written_since(one, base) if base is not None else None
                if since is not None:
                    return since | other.written
    return found


def volatile_keys(snapshot: Snapshot) -> frozenset[bytes]:
    """The keys of `snapshot` that have a TTL: from those of a snapshot it was made from and the keys
    written since, where known; else every key looked at."""
    if isinstance(snapshot, Keyspace):
        if snapshot.volatile is not None:
            return snapshot.volatile
        node: Snapshot | None = snapshot.base
        for _ in range(WRITTEN_SINCE_STEPS):
            if not isinstance(node, Keyspace):
                break
            ancestor = node.volatile
            if ancestor is not None:
                written = written_since(snapshot, node)
                if written is None:
                    break
                found = (ancestor - written) | {
                    key for key in written if (entry := snapshot.get(key)) is not None and entry.pttl >= 0
                }
                snapshot.volatile = frozenset(found)
                return snapshot.volatile
            node = node.base
    found_all = frozenset(key for key, entry in snapshot.items() if entry.pttl >= 0)
    if isinstance(snapshot, Keyspace):
        snapshot.volatile = found_all
    return found_all


# The replay loop's walker: keys sorted, hash fields sorted, `lease_epoch` fields lifted out into a
# list of their own. Equal keyspaces (epochs set aside) give equal replies, compared as raw lists.
# ARGV[1] is the database the caller's connection selected (the history's; 0 when absent): its keys
# come first, as they are; a third string follows only when another database holds keys: every such
# key as [db, key, type, value, pttl] (its `lease_epoch` left in the value), by database then key. A
# script's SELECT does not move its caller's connection.
CANONICAL_WALK_SCRIPT = b"""
local function walk(lift, epochs)
  local keys = {}
  local cursor = '0'
  repeat
    local page = redis.call('SCAN', cursor, 'COUNT', 1000)
    cursor = page[1]
    for _, key in ipairs(page[2]) do keys[#keys + 1] = key end
  until cursor == '0'
  table.sort(keys)
  local out = {}
  for _, key in ipairs(keys) do
    local kind = redis.call('TYPE', key)['ok']
    local value
    if kind == 'hash' then
      local flat = redis.call('HGETALL', key)
      local fields, map = {}, {}
      for i = 1, #flat, 2 do
        if lift and flat[i] == 'lease_epoch' then
          epochs[#epochs + 1] = key
          epochs[#epochs + 1] = flat[i + 1]
        else
          fields[#fields + 1] = flat[i]
          map[flat[i]] = flat[i + 1]
        end
      end
      table.sort(fields)
      value = {}
      for _, f in ipairs(fields) do
        value[#value + 1] = f
        value[#value + 1] = map[f]
      end
    elseif kind == 'string' then value = {redis.call('GET', key)}
    elseif kind == 'zset' then value = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    elseif kind == 'set' then
      value = redis.call('SMEMBERS', key)
      table.sort(value)
    elseif kind == 'list' then value = redis.call('LRANGE', key, 0, -1)
    else value = {} end
    out[#out + 1] = {key, kind, value, redis.call('PTTL', key)}
  end
  return out
end
local home = tonumber(ARGV[1] or '0')
local epochs = {}
local out = walk(true, epochs)
local others = {}
local db = 0
while true do
  if db ~= home then
    local selected = redis.pcall('SELECT', db)
    if selected.err then break end
    if redis.call('DBSIZE') > 0 then
      for _, entry in ipairs(walk(false, nil)) do
        others[#others + 1] = {db, entry[1], entry[2], entry[3], entry[4]}
      end
    end
  end
  db = db + 1
end
redis.call('SELECT', home)
-- MessagePack bulk strings: cheap to read for any client parser, and equal keyspaces give equal
-- bytes (compared as they come, unpacked only when they differ or are needed)
if #others == 0 then return {cmsgpack.pack(out), cmsgpack.pack(epochs)} end
return {cmsgpack.pack(out), cmsgpack.pack(epochs), cmsgpack.pack(others)}
"""

Epochs: TypeAlias = Mapping[bytes, bytes]


class Stamps(BytesMap):
    """`lease_epoch` values by row as the judge expects them step after step: a persistent map, so
    that a bulk of thousands of CLAIMs stamps one more row a call, not a copy of every stamp before
    it. Equal to a dict of the same stamps; pickled as one."""

    __slots__ = ()

    def with_stamp(self, row: bytes, epoch: bytes) -> Stamps:
        return Stamps(self._map.set(row, epoch))


def _unpack(packed: bytes) -> list[Raw]:
    """A MessagePack list from the walker (cmsgpack packs an empty table as an empty map)."""
    value = msgpack.unpackb(packed, raw=True)
    return list(value) if value else []


# A key of a database other than the history's, as the snapshot names it: the database is part of
# its identity, so a write that lands in the wrong database is a key one side has and the other has
# not. (A key of the history's own database that itself starts `@db<n>:` would read as database n's;
# no history writes one.)
OTHER_DB_PREFIX = b"@db"


def qualified(db: int, key: bytes) -> bytes:
    """The snapshot's name for `key` in database `db`, another than the history's."""
    return b"%s%d:%s" % (OTHER_DB_PREFIX, db, key)


def unqualified(name: bytes) -> tuple[int | None, bytes]:
    """A snapshot key's database (None: the history's own) and the key's own name."""
    if name.startswith(OTHER_DB_PREFIX):
        digits, colon, key = name[len(OTHER_DB_PREFIX) :].partition(b":")
        if colon and digits.isdigit():
            return int(digits), key
    return None, name


def parse_canonical(raw: Walk) -> tuple[Snapshot, Epochs]:
    """The canonical walker's reply: the snapshot with epochs set aside, and the epochs by key; the
    keys of other databases (a third string, when any holds keys) named by `qualified`."""
    packed_entries, packed_epochs = raw[0], raw[1]
    entries = _unpack(packed_entries)
    flat_epochs = _unpack(packed_epochs)
    snapshot = parse_walk(entries)
    if len(raw) > 2:
        for db, key, kind, value, pttl in _unpack(raw[2]):
            kind_text = kind.decode() if isinstance(kind, bytes) else str(kind)
            snapshot[qualified(int(db), bytes(key))] = Entry(kind_text, _logical(kind_text, value), int(pttl))
    epochs = {bytes(flat_epochs[i]): bytes(flat_epochs[i + 1]) for i in range(0, len(flat_epochs), 2)}
    return snapshot, epochs


class WalkReader:
    """parse_canonical with a memory of the last walk it read: a key whose row is what it was then
    keeps its Entry (the very object), so a step that changes one key of many builds one Entry, not
    one per key. The snapshot is equal to parse_canonical's, key for key; only the cost differs
    (docs/design-notes.md, "How long a history may be")."""

    def __init__(self) -> None:
        self._rows: dict[bytes, tuple[Raw, Entry]] = {}  # key -> (its row as last read, its Entry)
        self._last: Keyspace | None = None  # the snapshot the last read made

    def read(self, raw: Walk) -> tuple[Snapshot, Epochs]:
        """The walk's snapshot, a Keyspace made from the last read's: its `written` keys are those
        whose row changed (new entries) and those gone."""
        packed_entries, packed_epochs = raw[0], raw[1]
        rows = msgpack.unpackb(packed_entries, raw=True, use_list=False) or ()
        last, now = self._rows, {}
        snapshot: dict[bytes, Entry] = {}
        written = []
        for row in rows:
            key = row[0]
            known = last.get(key)
            if known is not None and known[0] == row:
                entry = known[1]
            else:
                _, kind, value, pttl = row
                kind_text = kind.decode() if isinstance(kind, bytes) else str(kind)
                entry = Entry(kind_text, _logical(kind_text, list(value) if value else []), int(pttl))
                written.append(bytes(key))
            key = bytes(key)
            snapshot[key] = entry
            now[key] = (row, entry)
        self._rows = now
        base = self._last
        if len(raw) > 2:  # other databases' keys (rare: read whole, as parse_canonical does)
            base = None  # (and not told apart from the last read's)
            for db, other, kind, value, pttl in _unpack(raw[2]):
                kind_text = kind.decode() if isinstance(kind, bytes) else str(kind)
                snapshot[qualified(int(db), bytes(other))] = Entry(kind_text, _logical(kind_text, value), int(pttl))
        if base is not None:
            gone = last.keys() - now.keys()
            # (made from the last read's: the entries it did not write shared, not copied)
            made = base.then({key: snapshot[key] for key in written}, gone)
        else:
            made = Keyspace(snapshot)
        self._last = made if len(raw) == 2 else None
        flat_epochs = _unpack(packed_epochs)
        epochs = {bytes(flat_epochs[i]): bytes(flat_epochs[i + 1]) for i in range(0, len(flat_epochs), 2)}
        return made, epochs


# A tracked walk's reply (`DIFFTEST.WALK SINCE`, difftest/servers/walker-crate/src/track.rs) holds
# four strings: only the keys written since the walk before it (a whole walk's reply holds two or three)
TRACKED_PARTS = 4


def is_tracked(raw: Walk) -> bool:
    """Whether a walk's reply is a tracked walk's: the keys written since the last walk only."""
    return len(raw) == TRACKED_PARTS


def _entry(kind: bytes | str, value: Iterable[bytes] | None, pttl: int) -> Entry:
    kind_text = kind.decode() if isinstance(kind, bytes) else str(kind)
    return Entry(kind_text, _logical(kind_text, list(value) if value else []), int(pttl))


def apply_tracked(snapshot: Snapshot, epochs: Epochs, raw: Walk) -> tuple[Snapshot, Epochs]:
    """The keyspace after a tracked walk (pure): `snapshot` and `epochs` (the keyspace as the walks
    before it reported) with the written keys' entries and epochs in place of their old ones, and
    the keys gone dropped. New dicts; the unwritten keys keep their Entry objects."""
    packed_entries, packed_epochs, packed_others, packed_gone = raw
    changed: dict[bytes, Entry] = {}
    gone: list[bytes] = []
    after_epochs = dict(epochs)
    for key, kind, value, pttl in _unpack(packed_entries):
        key = bytes(key)
        changed[key] = _entry(kind, value, pttl)
        after_epochs.pop(key, None)  # (its epoch, if it still has one, is among the epochs below)
    for db, key, kind, value, pttl in _unpack(packed_others):
        changed[qualified(int(db), bytes(key))] = _entry(kind, value, pttl)
    for db, key in _unpack(packed_gone):
        name = bytes(key) if int(db) < 0 else qualified(int(db), bytes(key))
        gone.append(name)
        after_epochs.pop(name, None)
    flat_epochs = _unpack(packed_epochs)
    for i in range(0, len(flat_epochs), 2):
        after_epochs[bytes(flat_epochs[i])] = bytes(flat_epochs[i + 1])
    return as_keyspace(snapshot).then(changed, gone), after_epochs


def with_epochs(snapshot: Snapshot, epochs: Epochs) -> Snapshot:
    """The snapshot with `lease_epoch` fields put back (what a re-sync writes)."""
    merged = dict(snapshot.items())
    for key, epoch in epochs.items():
        entry = merged.get(key)
        if entry is not None and isinstance(entry.value, dict):
            merged[key] = Entry(entry.kind, {**entry.value, b"lease_epoch": epoch}, entry.pttl)
        else:
            merged[key] = Entry("hash", {b"lease_epoch": epoch}, -1)
    return merged


def restore_commands(
    snapshot: Snapshot, home: int = 0, delete: Iterable[bytes] = (), at_expiry: list[list[bytes]] | None = None
) -> list[list[bytes]]:
    """Commands that rebuild a keyspace from logical values (after a FLUSHALL; or first DEL each key
    named in `delete`), on a connection that selected database `home` (the history's): another
    database's keys between SELECTs, the connection back on `home` at the end. A key at the very
    millisecond of its expiry (PTTL 0: still there until the clock moves) cannot be given that expiry
    now (the server deletes a key whose expiry is not in the future): with `at_expiry`, the commands
    that give it are put there, to be sent with the clock one millisecond back (`PEXPIRE key 1`)."""
    commands: list[list[bytes]] = []
    selected = home
    deleted = frozenset(delete)
    for name in sorted(deleted | snapshot.keys()):
        db, key = unqualified(name)
        db = home if db is None else db
        if db != selected:
            commands.append([b"SELECT", b"%d" % db])
            selected = db
        if name in deleted:
            commands.append([b"DEL", key])
        entry = snapshot.get(name)
        if entry is None:
            continue
        value = entry.value
        if entry.kind == "string" and isinstance(value, bytes):
            commands.append([b"SET", key, value])
        elif entry.kind == "hash" and isinstance(value, dict) and value:
            commands.append([b"HSET", key, *[p for f, v in value.items() for p in (f, v)]])
        elif entry.kind == "zset" and isinstance(value, Mapping) and value:
            commands.append([b"ZADD", key, *[p for m, s in value.items() for p in (s, m)]])
        elif entry.kind == "set" and isinstance(value, frozenset) and value:
            commands.append([b"SADD", key, *sorted(value)])
        elif entry.kind == "list" and isinstance(value, tuple) and value:
            commands.append([b"RPUSH", key, *value])
        else:
            raise ValueError(f"cannot rebuild {name!r} of type {entry.kind}")
        if entry.pttl > 0:
            commands.append([b"PEXPIRE", key, str(entry.pttl).encode()])
        elif entry.pttl == 0 and at_expiry is not None:
            at_expiry += [[b"SELECT", b"%d" % db], [b"PEXPIRE", key, b"1"]]
    if selected != home:
        commands.append([b"SELECT", b"%d" % home])
    if at_expiry:
        at_expiry.append([b"SELECT", b"%d" % home])
    return commands


def resync_commands(held: Snapshot, wanted: Snapshot, home: int = 0) -> tuple[list[list[bytes]], list[list[bytes]]]:
    """Commands that turn the keyspace `held` into `wanted` (both with `lease_epoch` in place) key by
    key, a key held alike left as it is; and those that give a written key at its expiry's very
    millisecond that expiry, to be sent with the clock one millisecond back (`restore_commands`)."""
    changed = {key: entry for key, entry in wanted.items() if held.get(key) != entry}
    stale = [key for key in held if held[key] != wanted.get(key)]
    at_expiry: list[list[bytes]] = []
    return restore_commands(changed, home, stale, at_expiry), at_expiry
