"""A replica beside each server (`--replicas`): what either executor writes must reach a replica.

Each server of a pair (the Lua server and the native server, the primaries) gets a replica: an
embedded server of its own, on the same frozen clock, loading the same module, that follows its
primary over loopback TCP. After every segment of a history that can write (so also right before
every restart), each replica's keyspace, `lease_epoch` fields included, must equal its primary's;
otherwise the history has a divergence of its own kind, "propagation". The native module's writes
must reach replicas by their effects (the spec's last paragraph on propagation): a write that is
not propagated leaves the replica behind, and a command replicated verbatim runs again on the
replica with its own run_id and clock, so both show up here without a restart.

I/O at the edges, a pure verdict in the middle: `Replicas.check` reads each primary's replication
offset once the segment's replies are in (every write of the segment, from every connection, lies
below it), waits until the replica's own offset reaches it (its INFO says so: the replica has
applied that much of the stream), walks both keyspaces with the snapshot walker of
difftest/spec/snapshot.py, and hands the two snapshots to `propagation_problem`, a pure comparison.
(WAIT is not used: after a full sync, a WAIT can wait for the replica's once-a-second report.)

Timing, all of it waited for (asked again until it holds), never slept on:
- a replica is a fresh process for every start of its primary (a restarted primary has a new
  replication id: only a full sync can follow it, and a running replica would only reconnect at
  its once-a-second replication cron); it connects at its first cron tick, at start, and the
  replayer waits for its full sync to be loaded before any step runs (`relink`): a sync taken after
  a write would carry a write the module never propagated;
- primaries sync a replica from an RDB file, not a socket (`repl-diskless-sync no`: after a
  socket transfer the primary holds the stream back until the replica's first acknowledgement,
  which comes at the replica's once-a-second cron, so the first write after every sync would take
  a second to arrive), start it at once (`repl-diskless-sync-delay 0`), run at `hz 100` (a finished
  transfer is noticed within 10 ms, not 100) and with `shutdown-timeout 0` (a restart does not wait
  up to 10 s for replicas to acknowledge: the check before it already saw them caught up);
- replicas load the transfer straight into their empty keyspace (`repl-diskless-load
  on-empty-db`: written to disk first, it is loaded only at the replica's next once-a-second cron),
  keep no AOF and save nothing;
- a replica's clock is confirmed like a primary's (TIME reads the frozen millisecond) before its
  walk counts, as a key's TTL is read against it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from valkey.exceptions import ConnectionError as ValkeyConnectionError

from difftest.servers.group import Server, ServerGroup
from difftest.servers.wire import Wire
from difftest.spec.replies import ErrorReply, Reply
from difftest.spec.snapshot import CANONICAL_WALK_SCRIPT, Entry, Snapshot, Walk, diff, parse_canonical, with_epochs

KIND = "propagation"  # the divergence's kind, beside the contract's "divergence"
# `run --replicas` by default? Only if replicas cost under 20% of the compared steps/s in
# bench/bench_replay.py --replicas (docs/contract-decisions.md has the figures): they do not.
DEFAULT = False
CATCH_UP_TIMEOUT_S = 20.0
DEATH_TIMEOUT_S = 2.0  # a replica this late is the harness's failure (exit 70), not a finding
_REPLICA_ROUND = [(b"INFO", b"replication"), (b"TIME",), (b"EVAL", CANONICAL_WALK_SCRIPT, b"0")]
PRIMARY_CONFIG = ("--repl-diskless-sync", "no", "--repl-diskless-sync-delay", "0", "--hz", "100",
                  "--shutdown-timeout", "0")  # fmt: skip
REPLICA_CONFIG = ("--appendonly", "no", "--repl-diskless-load", "on-empty-db")
SHOWN_KEYS = 4  # a reason names at most this many keys (and says how many more differ)
SHOWN_FIELDS = 4


class ServerOptions(TypedDict, total=False):
    """The options a server of a pair is started with (ServerGroup.add's keywords)."""

    tcp_port: int
    extra_config: tuple[str, ...]


def primary_options() -> ServerOptions:
    """How a server with a replica is started: a TCP port its replica connects to, and the
    settings above."""
    return {"tcp_port": 0, "extra_config": PRIMARY_CONFIG}


# ---- the verdict (pure) --------------------------------------------------------------------------------


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="backslashreplace")


def _names(values: Sequence[bytes]) -> str:
    shown = ", ".join(_text(v) for v in values[:SHOWN_FIELDS])
    return shown + (f" and {len(values) - SHOWN_FIELDS} more" if len(values) > SHOWN_FIELDS else "")


