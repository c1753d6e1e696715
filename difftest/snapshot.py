"""Whole-keyspace snapshots as logical values (a hash as a map, a zset as member → score).

DUMP bytes are not comparable (equal hashes dump differently by encoding), so one server-side
script walks the keyspace and returns every key's type, logical value and TTL in one reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import msgpack

if TYPE_CHECKING:  # the judge reads snapshots and must not need a client library
    import valkey

Value: TypeAlias = bytes | dict[bytes, bytes] | frozenset[bytes] | tuple[bytes, ...] | None


@dataclass(frozen=True)
class Entry:
    """One key: its type, its logical value, and its TTL in ms (-1: none)."""

    kind: str
    value: Value
    pttl: int


Snapshot: TypeAlias = dict[bytes, Entry]


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def _logical(kind: str, raw: list[Any]) -> Value:
    if kind == "string":
        return bytes(raw[0])
    if kind in ("hash", "zset"):
        return _pairs(raw)
    if kind == "set":
        return frozenset(raw)
    if kind == "list":
        return tuple(raw)
    return None  # a type the walker does not read (stream, module types): compared by type only


def parse_walk(rows: list[list[Any]]) -> Snapshot:
    """The walker script's reply as a Snapshot (pure)."""
    snapshot: Snapshot = {}
    for key, kind, raw, pttl in rows:
        kind_text = kind.decode() if isinstance(kind, bytes) else str(kind)
        snapshot[bytes(key)] = Entry(kind_text, _logical(kind_text, raw), int(pttl))
    return snapshot


def take_snapshot(client: valkey.Valkey) -> Snapshot:
    """The whole keyspace, `lease_epoch` fields included, in one round trip."""
    return with_epochs(*parse_canonical(client.execute_command(b"EVAL", CANONICAL_WALK_SCRIPT, b"0")))


def diff(left: Snapshot, right: Snapshot) -> dict[bytes, tuple[Entry | None, Entry | None]]:
    """Keys whose entries differ, with both sides (None where a side lacks the key)."""
    return {
        key: (left.get(key), right.get(key))
        for key in sorted(left.keys() | right.keys())
        if left.get(key) != right.get(key)
    }


# The replay loop's walker: keys sorted, hash fields sorted, `lease_epoch` fields lifted out into a
# list of their own. Equal keyspaces (epochs set aside) give equal replies, compared as raw lists.
CANONICAL_WALK_SCRIPT = b"""
local keys = {}
local cursor = '0'
repeat
  local page = redis.call('SCAN', cursor, 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do keys[#keys + 1] = key end
until cursor == '0'
table.sort(keys)
local out, epochs = {}, {}
for _, key in ipairs(keys) do
  local kind = redis.call('TYPE', key)['ok']
  local value
  if kind == 'hash' then
    local flat = redis.call('HGETALL', key)
    local fields, map = {}, {}
    for i = 1, #flat, 2 do
      if flat[i] == 'lease_epoch' then
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
-- two bulk strings, MessagePack: cheap to read for any client parser, and equal keyspaces give
-- equal bytes (compared as they come, unpacked only when they differ or are needed)
return {cmsgpack.pack(out), cmsgpack.pack(epochs)}
"""

Epochs: TypeAlias = dict[bytes, bytes]


def _unpack(packed: bytes) -> list[Any]:
    """A MessagePack list from the walker (cmsgpack packs an empty table as an empty map)."""
    value = msgpack.unpackb(packed, raw=True)
    return list(value) if value else []


def parse_canonical(raw: list[Any]) -> tuple[Snapshot, Epochs]:
    """The canonical walker's reply: the snapshot with epochs set aside, and the epochs by key."""
    packed_entries, packed_epochs = raw
    entries = _unpack(packed_entries)
    flat_epochs = _unpack(packed_epochs)
    snapshot = parse_walk(entries)
    epochs = {bytes(flat_epochs[i]): bytes(flat_epochs[i + 1]) for i in range(0, len(flat_epochs), 2)}
    return snapshot, epochs


def with_epochs(snapshot: Snapshot, epochs: Epochs) -> Snapshot:
    """The snapshot with `lease_epoch` fields put back (what a re-sync writes)."""
    merged = dict(snapshot)
    for key, epoch in epochs.items():
        entry = merged.get(key)
        if entry is not None and isinstance(entry.value, dict):
            merged[key] = Entry(entry.kind, {**entry.value, b"lease_epoch": epoch}, entry.pttl)
        else:
            merged[key] = Entry("hash", {b"lease_epoch": epoch}, -1)
    return merged


def restore_commands(snapshot: Snapshot) -> list[list[bytes]]:
    """Commands that rebuild a keyspace from logical values (after a FLUSHALL)."""
    commands: list[list[bytes]] = []
    for key, entry in sorted(snapshot.items()):
        value = entry.value
        if entry.kind == "string" and isinstance(value, bytes):
            commands.append([b"SET", key, value])
        elif entry.kind == "hash" and isinstance(value, dict) and value:
            commands.append([b"HSET", key, *[p for f, v in value.items() for p in (f, v)]])
        elif entry.kind == "zset" and isinstance(value, dict) and value:
            commands.append([b"ZADD", key, *[p for m, s in value.items() for p in (s, m)]])
        elif entry.kind == "set" and isinstance(value, frozenset) and value:
            commands.append([b"SADD", key, *sorted(value)])
        elif entry.kind == "list" and isinstance(value, tuple) and value:
            commands.append([b"RPUSH", key, *value])
        else:
            raise ValueError(f"cannot rebuild {key!r} of type {entry.kind}")
        if entry.pttl > 0:
            commands.append([b"PEXPIRE", key, str(entry.pttl).encode()])
    return commands
