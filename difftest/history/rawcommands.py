"""Which commands a history's raw step may send: the data commands of the history's keys (an allow-list)."""

from __future__ import annotations

from collections.abc import Sequence

# A history is data: it travels (a bug report's artifact, last night's corpus, a file `fuzz import`
# took from another machine) and is replayed on servers running as the invoking user. A raw step may
# therefore only read or write keys of the servers it is replayed on: never open a connection
# (MIGRATE), feed the server's decoder a crafted payload (RESTORE), run code (EVAL, FUNCTION), read or
# change a configuration (CONFIG), see other clients (CLIENT), stop, block or re-point a server. The
# list is Valkey's own flags, not a judgement per command: the commands COMMAND INFO flags `write` or
# `readonly` on keys (a key position, or movable keys) that are in none of the categories below, as
# Valkey 9.1.2 answers (tests/test_raw_commands.py asks the server again and holds the two equal, so a
# command a later Valkey adds is refused until it is reviewed here). A container's subcommands are
# named with it ("OBJECT ENCODING").
FORBIDDEN_CATEGORIES = ("@dangerous", "@admin", "@connection", "@scripting", "@pubsub", "@blocking", "@transaction")
DATA_COMMANDS: frozenset[str] = frozenset((
    "APPEND", "BITCOUNT", "BITFIELD", "BITFIELD_RO", "BITOP", "BITPOS", "CLUSTERSCAN", "COPY", "DECR", "DECRBY",
    "DEL", "DELIFEQ", "DUMP", "EXISTS", "EXPIRE", "EXPIREAT", "EXPIRETIME", "GEOADD", "GEODIST", "GEOHASH", "GEOPOS",
    "GEORADIUS", "GEORADIUSBYMEMBER", "GEORADIUSBYMEMBER_RO", "GEORADIUS_RO", "GEOSEARCH", "GEOSEARCHSTORE", "GET",
    "GETBIT", "GETDEL", "GETEX", "GETRANGE", "GETSET", "HDEL", "HEXISTS", "HEXPIRE", "HEXPIREAT", "HEXPIRETIME",
    "HGET", "HGETALL", "HGETDEL", "HGETEX", "HINCRBY", "HINCRBYFLOAT", "HKEYS", "HLEN", "HMGET", "HMSET", "HPERSIST",
    "HPEXPIRE", "HPEXPIREAT", "HPEXPIRETIME", "HPTTL", "HRANDFIELD", "HSCAN", "HSET", "HSETEX", "HSETNX", "HSTRLEN",
    "HTTL", "HVALS", "INCR", "INCRBY", "INCRBYFLOAT", "LCS", "LINDEX", "LINSERT", "LLEN", "LMOVE", "LMPOP", "LPOP",
    "LPOS", "LPUSH", "LPUSHX", "LRANGE", "LREM", "LSET", "LTRIM", "MEMORY USAGE", "MGET", "MOVE", "MSET", "MSETEX",
    "MSETNX", "OBJECT ENCODING", "OBJECT FREQ", "OBJECT IDLETIME", "OBJECT REFCOUNT", "PERSIST", "PEXPIRE",
    "PEXPIREAT", "PEXPIRETIME", "PFADD", "PFCOUNT", "PFMERGE", "PSETEX", "PTTL", "RENAME", "RENAMENX", "RPOP",
    "RPOPLPUSH", "RPUSH", "RPUSHX", "SADD", "SCARD", "SDIFF", "SDIFFSTORE", "SET", "SETBIT", "SETEX", "SETNX",
    "SETRANGE", "SINTER", "SINTERCARD", "SINTERSTORE", "SISMEMBER", "SMEMBERS", "SMISMEMBER", "SMOVE", "SPOP",
    "SRANDMEMBER", "SREM", "SSCAN", "STRLEN", "SUBSTR", "SUNION", "SUNIONSTORE", "TOUCH", "TTL", "TYPE", "UNLINK",
    "XACK", "XADD", "XAUTOCLAIM", "XCLAIM", "XDEL", "XGROUP CREATE", "XGROUP CREATECONSUMER", "XGROUP DELCONSUMER",
    "XGROUP DESTROY", "XGROUP SETID", "XINFO CONSUMERS", "XINFO GROUPS", "XINFO STREAM", "XLEN", "XPENDING", "XRANGE",
    "XREVRANGE", "XSETID", "XTRIM", "ZADD", "ZCARD", "ZCOUNT", "ZDIFF", "ZDIFFSTORE", "ZINCRBY", "ZINTER",
    "ZINTERCARD", "ZINTERSTORE", "ZLEXCOUNT", "ZMPOP", "ZMSCORE", "ZPOPMAX", "ZPOPMIN", "ZRANDMEMBER", "ZRANGE",
    "ZRANGEBYLEX", "ZRANGEBYSCORE", "ZRANGESTORE", "ZRANK", "ZREM", "ZREMRANGEBYLEX", "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE", "ZREVRANGE", "ZREVRANGEBYLEX", "ZREVRANGEBYSCORE", "ZREVRANK", "ZSCAN", "ZSCORE", "ZUNION",
    "ZUNIONSTORE",
))  # fmt: skip
# Beside them, the two that empty the server's keys, nothing else (@dangerous for a production
# server's data; saving is off on the harness's servers, so they touch no file)
WIPES: frozenset[str] = frozenset(("FLUSHALL", "FLUSHDB"))
# the commands whose subcommands Valkey lists as commands of their own (named with them in a refusal)
CONTAINERS: frozenset[str] = frozenset((
    "ACL", "CLIENT", "CLUSTER", "COMMAND", "COMMANDLOG", "CONFIG", "FUNCTION", "LATENCY", "MEMORY", "MODULE",
    "OBJECT", "PUBSUB", "SCRIPT", "SLOWLOG", "XGROUP", "XINFO",
))  # fmt: skip
# what to use instead, for the commands a history author is likeliest to reach for
INSTEAD: dict[str, str] = {
    "SHUTDOWN": "a 'restart' or 'crash' step",
    "DEBUG": "a 'crash' step",
    "SELECT": "the header's 'db'",
    "MULTI": "'multi' and 'exec' steps",
    "EXEC": "'multi' and 'exec' steps",
    "CONFIG": "a 'notify', 'memory' or 'replicas' step",
    "ACL": "the header's 'users'",
}


def raw_command_name(command: Sequence[bytes]) -> str:
    """The command a raw step names, with its subcommand where it is a container's ("OBJECT ENCODING")."""
    name = command[0].decode("utf-8", "replace").upper()
    if name in CONTAINERS and len(command) > 1:
        return f"{name} {command[1].decode('utf-8', 'replace').upper()}"
    return name


def raw_refusal(command: Sequence[bytes]) -> str | None:
    """Why a raw step may not send `command` (one clause: what, and what to do), or None when it may."""
    name = raw_command_name(command)
    if name in DATA_COMMANDS or name in WIPES:
        return None
    instead = INSTEAD.get(name.split(" ")[0])
    hint = f"; use {instead}" if instead else ""
    return (
        f"{name!r} is not a data command: a raw step may only read or write keys (the commands listed in "
        f"difftest/history/rawcommands.py, docs/security.md){hint}"
    )