def _how(primary: Entry | None, replica: Entry | None) -> str:
    """How one key differs, by name only (no values: a replica's own run_id or clock must not make
    the reason differ from one replay to the next)."""
    if replica is None:
        return "missing on the replica"
    if primary is None:
        return "only on the replica"
    if primary.kind != replica.kind:
        return f"a {primary.kind} on the primary, a {replica.kind} on the replica"
    if isinstance(primary.value, dict) and isinstance(replica.value, dict):
        p, r = primary.value, replica.value
        word = "members" if primary.kind == "zset" else "fields"
        missing = sorted(p.keys() - r.keys())
        extra = sorted(r.keys() - p.keys())
        changed = sorted(k for k in p.keys() & r.keys() if p[k] != r[k])
        parts = []
        if missing:
            parts.append(f"{word} {_names(missing)} missing on the replica")
        if extra:
            parts.append(f"{word} {_names(extra)} only on the replica")
        if changed:
            parts.append(f"{word} {_names(changed)} differ")
        if parts:
            return ", ".join(parts)
    if primary.value != replica.value:
        return "its value differs"
    return "its TTL differs"


def propagation_problem(side: str, primary: Snapshot, replica: Snapshot) -> str | None:
    """None when a replica's keyspace equals its primary's (both with `lease_epoch` fields in);
    else the reason, naming the keys that differ and how."""
    differing = diff(primary, replica)
    if not differing:
        return None
    shown = [f"{_text(key)} ({_how(p, r)})" for key, (p, r) in list(differing.items())[:SHOWN_KEYS]]
    more = f"; and {len(differing) - SHOWN_KEYS} more key(s)" if len(differing) > SHOWN_KEYS else ""
    return f"{KIND}: the {side} server's replica differs from its primary: {'; '.join(shown)}{more}"


def snapshot_of(walk: Walk) -> Snapshot:
    """A raw walk (difftest/spec/snapshot.py's walker) as one snapshot, `lease_epoch` fields in place."""
    return with_epochs(*parse_canonical(walk))


@dataclass(frozen=True)
class Propagation:
    """A replica that does not hold its primary's keyspace: which side, why, and both keyspaces."""

    side: str
    reason: str
    primary: Snapshot
    replica: Snapshot


# ---- the replicas (I/O) --------------------------------------------------------------------------------


def _replica_config(primary: Server) -> tuple[str, ...]:
    """A replica's settings, following its primary at the port the primary listens on now."""
    return (*REPLICA_CONFIG, "--replicaof", "127.0.0.1", str(primary.tcp_port))


class _Pair:
    """One primary and its replica, with a connection to each."""

    def __init__(self, side: str, primary: Server, group: ServerGroup) -> None:
        if primary.tcp_port is None:
            raise RuntimeError(f"{side}: a server with a replica needs a TCP port (start it with primary_options())")
        self.side = side
        self.primary = primary
        self.replica = group.beside(primary, f"{primary.name}-replica", _replica_config(primary))
        self.linked_start = -1  # the primary's start the replica follows
        self.primary_wire: Wire | None = None
        self.replica_wire: Wire | None = None

    def stale(self) -> bool:
        return self.linked_start != self.primary.starts or not self.replica.running

    def renew(self) -> None:
        """A fresh replica process for the primary's current start."""
        self.close_wires()
        self.replica.kill()
        self.linked_start = self.primary.starts
        # the primary's port as of this start: a restarted primary may have had to take a new one
        self.replica.extra_config = _replica_config(self.primary)
        self.replica.start()

    def await_link(self) -> None:
        """Until the replica has loaded its full sync (its INFO says the link is up); asked again at
        once, each round trip blocking on the replica."""
        _, replica = self.wires()
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while _field(replica.call(b"INFO", b"replication"), b"master_link_status") != b"up":
            if not self.replica.running or time.monotonic() > deadline:
                raise RuntimeError(f"{self.replica.name} did not sync with its primary within "
                                   f"{CATCH_UP_TIMEOUT_S:.0f} s: see {self.replica.logfile}")  # fmt: skip

    def wires(self) -> tuple[Wire, Wire]:
        if self.primary_wire is None:
            self.primary_wire = Wire(self.primary.address)
        if self.replica_wire is None:
            self.replica_wire = Wire(self.replica.address)
        return self.primary_wire, self.replica_wire

    def close_wires(self) -> None:
        for wire in (self.primary_wire, self.replica_wire):
            if wire is not None:
                with contextlib.suppress(OSError):
                    wire.close()
        self.primary_wire = self.replica_wire = None

    def stop(self) -> None:
        """The replica stopped (it starts again, synced afresh, when next wanted)."""
        self.close_wires()
        self.replica.kill()

    def close(self) -> None:
        """The replica gone for good (its container removed)."""
        self.close_wires()
        self.replica.close()


