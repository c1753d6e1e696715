"""One executor's side: its connections, and how each history step becomes commands.

The only hosts of the two executors, for the replay and for the tests alike: the Lua side plays the
host (guards, the `paused?` read, EVALSHA), the native side sends one module command (or, for a
step an upgrade's Lua-era worker makes, plays the Lua host on its own server). The replay
puts a canonical keyspace walk after every step on the admin connection; `run` and `call` (the
tests') send the same commands without the walks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from difftest.base.problems import SetupProblem
from difftest.history.format import (
    REPLICA_OBEYS,
    CallStep,
    MemoryLimit,
    RawWrite,
    ReplicasRequired,
    Step,
)
from difftest.history.resolve import Resolved, resolve
from difftest.judge.events import MARKER_CHANNEL, PATTERNS, Event, Events, parse_message
from difftest.servers.group import Server
from difftest.servers.local import EmbeddedServer
from difftest.servers.walker import FORGET_WALK, WALK_COMMAND, module_walk_wanted, tracked_walk
from difftest.servers.wire import Element, Future, Pipe, Wire
from difftest.spec.calls import Call
from difftest.spec.replies import ErrorReply, NotSent, Refused, Reply
from difftest.spec.snapshot import CANONICAL_WALK_SCRIPT, Raw, Walk
from executors.lua.adapter import (
    PausedThenClaim,
    PlainCommand,
    evalsha_command,
    host_plan,
    load_scripts,
    reads_as_paused,
)

USER_PASSWORD = "difftest"
WALK_SHA = hashlib.sha1(CANONICAL_WALK_SCRIPT).hexdigest()
SCRIPT_WALK = (b"EVALSHA", WALK_SHA.encode(), b"0")
MODULE_WALK = (WALK_COMMAND,)
WalkCommand = tuple[bytes, ...]


WireKey = str | None | tuple[str | None, int]  # a user (None: the admin) on RESP2, or (user, 3) on RESP3


# The server conditions a history switches (docs/history-format.md: `memory`, `replicas`), each with
# the CONFIG SET arguments that switch it on and off, on both servers alike. Both refuse a script at
# its first write (docs/contract-decisions.md): deterministic, whatever the keyspace holds.
MEMORY, REPLICAS = MemoryLimit.condition, ReplicasRequired.condition
CONDITIONS: dict[str, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = {
    # maxmemory 1 with noeviction: any keyspace is over it (OOM at a deny-oom first write)
    MEMORY: ((b"maxmemory-policy", b"noeviction", b"maxmemory", b"1"),
             (b"maxmemory-policy", b"noeviction", b"maxmemory", b"0")),
    # more good replicas required than any server here has (one at most): NOREPLICAS at any first
    # write; min-replicas-max-lag must be above 0 for the server to count them at all
    REPLICAS: ((b"min-replicas-to-write", b"100", b"min-replicas-max-lag", b"10"),
               (b"min-replicas-to-write", b"0")),
}  # fmt: skip
# A replica's own memory limit (a `memory` step's `replica`), set beside its primary's: None, none.
# A replica that obeys it obeys it only while a call to it runs (`replica-ignore-maxmemory no` around
# the call, on its wire): obeyed all along, it would refuse its primary's deny-oom writes too (valkey
# checks the limit for the primary's link inside a replicated MULTI) and stop being a copy of it,
# whoever the executor. A call to a replica stands alone, after both replicas caught up: no write
# of the primary reaches it meanwhile.
# At rest both kinds of limit are the same configuration (by whether a limit is set):
REPLICA_MEMORY: dict[bool, tuple[bytes, ...]] = {
    False: (b"maxmemory", b"0", b"replica-ignore-maxmemory", b"yes"),
    True: (b"maxmemory-policy", b"noeviction", b"maxmemory", b"1", b"replica-ignore-maxmemory", b"yes"),
}  # fmt: skip
OBEYED_AROUND_A_CALL = ((b"CONFIG", b"SET", b"replica-ignore-maxmemory", b"no"),
                        (b"CONFIG", b"SET", b"replica-ignore-maxmemory", b"yes"))  # fmt: skip


@dataclass
class StepOutcome:
    """What one side did at one step: its reply and the keyspace walk after it (raw); inside a
    transaction, both are elements of its EXEC reply."""

    reply: Reply | Future | Element
    walk: Future | Element | None  # None: a run without walks (`Side.run`)
    workers: dict[int, _OpenClaim]  # the side's open split claims after this step (a shallow copy)
    marker: int = 0  # keyspace notifications on: the marker published after the step's walk


@dataclass
class _Transaction:
    """A transaction's calls, held until its EXEC step (or the end of the segment) sends them all:
    (the script the call needs loaded first, the command or None when the host refused it, the
    reply's element, the walk's element, the notifications marker published after it or 0)."""

    entries: list[tuple[str | None, Sequence[bytes] | None, Element | None, Element | None, int]] = field(
        default_factory=list
    )
    # a condition switched inside the transaction, by the entry it comes before (its own walk's)
    switches: dict[int, MemoryLimit | ReplicasRequired] = field(default_factory=dict)
    # sent to the server's replica (a `multi` with a `target`): no walk or marker inside it (the
    # replica has no walker; nothing it runs is written or notified), each element's walk the
    # primary's after EXEC
    on_replica: bool = False
    protocol: int = 2  # its connection's (the admin's wire speaking it)


class Side:
    """A server reached through raw wires: one admin, one per user, each on the history's database
    (`db`). The users (name: ACL rules) are made by the side, with USER_PASSWORD, on their first use
    after every start of the server."""

    name = "side"
    scripts: dict[str, bytes] = {}  # noqa: RUF012 (the Lua host's scripts, by verb: a ScriptHost's own)

    def __init__(self, server: EmbeddedServer, users: dict[str, tuple[str, ...]], db: int = 0) -> None:
        self.server = server
        self.users = users
        self.db = db
        self.pipe = Pipe()
        self.wires: dict[WireKey, Wire] = {}
        self.transaction: _Transaction | None = None
        self.connected_start = -1  # the server start the wires, scripts and users belong to
        # keyspace notifications (a history's `notify` step): the flags set ("": off), and the one
        # subscriber connection that hears every event and the markers between steps
        self.notify_flags = ""
        # a whole walk after every step even where the module tracks (Replayer: a history replayed
        # again over whole walks); kept across reconnections, which set the walk again
        self.whole_walks = False
        self.subscriber: Wire | None = None
        self.markers = 0  # the last marker published
        # the server conditions a history switched on (`memory`, `replicas` steps: CONDITIONS)
        self.conditions: set[str] = set()
        # the server's read-only replica, for a history's calls with a `target` (set by the replay),
        # its admin wires (by protocol) and the scripts loaded since its start
        self.replica: Server | None = None
        self._replica_wires: dict[int, Wire] = {}
        self._replica_start = -1
        self.replica_scripts: set[str] = set()
        self.replica_memory: str | None = None  # the replica's own limit while the memory limit is on
        self.connect()

    # -- connections ------------------------------------------------------------------------

    def connect(self) -> None:
        """The admin wire for a freshly started server, and what it is, in one round trip. Scripts
        are loaded on their first use (`ScriptHost`), the Lua walker only where it walks: a native
        server restarts about once a history, and most of its histories call no script."""
        address = self.server.address
        admin = Wire(address, db=self.db)
        self.wires = {None: admin}
        # [None] when the server lacks the walker module. Active expiry off: a key another writer
        # gave a TTL goes when a read meets it past its time on the frozen clock, never in the
        # server's cron between steps (docs/contract-decisions.md, "Keys with a TTL")
        commands: list[tuple[bytes, ...]] = [
            (b"COMMAND", b"INFO", WALK_COMMAND), (b"INFO", b"server"), (b"DEBUG", b"SET-ACTIVE-EXPIRE", b"0"),
        ]  # fmt: skip
        admin.send(commands)
        walker, info, expiry = [admin.read() for _ in commands]
        for answer in (info, expiry):
            if isinstance(answer, ErrorReply):
                raise SetupProblem(f"{self.name} server refused the set-up: {answer.message}")
        assert isinstance(info, bytes)
        self.run_id = info.split(b"run_id:")[1][:40].decode()
        has_walker = walker not in ([None], []) and not isinstance(walker, ErrorReply)
        # the same canonical reply either way: the module's walk costs the server a quarter as much
        self.walk_command: WalkCommand = MODULE_WALK if has_walker and module_walk_wanted() else SCRIPT_WALK
        # the tracked walk where the module walks (the keys written since the last walk: tracked_walk)
        self.tracked_walk = tracked_walk() if self.walk_command == MODULE_WALK else None
        if self.tracked_walk is not None and not self.whole_walks:
            self.walk_command = self.tracked_walk
        if self.walk_command == SCRIPT_WALK:
            if self.db:  # the script's ARGV[1]: the database its caller selected
                self.walk_command = (*SCRIPT_WALK, b"%d" % self.db)
            loaded = admin.call(b"SCRIPT", b"LOAD", CANONICAL_WALK_SCRIPT)
            if isinstance(loaded, ErrorReply):
                raise SetupProblem(f"{self.name} server refused the set-up: {loaded.message}")
        self.loaded_scripts: set[str] = set()  # the verbs whose script this server start has been sent
        # users live in memory only, and are made on their first use after every start (`ensure_user`):
        # a history declares one per key kind and permission (27) and calls few of them, and a
        # restart made them all again (about 1.5 ms a side)
        self.made_users: set[str] = set()
        self.connected_start = self.server.starts
        for condition in sorted(self.conditions):
            # a started server forgot its CONFIG SET: a condition holds until the history lifts it
            self.set_condition(condition, True, self.replica_memory)
        if self.notify_flags:
            # a started server has its configured flags again: kept on, as a deployment's config
            # file would keep them (docs/contract-decisions.md, "Keyspace notifications")
            self.set_notify(self.notify_flags)

    # -- the server's conditions and the replica --------------------------------------------

    def set_condition(self, condition: str, on: bool, replica: str | None = None, admin: Wire | None = None) -> None:
        """A server condition (CONDITIONS) switched on or off by CONFIG SET (the memory limit with the
        replica's own, `replica`: REPLICA_MEMORY); the pipe must be synced (a boundary between
        segments, a reset, a re-sync). `admin`: the connection it goes on (None: the admin wire)."""
        switched_on, switched_off = CONDITIONS[condition]
        admin = admin or self.wires[None]
        admin.send([(b"CONFIG", b"SET", *(switched_on if on else switched_off))])
        answer = admin.read()
        if isinstance(answer, ErrorReply):
            raise SetupProblem(f"{self.name} server refused the {condition} condition: {answer.message}")
        if on:
            self.conditions.add(condition)
        else:
            self.conditions.discard(condition)
        if condition == MEMORY:
            had, self.replica_memory = self.replica_memory, replica if on else None
            if self.replica is not None and self.replica.running and (had or self.replica_memory):
                self._set_replica_memory(self.replica_wire())

    @property
    def replica_obeys_its_limit(self) -> bool:
        """The memory limit is on and the replica obeys a limit of its own (only around a call to it)."""
        return self.replica_memory == REPLICA_OBEYS and MEMORY in self.conditions

    def _set_replica_memory(self, wire: Wire) -> None:
        answer = wire.call(b"CONFIG", b"SET", *REPLICA_MEMORY[self.replica_memory is not None])
        if isinstance(answer, ErrorReply):
            raise SetupProblem(f"{self.name} server's replica refused its memory limit: {answer.message}")

    def replica_wire(self, protocol: int = 2) -> Wire:
        """The admin wire speaking `protocol` to the server's replica, opened on its first use after
        every start of the replica (then the replica's scripts are forgotten too)."""
        if self.replica is None:
            raise SetupProblem(f"a call to the {self.name} server's replica, which has none (an attached pair "
                               "has none: drop --attach)")  # fmt: skip
        if self._replica_start != self.replica.starts:
            self.close_replica()
            self._replica_start = self.replica.starts
        wire = self._replica_wires.get(protocol)
        if wire is None:
            fresh = not self._replica_wires
            wire = self._replica_wires[protocol] = Wire(self.replica.address, protocol=protocol, db=self.db)
            if fresh and self.replica_memory is not None and MEMORY in self.conditions:  # a fresh replica has none
                self._set_replica_memory(wire)
        return wire

    def close_replica(self) -> None:
        for wire in self._replica_wires.values():
            wire.close()
        self._replica_wires = {}
        self.replica_scripts = set()

    def target_wire(self, step: Resolved) -> Wire:
        """Where the step's call goes: the replica's wire (`target`), else its user's wire; each on
        the step's protocol."""
        return self.replica_wire(step.protocol) if step.on_replica else self.wire(step.user, step.protocol)

    # -- keyspace notifications -------------------------------------------------------------

    def set_notify(self, flags: str) -> None:
        """`notify-keyspace-events` set to `flags` ("": off) on the server, and the subscriber
        opened (or closed) to match; the pipe must be synced (a boundary between segments)."""
        answer = self.wires[None].call(b"CONFIG", b"SET", b"notify-keyspace-events", flags.encode())
        if isinstance(answer, ErrorReply):
            raise SetupProblem(f"{self.name} server refused notify-keyspace-events {flags!r}: {answer.message}")
        self.notify_flags = flags
        if not flags:
            self.close_subscriber()
            return
        if self.subscriber is None:
            wire = Wire(self.server.address)
            wire.send([(b"PSUBSCRIBE", *PATTERNS), (b"SUBSCRIBE", MARKER_CHANNEL)])
            for _ in range(len(PATTERNS) + 1):  # each subscription confirmed: from here it hears everything
                wire.read()
            self.subscriber = wire

    def close_subscriber(self) -> None:
        if self.subscriber is not None:
            self.subscriber.close()
            self.subscriber = None

    def mark(self) -> int:
        """A marker after everything queued on the admin wire: the events before it are done."""
        self.markers += 1
        self.pipe.add(self.wires[None], (b"PUBLISH", MARKER_CHANNEL, b"%d" % self.markers))
        return self.markers

    def events(self, outcomes: Sequence[StepOutcome]) -> list[Events]:
        """Each outcome's events, read from the subscriber up to its marker (after `finish`): the
        server runs every connection's commands in one order and delivers a step's events to the
        subscriber before the marker published after it, so no wait and no sleep is needed. A
        closing marker, published outside any transaction, ends the read: a step's marker queued in
        a transaction the server aborted never comes (nor do that step's events)."""
        if not outcomes or self.subscriber is None:
            return [() for _ in outcomes]
        found: dict[int, list[Event]] = {o.marker: [] for o in outcomes}
        closing = self.mark()
        self.pipe.sync()
        pending: list[Event] = []
        while True:
            item = parse_message(self.subscriber.read())
            if isinstance(item, Event):
                pending.append(item)
            elif isinstance(item, int):
                if item == closing:
                    break
                if item in found:
                    found[item] = pending
                pending = []
        return [tuple(found[o.marker]) for o in outcomes]

    def drain(self) -> None:
        """Every event so far read and dropped (a re-sync's writes are the harness's)."""
        if self.subscriber is not None:
            marker = self.mark()
            self.pipe.sync()
            while parse_message(self.subscriber.read()) != marker:
                pass

    def ensure_user(self, user: str) -> None:
        """The declared `user` made on the server, if it is not yet since the server started (a
        round trip of the admin's, after whatever the pipe holds: the order stays the history's)."""
        if user in self.made_users:
            return
        rules = self.users[user]
        self.pipe.sync()
        made = self.wires[None].call(b"ACL", b"SETUSER", user.encode(), b"reset", b"on", f">{USER_PASSWORD}".encode(),
                                     b"+@all", *[r.encode() for r in rules])  # fmt: skip
        if isinstance(made, ErrorReply):
            raise SetupProblem(f"{self.name} server refused the user {user!r} ({' '.join(rules)}): {made.message}")
        self.made_users.add(user)

    def wire(self, user: str | None, protocol: int = 2) -> Wire:
        """The wire of `user` (None: the admin) speaking `protocol`, opened on its first use: a
        history declares many users (one per permission class) and calls as few of them; a restart
        need not reopen them all. A RESP3 wire is a connection of its own (HELLO 3)."""
        key: WireKey = user if protocol == 2 else (user, protocol)
        wire = self.wires.get(key)
        if wire is None:
            if user is not None:
                self.ensure_user(user)
            password = None if user is None else USER_PASSWORD
            wire = self.wires[key] = Wire(self.server.address, user, password, protocol, self.db)
        return wire

    def prepare(self, users: dict[str, tuple[str, ...]], db: int = 0) -> None:
        """Ready for the next history on a flushed server: reuse the wires, scripts and users
        while the server has not restarted and the users are the same (another database: each wire
        selects it). Keyspace notifications go off (a history switches them on with its `notify` step)."""
        self.pipe.reset()
        for condition in sorted(self.conditions):
            if self.server.starts == self.connected_start:
                self.set_condition(condition, False)  # lifted before the reset's FLUSHALL (a write)
            else:  # a server started since: its config is the default, no condition
                self.conditions.discard(condition)
        if self.notify_flags:
            if self.server.starts == self.connected_start:
                self.set_notify("")
            else:  # a server started since (the native died): its flags are the default, off
                self.notify_flags = ""
                self.close_subscriber()
        self.transaction = None
        if self.server.starts != self.connected_start or users != self.users:
            self.users = users
            self.db = db
            self.reconnect()
        elif db != self.db:
            self.select(db)

    def select(self, db: int) -> None:
        """Every open wire moved to database `db` (one round trip each), and the walk with it."""
        self.db = db
        for wire in self.wires.values():
            answer = wire.call(b"SELECT", b"%d" % db)
            if isinstance(answer, ErrorReply):
                raise SetupProblem(f"{self.name} server refused database {db}: {answer.message}")
            wire.connection.db = db  # (what its handshake selects, should valkey-py connect again)
        if self.walk_command[0] == SCRIPT_WALK[0]:
            self.walk_command = (*SCRIPT_WALK, b"%d" % db) if db else SCRIPT_WALK
        self.close_replica()  # the replica's wire, opened again on its next use, selects `db` too

    def reconnect(self) -> None:
        self.pipe.reset()
        self.close_subscriber()  # opened again by `connect` while the flags are on
        for wire in self.wires.values():
            wire.close()
        if self.server.starts == self.connected_start:
            # the same server process: the users an earlier history made go (a restarted one has none),
            # so that a user is made with this history's rules on its first use
            admin = Wire(self.server.address)  # (users are the server's, whatever the database)
            for user in admin.call(b"ACL", b"USERS") or []:  # type: ignore[union-attr]
                if user != b"default":
                    admin.call(b"ACL", b"DELUSER", user)  # type: ignore[arg-type]
            admin.close()
        self.connect()

    def close(self) -> None:
        self.close_subscriber()
        self.close_replica()
        for wire in self.wires.values():
            wire.close()
        self.wires = {}

    # -- steps ------------------------------------------------------------------------------

    def track(self, on: bool) -> None:
        """Tracked walks on (where the module walks) or off (a whole walk after every step); the
        next tracked walk is a whole one either way (the pipe must be synced)."""
        self.whole_walks = not on
        if self.tracked_walk is None:
            return
        self.walk_command = self.tracked_walk if on else MODULE_WALK
        self.forget_walks()

    def forget_walks(self) -> None:
        """The next tracked walk is a whole one: the keyspace is not what the walks so far reported
        to the harness (a re-sync rewrote it; the walks of a segment run again were never read)."""
        if self.tracked_walk is not None:
            self.wires[None].call(*FORGET_WALK)

    def walk(self) -> Future:
        return self.pipe.add(self.wires[None], self.walk_command, raw=True)

    def run_steps(self, steps: Sequence[Resolved], walk: bool = True) -> list[StepOutcome]:
        """Queue every step and (unless `walk` is false) its walk; replies resolve at `finish`
        (or earlier, when needed)."""
        outcomes = []
        for step in steps:
            if step.in_multi or step.is_multi or step.is_exec:
                outcomes.append(self._transaction_step(step, walk))
                continue
            reply = self.step(step)
            outcome = StepOutcome(reply, self.walk() if walk and not step.unwalked else None, self.capture_workers())
            if self.subscriber is not None:  # (notifications off: nothing more a step)
                outcome.marker = self.mark()
            outcomes.append(outcome)
        self.close_transaction(walk)  # a transaction the segment ends in (an artifact cut inside it) runs
        return outcomes

    def _answer(self, item: Reply | Future | Element | None) -> Raw:
        """A reply or a walk as the wire decoded it (a walk's reply untyped: Raw)."""
        if isinstance(item, Future):
            return self.pipe.get(item)
        if isinstance(item, Element):
            return self.pipe.get_element(item)
        return item

    def finish(self, outcomes: list[StepOutcome]) -> list[tuple[Reply, Walk | None]]:
        self.pipe.sync()
        return [(self._answer(o.reply), self._answer(o.walk)) for o in outcomes]

    # -- transactions -----------------------------------------------------------------------

    def _transaction_step(self, step: Resolved, walk: bool) -> StepOutcome:
        """A 'multi', a call inside the transaction, or its 'exec'. A call inside is held (its reply
        and the walk after it become elements of the EXEC reply); a call met with no transaction
        open (the rest of a segment run again after a re-sync, from inside a transaction) opens one."""
        if step.is_multi or step.is_exec:
            self.close_transaction(walk)
            if step.is_multi:
                self.transaction = _Transaction(on_replica=step.on_replica, protocol=step.protocol)
            why = "MULTI: its calls answer at EXEC" if step.is_multi else "EXEC: its replies are its calls'"
            outcome = StepOutcome(NotSent(why), self.walk() if walk else None, self.capture_workers())
            if self.subscriber is not None:
                outcome.marker = self.mark()
            return outcome
        if self.transaction is None:
            self.transaction = _Transaction(on_replica=step.on_replica, protocol=step.protocol)
        if step.is_condition:  # switched from another connection once the calls before it are queued
            assert isinstance(step.step, MemoryLimit | ReplicasRequired)
            self.transaction.switches[len(self.transaction.entries)] = step.step
            planned: tuple[str | None, Sequence[bytes]] | Reply = NotSent("a condition switched before EXEC")
        else:
            planned = self.transaction_command(step)
        walk_at = Element(raw=True) if walk else None
        marker = 0
        if self.subscriber is not None and not self.transaction.on_replica:  # published inside, after the walk
            self.markers += 1
            marker = self.markers
        if not isinstance(planned, tuple):  # the host refused it: nothing is queued for it but its walk
            self.transaction.entries.append((None, None, None, walk_at, marker))
            return StepOutcome(planned, walk_at, self.capture_workers(), marker)
        reply = Element(raw=False)
        self.transaction.entries.append((*planned, reply, walk_at, marker))
        return StepOutcome(reply, walk_at, self.capture_workers(), marker)

    def transaction_command(self, step: Resolved) -> tuple[str | None, Sequence[bytes]] | Reply:
        """The command a call inside a transaction queues (and the script it needs loaded first),
        or what the host answers without sending."""
        raise NotImplementedError

    def close_transaction(self, walk: bool = True) -> None:
        """The open transaction sent on the admin wire of its protocol: the scripts it needs loaded first (as a
        client's transaction does: NOSCRIPT inside EXEC cannot be retried), MULTI, each call and a
        walk after it, EXEC, and a walk after the EXEC (what every element's walk is when the
        server aborted the transaction)."""
        transaction, self.transaction = self.transaction, None
        if transaction is None or not transaction.entries:
            return
        if transaction.on_replica:
            self._close_on_replica(transaction, walk)
            return
        wire, add = self.wire(None, transaction.protocol), self.pipe.add
        self._load_scripts(wire, transaction, self.loaded_scripts)
        add(wire, (b"MULTI",), raw=True)
        queued: list[tuple[int, Element]] = []  # (its position in EXEC's reply, the element)
        position = 0
        for entry, (_, command, reply, walk_at, marker) in enumerate(transaction.entries):
            if entry in transaction.switches:
                self._switch_inside(transaction.switches[entry])
            if command is not None and reply is not None:
                add(wire, command, raw=True)  # +QUEUED
                queued.append((position, reply))
                position += 1
            if walk_at is not None:
                add(wire, self.walk_command, raw=True)
                queued.append((position, walk_at))
                position += 1
            if marker:
                add(wire, (b"PUBLISH", MARKER_CHANNEL, b"%d" % marker), raw=True)
                position += 1
        exec_future = add(wire, (b"EXEC",), raw=True)
        after = self.walk() if walk else None
        for at, element in queued:
            element.bind(exec_future, at, after if element.raw else None)

    def _load_scripts(self, wire: Wire, transaction: _Transaction, loaded: set[str]) -> None:
        """The scripts the transaction's calls need, loaded before its MULTI where `loaded` (the
        server's or its replica's script cache since its start) lacks them: NOSCRIPT inside EXEC
        cannot be retried."""
        for script, *_ in transaction.entries:
            if script is not None and script not in loaded:
                self.pipe.add(wire, (b"SCRIPT", b"LOAD", self.scripts[script]))
                loaded.add(script)

    def _close_on_replica(self, transaction: _Transaction, walk: bool) -> None:
        """A transaction sent to the server's replica (its scripts loaded there first, its limit
        obeyed around it where the replica obeys one), then the primary's walk after it, which is
        every element's walk: nothing the replica runs is written."""
        wire, add = self.replica_wire(transaction.protocol), self.pipe.add
        obeyed = self.replica_obeys_its_limit
        self._load_scripts(wire, transaction, self.replica_scripts)
        if obeyed:
            add(wire, OBEYED_AROUND_A_CALL[0])
        add(wire, (b"MULTI",), raw=True)
        replies: list[Element] = []
        for _, command, reply, _, _ in transaction.entries:
            if command is not None and reply is not None:
                add(wire, command, raw=True)  # +QUEUED, or READONLY for a write command
                replies.append(reply)
        exec_future = add(wire, (b"EXEC",), raw=True)
        if obeyed:
            add(wire, OBEYED_AROUND_A_CALL[1])
        for at, reply in enumerate(replies):
            reply.bind(exec_future, at, None)
        after = self.walk() if walk else None
        for *_, walk_at, _ in transaction.entries:
            if walk_at is not None and after is not None:
                walk_at.follow(after)

    def _switch_inside(self, switch: MemoryLimit | ReplicasRequired) -> None:
        """A condition switched while the admin wire's transaction is open: what it queued so far
        sent and answered (QUEUED, or the server's refusal when queued), then CONFIG SET from a
        connection of its own, before anything more is queued (the server checks the transaction's
        commands again at EXEC, under the conditions on then)."""
        self.pipe.sync()
        aside = Wire(self.server.address, db=self.db)
        try:
            replica = switch.replica if isinstance(switch, MemoryLimit) else None
            self.set_condition(switch.condition, switch.on, replica, admin=aside)
        finally:
            aside.close()

    def run(self, steps: Sequence[Step]) -> list[Reply]:
        """Steps run as a history of their own, through the replay's path without its walks: each
        step's reply. After a restart of the server, its connections, scripts and users are set up
        again first (the Lua side meets an empty script cache no other way)."""
        if self.server.starts != self.connected_start:
            self.reconnect()
        return [reply for reply, _ in self.finish(self.run_steps(resolve(steps), walk=False))]

    def call(self, call: Call, user: str | None = None, protocol: int = 2) -> Reply:
        """One transition call, sent whole, as `user` (None: the admin), on a RESP`protocol` wire."""
        (reply,) = self.run([CallStep(call, user, protocol=protocol)])
        return reply

    def send(self) -> None:
        self.pipe.send()

    def step(self, step: Resolved) -> Reply | Future:
        if isinstance(step.step, RawWrite):
            return self.pipe.add(self.wires[None], step.step.command)
        if step.call is None:
            return NotSent("clock or restart step")
        if step.on_replica and self.replica_obeys_its_limit:
            obey, ignore = OBEYED_AROUND_A_CALL
            self.pipe.add(self.replica_wire(step.protocol), obey)
            reply = self.transition(step)
            self.pipe.add(self.replica_wire(step.protocol), ignore)
            return reply
        return self.transition(step)

    def transition(self, step: Resolved) -> Reply | Future:
        raise NotImplementedError

    def capture_workers(self) -> dict[int, _OpenClaim]:
        return {}

    def restore_workers(self, saved: dict[int, _OpenClaim]) -> None:
        pass


@dataclass
class _OpenClaim:
    call: Call
    user: str | None
    paused_read: Future | Refused
    protocol: int = 2


class ScriptHost(Side):
    """A side that can play the Lua host: guards, the `paused?` read, EVALSHA of the scripts it
    loads after every start of its server."""

    def __init__(
        self,
        server: EmbeddedServer,
        users: dict[str, tuple[str, ...]],
        scripts: dict[str, bytes] | None = None,
        db: int = 0,
    ) -> None:
        self.scripts = load_scripts() if scripts is None else scripts
        self.shas = {verb: hashlib.sha1(src).hexdigest() for verb, src in self.scripts.items()}
        self.open_claims: dict[int, _OpenClaim] = {}  # by the begin's step index
        super().__init__(server, users, db)

    def _evalsha(self, wire: Wire, verb: str, call: Call) -> Future:
        """EVALSHA of the verb's script, sent after the script itself on the same wire the first
        time since the server started: the server's script cache is empty after every start, and a
        SCRIPT LOAD in the same pipeline costs no round trip (an error of it shows as NOSCRIPT).
        The replica has a script cache of its own (SCRIPT LOAD is not replicated)."""
        on_replica = any(wire is replica_wire for replica_wire in self._replica_wires.values())
        loaded = self.replica_scripts if on_replica else self.loaded_scripts
        if verb not in loaded:
            self.pipe.add(wire, (b"SCRIPT", b"LOAD", self.scripts[verb]))
            loaded.add(verb)
        return self.pipe.add(wire, evalsha_command(self.shas[verb], call))

    def scripted(self, step: Resolved) -> Reply | Future:
        """The step as the Lua host runs it."""
        call = step.call
        assert call is not None
        if step.is_end:
            assert step.begun_at is not None
            claim = self.open_claims.pop(step.begun_at)
            if isinstance(claim.paused_read, Refused):
                return claim.paused_read
            return self._finish_claim(claim.call, claim.user, self.pipe.get(claim.paused_read), claim.protocol)
        plan = host_plan(call, step.guarded.layout if step.guarded else step.refusal or "")
        if isinstance(plan, Refused):
            if step.is_begin:
                self.open_claims[step.index] = _OpenClaim(call, step.user, plan, step.protocol)
            return plan
        wire = self.target_wire(step)
        if isinstance(plan, PlainCommand):
            return self.pipe.add(wire, plan.command)
        if isinstance(plan, PausedThenClaim):
            paused = self.pipe.add(wire, plan.paused_read)
            if step.is_begin:
                self.open_claims[step.index] = _OpenClaim(call, step.user, paused, step.protocol)
                return paused
            # the host needs the read's answer before it decides: a round trip of its own
            if step.on_replica:  # (as the admin: a replica call has no user)
                return [] if reads_as_paused(self.pipe.get(paused)) else self._evalsha(wire, call.verb, call)
            return self._finish_claim(call, step.user, self.pipe.get(paused), step.protocol)
        return self._evalsha(wire, plan.verb, call)

    def scripted_in_transaction(self, step: Resolved) -> tuple[str | None, Sequence[bytes]] | Reply:
        """A call inside a transaction as the Lua host queues it: its plain command or its EVALSHA
        (the script loaded before MULTI), or the host's refusal. No CLAIM: the host reads first."""
        call = step.call
        assert call is not None
        plan = host_plan(call, step.guarded.layout if step.guarded else step.refusal or "")
        if isinstance(plan, Refused):
            return plan
        if isinstance(plan, PlainCommand):
            return None, plan.command
        if isinstance(plan, PausedThenClaim):
            raise ValueError("a CLAIM inside a transaction: the Lua host reads 'paused?' before it sends")
        return plan.verb, evalsha_command(self.shas[plan.verb], call)

    def _finish_claim(self, call: Call, user: str | None, paused_read: Reply, protocol: int = 2) -> Reply | Future:
        if reads_as_paused(paused_read):
            return []
        return self._evalsha(self.wire(user, protocol), call.verb, call)


class NativeSide(ScriptHost):
    """The module's commands; a step marked to run through the scripts (an upgrade's Lua-era
    worker, `Resolved.via_scripts`) is played by the Lua host on this server instead."""

    name = "native"

    def transition(self, step: Resolved) -> Reply | Future:
        if step.via_scripts:
            return self.scripted(step)
        if step.is_begin:
            return NotSent("the native CLAIM is one round trip, sent at its end")
        assert step.call is not None
        return self.pipe.add(self.target_wire(step), step.call.command())

    def transaction_command(self, step: Resolved) -> tuple[str | None, Sequence[bytes]] | Reply:
        if step.via_scripts:
            return self.scripted_in_transaction(step)
        assert step.call is not None
        return None, step.call.command()


class LuaSide(ScriptHost):
    name = "lua"

    def transition(self, step: Resolved) -> Reply | Future:
        return self.scripted(step)

    def transaction_command(self, step: Resolved) -> tuple[str | None, Sequence[bytes]] | Reply:
        return self.scripted_in_transaction(step)

    def capture_workers(self) -> dict[int, _OpenClaim]:
        return dict(self.open_claims)

    def restore_workers(self, saved: dict[int, _OpenClaim]) -> None:
        """Back to the open claims as they were after an earlier step (a re-run after re-sync)."""
        self.open_claims = dict(saved)
