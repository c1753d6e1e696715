"""Whole-keyspace snapshots as logical values (a hash as a map, a zset as member → score).

DUMP bytes are not comparable (equal hashes dump differently by encoding), so one server-side
script walks the keyspace and returns every key's type, logical value and TTL in one reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import valkey

WALK_SCRIPT = b"""
local out = {}
local cursor = '0'
repeat
  local page = redis.call('SCAN', cursor, 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    local kind = redis.call('TYPE', key)['ok']
    local value
    if kind == 'string' then value = {redis.call('GET', key)}
    elseif kind == 'hash' then value = redis.call('HGETALL', key)
    elseif kind == 'zset' then value = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    elseif kind == 'set' then value = redis.call('SMEMBERS', key)
    elseif kind == 'list' then value = redis.call('LRANGE', key, 0, -1)
    else value = {} end
    out[#out + 1] = {key, kind, value, redis.call('PTTL', key)}
  end
until cursor == '0'
return out
"""

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
    return parse_walk(client.execute_command(b"EVAL", WALK_SCRIPT, b"0"))


def diff(left: Snapshot, right: Snapshot) -> dict[bytes, tuple[Entry | None, Entry | None]]:
    """Keys whose entries differ, with both sides (None where a side lacks the key)."""
    return {
        key: (left.get(key), right.get(key))
        for key in sorted(left.keys() | right.keys())
        if left.get(key) != right.get(key)
    }