class Replicas:
    """A replica for each of the given primaries (side name, server), in the primaries' group
    (its directory and clock); `check` compares each with its primary."""

    def __init__(self, group: ServerGroup, primaries: Sequence[tuple[str, Server]]) -> None:
        self.group = group
        self.pairs = [_Pair(side, primary, group) for side, primary in primaries]
        try:
            self.relink()
        except BaseException:
            self.close()
            raise

    def relink(self) -> None:
        """A fresh replica for every primary started since its replica was, each waited for until its
        full sync is loaded (its link is up). Called right after servers start, before a step writes:
        a sync taken after a write would carry a write the module never propagated."""
        stale = [pair for pair in self.pairs if pair.stale()]
        for pair in stale:
            pair.renew()
        for pair in stale:
            pair.await_link()

    def check(self) -> Propagation | None:
        """Every replica caught up with its primary, then compared with it: the first that differs."""
        self.relink()  # a no-op when the replayer relinked after every start, as it does
        for pair in self.pairs:
            pair.wires()[0].send([(b"INFO", b"replication"), (b"EVAL", CANONICAL_WALK_SCRIPT, b"0")])
        targets, primary_walks = [], []
        for pair in self.pairs:
            primary, _ = pair.wires()
            offset = _field(primary.read(), b"master_repl_offset")
            targets.append(offset if isinstance(offset, int) else None)
            primary_walks.append(primary.read_raw())
        unsent: dict[int, BaseException] = {}
        for number, pair in enumerate(self.pairs):
            try:
                pair.wires()[1].send(_REPLICA_ROUND)
            except (ValkeyConnectionError, OSError) as lost:
                unsent[number] = lost
        for number, (pair, target, primary_walk) in enumerate(zip(self.pairs, targets, primary_walks, strict=True)):
            gone = unsent.get(number)
            replica_walk = self._caught_up_walk(pair, target) if gone is None else self._lost(pair, gone)
            if replica_walk is None:  # the native's replica died of what its primary sent it: a finding
                reason = f"{KIND}: the {pair.side} server's replica died (see {pair.replica.logfile.name})"
                return Propagation(pair.side, reason, snapshot_of(primary_walk), {})
            if primary_walk == replica_walk:
                continue
            held, copied = snapshot_of(primary_walk), snapshot_of(replica_walk)
            problem = propagation_problem(pair.side, held, copied)
            if problem is not None:
                return Propagation(pair.side, problem, held, copied)
        return None

    def _caught_up_walk(self, pair: _Pair, target: int | None) -> Walk | None:
        """The replica's walk, once it has applied its primary's stream up to `target` (its own offset
        says so) and reads the frozen millisecond; asked again, in one round trip each time, until
        both hold (the stream is on its way: most often the first answer holds already). None when
        the native's replica died."""
        expected = self.group.clock.now_ms
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        _, replica = pair.wires()
        while True:
            try:
                walk: Walk | ErrorReply  # (the wire's raw reply: a walk's strings, or the error refusing it)
                info, now, walk = (replica.read(), replica.read(), replica.read_raw())
            except (ValkeyConnectionError, OSError) as lost:
                return self._lost(pair, lost)
            linked = _field(info, b"master_link_status") == b"up"
            offset = _field(info, b"slave_repl_offset")
            if linked and target is not None and isinstance(offset, int) and offset >= target and _ms(now) == expected:
                if isinstance(walk, ErrorReply):
                    raise RuntimeError(f"{pair.replica.name} refused the keyspace walk: {walk.message}")
                return walk
            if not pair.replica.running:
                if pair.side == "native":
                    return None
                raise RuntimeError(f"{pair.replica.name} died: see {pair.replica.logfile}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{pair.replica.name} did not catch up with its primary within "
                                   f"{CATCH_UP_TIMEOUT_S:.0f} s (offset {offset!r} of {target!r}, link "
                                   f"{_field(info, b'master_link_status')!r}, clock {_ms(now)} of {expected} ms): "
                                   f"see {pair.replica.logfile}")  # fmt: skip
            replica.send(_REPLICA_ROUND)  # each round trip blocks on the replica: no sleep needed

    def _lost(self, pair: _Pair, lost: BaseException) -> Walk | None:
        """A replica's connection closed: None once its process is seen to have ended (the socket
        closes a moment before the process is reaped) if it is the native's; else `lost` goes on (never a
        walk: typed as `_caught_up_walk`'s answer, which it stands for)."""
        deadline = time.monotonic() + DEATH_TIMEOUT_S
        while pair.replica.running and time.monotonic() < deadline:
            time.sleep(0.01)  # waiting for the process to be reaped, not for an answer
        if pair.replica.running or pair.side != "native":
            raise RuntimeError(f"{pair.replica.name} closed its connection ({lost}): see {pair.replica.logfile}")
        return None

    def close(self) -> None:
        for pair in self.pairs:
            pair.close()

    @property
    def servers(self) -> list[Server]:
        return [pair.replica for pair in self.pairs]


def _field(info: Reply, name: bytes) -> int | bytes | None:
    """A field of an INFO reply: an int when it is digits, else its bytes; None when absent."""
    text = info if isinstance(info, bytes) else b""
    for line in text.splitlines():
        if line.startswith(name + b":"):
            value = line.split(b":", 1)[1].strip()
            return int(value) if value.isdigit() else value
    return None


def _ms(reply: object) -> int:
    """TIME's reply in ms; -1 for anything else (an error while a full sync loads)."""
    if not isinstance(reply, list) or len(reply) != 2:
        return -1
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


__all__ = ["KIND", "Propagation", "Replicas", "primary_options", "propagation_problem", "snapshot_of"]
