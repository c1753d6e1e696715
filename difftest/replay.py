"""Replay one history on a Lua server and a native server side by side, judging every step.

Steps between clock advances and restarts form a segment: each side gets the whole segment as one
pipeline (the Lua host breaks it only where it must read a reply before deciding), with a
canonical keyspace walk after every step. Then each step is judged; an allowed difference
re-synchronises the Lua server from the native's keyspace and re-runs the rest of the segment.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftest.calls import Call
from difftest.contract import MATCH, RULES, Exposure, StepView, Verdict, judge, may_need_rules
from difftest.guards import GuardError, check_call
from difftest.history import Advance, BeginClaim, CallStep, EndClaim, History, RawWrite, Restart, Step
from difftest.invariants import Ledger, violations
from difftest.replies import NotSent, Reply
from difftest.servers.local import ServerGroup
from difftest.sides import LuaSide, NativeSide, Side
from difftest.snapshot import Epochs, Snapshot, parse_canonical, restore_commands, with_epochs
from difftest.wire import Wire
from executors.lua.adapter import load_scripts

EPOCH_FIELD = b"lease_epoch"
# past this, a server's AOF is rewritten between histories (an empty keyspace: a few ms), so that a
# restart replays one history's writes, not the whole campaign's (measured: 200 histories took 4 s
# at the start of a campaign and 11 s after 1,200 without it)
AOF_COMPACT_BYTES = 256 * 1024


@dataclass(frozen=True)
class StepRecord:
    index: int
    step: Step
    verdict: Verdict
    lua_reply: Reply
    native_reply: Reply


@dataclass
class Divergence:
    """The first step the contract does not allow, with everything needed to explain it."""

    index: int
    step: Step
    reason: str
    lua_reply: Reply
    native_reply: Reply
    before: Snapshot
    lua_after: Snapshot
    native_after: Snapshot
    native_epochs: Epochs


@dataclass
class ReplayResult:
    history: History
    records: list[StepRecord] = field(default_factory=list)
    divergence: Divergence | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.divergence is None

    @property
    def rules_hit(self) -> Counter[str]:
        return Counter(r.verdict.rule for r in self.records if r.verdict.rule)


def segments(steps: tuple[Step, ...]) -> list[list[Step]]:
    """Runs of steps between clock advances and restarts; each of those stands alone."""
    out: list[list[Step]] = []
    current: list[Step] = []
    for step in steps:
        if isinstance(step, Advance | Restart):
            if current:
                out.append(current)
            out.append([step])
            current = []
        else:
            current.append(step)
    if current:
        out.append(current)
    return out


def _call_of(step: Step, begun: dict[str, BeginClaim]) -> tuple[Call | None, str | None]:
    if isinstance(step, CallStep | BeginClaim):
        return step.call, step.user
    if isinstance(step, EndClaim):
        claim = begun[step.worker]
        return claim.call, claim.user
    return None, None


class Replayer:
    """A Lua server and a native server on one frozen clock, reused from history to history."""

    def __init__(
        self, module: Path, group: ServerGroup | None = None, lua_scripts: Path | None = None, backend: str = "local"
    ) -> None:
        self.scripts = load_scripts(lua_scripts)
        self._owns_group = group is None
        self.group = ServerGroup(backend=backend) if group is None else group
        self.module = module
        try:
            self.lua_server = self.group.add("lua")
            self.native_server = self.group.add("native", module=module)
        except BaseException:  # the first server (a container, an attached pair's lock) goes too
            if self._owns_group:
                self.group.close()
            raise
        self.lua: LuaSide | None = None
        self.native: NativeSide | None = None

    def close(self) -> None:
        for side in (self.lua, self.native):
            if side is not None:
                side.close()
        if self._owns_group:
            self.group.close()

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one history ------------------------------------------------------------------------

    def _reset(self, history: History) -> None:
        """Empty keyspaces, the history's users and start time; connections kept where possible."""
        for server in (self.lua_server, self.native_server):
            if not server.running:
                server.start()
        self._acl: dict[tuple[str, bytes, str], bool] = {}  # (user, key, perm) -> denied
        if self.lua is None or self.native is None:
            self.lua = LuaSide(self.lua_server, history.users, self.scripts)
            self.native = NativeSide(self.native_server, history.users)
        else:
            self.lua.prepare(history.users)
            self.native.prepare(history.users)
            self.native.begun.clear()
            self.lua.open_claims.clear()
        for side in (self.lua, self.native):
            side.wires[None].call(b"FLUSHALL")
        for server in (self.lua_server, self.native_server):
            server.compact_aof(AOF_COMPACT_BYTES)
        if self.group.clock.now_ms != history.start_ms:
            self.group.clock.set(history.start_ms)
        # always confirmed: the clock may have been written ahead at the end of the last replay
        self.group.confirm_clock()

    def replay(self, history: History, stop_at_divergence: bool = True) -> ReplayResult:
        started = time.perf_counter()
        self._reset(history)
        assert self.lua is not None and self.native is not None
        result = ReplayResult(history)
        state = _State()
        index = 0
        runs = segments(history.steps)
        moved_early = False
        for number, segment in enumerate(runs):
            self._boundary(segment[0], moved_early)
            native_out = self.native.run_steps(segment)
            self.native.send()  # the native works on its pipeline while the Lua host runs
            lua_out = self.lua.run_steps(segment)
            lua_results = self.lua.finish(lua_out)
            native_results = self.native.finish(native_out)
            now_ms = self.group.clock.now_ms
            # A server sees a rewritten clock about 1 ms later: when an advance comes next, write it
            # now and let the judging below overlap the wait; the boundary then only confirms it.
            following = runs[number + 1][0] if number + 1 < len(runs) else None
            moved_early = isinstance(following, Advance)
            if isinstance(following, Advance):
                self.group.clock.set(now_ms + following.ms)
            position = 0
            while position < len(segment):
                step = segment[position]
                lua_reply, lua_walk = lua_results[position]
                native_reply, native_walk = native_results[position]
                verdict, divergence = self._judge(state, index, step, now_ms, lua_reply, native_reply,
                                                  lua_walk, native_walk)  # fmt: skip
                result.records.append(StepRecord(index, step, verdict, lua_reply, native_reply))
                if divergence is not None:
                    result.divergence = divergence
                    if stop_at_divergence:
                        result.elapsed_s = time.perf_counter() - started
                        return result
                if verdict.rule and RULES[verdict.rule].resync:
                    rerun = segment[position + 1 :]
                    if moved_early:
                        self.group.set_time(now_ms)  # the re-run belongs to this segment's time
                    self._resync(state)
                    self.lua.restore_workers(lua_out[position].workers)
                    again = self.lua.run_steps(rerun)
                    lua_results[position + 1 :] = self.lua.finish(again)
                    lua_out[position + 1 :] = again
                    if isinstance(following, Advance):
                        self.group.clock.set(now_ms + following.ms)
                index += 1
                position += 1
        result.elapsed_s = time.perf_counter() - started
        # the next history most likely starts where this one did: write the clock back now, so
        # the servers' ~1 ms until they read it passes before the next reset confirms it
        self.group.clock.set(history.start_ms)
        return result

    def _boundary(self, step: Step, moved_early: bool) -> None:
        assert self.lua is not None and self.native is not None
        if isinstance(step, Advance):
            if moved_early:
                self.group.confirm_clock()
            else:
                self.group.advance(step.ms)
        elif isinstance(step, Restart):
            self.group.restart_all(crash=step.crash)
            self.group.confirm_clock()
            self.lua.reconnect()
            self.native.reconnect()

    def _resync(self, state: _State) -> None:
        """The Lua server's keyspace becomes the native's (epochs included): equal ground again."""
        assert self.lua is not None
        admin: Wire = self.lua.wires[None]
        commands = [[b"FLUSHALL"], *restore_commands(with_epochs(state.before, state.before_epochs))]
        admin.send(commands)
        for _ in commands:
            admin.read()

    def _judge(
        self,
        state: _State,
        index: int,
        step: Step,
        now_ms: int,
        lua_reply: Reply,
        native_reply: Reply,
        lua_walk: Any,
        native_walk: Any,
    ) -> tuple[Verdict, Divergence | None]:
        assert self.native is not None
        call, user = _call_of(step, state.begun)
        if isinstance(step, BeginClaim):
            state.begun[step.worker] = step
            state.paused_reads[step.worker] = lua_reply  # the Lua host's read (or its refusal)
        unchanged = native_walk == state.last_walk
        if unchanged:  # most steps change nothing: keep the parsed state
            native_after, native_epochs = state.before, state.before_epochs
        else:
            native_after, native_epochs = parse_canonical(native_walk)
            state.last_walk = native_walk
        if isinstance(step, RawWrite):
            state.exposure.corrupted = True
        elif isinstance(step, Restart):
            state.exposure.restarted = True
        elif user is not None:
            state.exposure.users = True
        fast = (
            lua_walk[0] == native_walk[0]
            and (
                isinstance(native_reply, NotSent)
                or isinstance(step, RawWrite)
                or _same_reply_fast(lua_reply, native_reply)
            )
            and not may_need_rules(step, call, state.exposure)
        )
        verdict = MATCH
        lua_after = native_after
        if not fast:
            lua_after, _ = parse_canonical(lua_walk)
            paused_read = state.paused_reads.get(step.worker) if isinstance(step, EndClaim) else None
            view = StepView(
                index, step, call, user, now_ms, self.native.run_id.encode(),
                state.before, state.before_epochs, lua_reply, native_reply, lua_after, native_after,
                paused_read, self._denied(call, user, state.before),
            )  # fmt: skip
            verdict = judge(view)
        if isinstance(step, EndClaim):
            state.begun.pop(step.worker, None)
            state.paused_reads.pop(step.worker, None)
        reason = verdict.reason
        if verdict.ok:
            reason = self._check_epochs(state, step, call, native_reply, native_after, native_epochs)
            if not reason:
                reason = self._check_invariants(state, step, call, verdict, lua_reply, native_reply,
                                                lua_after, native_after)  # fmt: skip
        if reason:
            verdict = Verdict("divergence", verdict.rule, reason)
            divergence = Divergence(index, step, reason, lua_reply, native_reply, state.before,
                                    lua_after, native_after, native_epochs)  # fmt: skip
            return verdict, divergence
        state.before, state.before_epochs = native_after, native_epochs
        if verdict.rule and RULES[verdict.rule].resync:
            state.lua_ledger = copy.deepcopy(state.ledger)  # the Lua server takes the native's ground
        return verdict, None

    def _check_invariants(
        self,
        state: _State,
        step: Step,
        call: Call | None,
        verdict: Verdict,
        lua_reply: Reply,
        native_reply: Reply,
        lua_after: Snapshot,
        native_after: Snapshot,
    ) -> str:
        """Each side's ledger takes the step, then each side's keyspace is held to the invariants
        (not on D3-D5, D8, D9, where the Lua side is allowed its partial writes)."""
        differ = lua_after is not native_after
        sides = [
            (state.ledger, native_reply, native_after, "native", True),
            (state.lua_ledger, lua_reply, lua_after, "lua", differ),
        ]
        broken: list[str] = []
        for ledger, reply, after, name, check in sides:
            if isinstance(step, RawWrite):
                ledger.taint(step.command)
            elif call is not None and not isinstance(step, BeginClaim):
                ledger.record(call, reply, after)
            if check and verdict.rule not in ("D3", "D4", "D5", "D8", "D9"):
                held = after is state.before and ledger.settled  # nothing moved since the last check
                broken += [f"{name}: {v}" for v in violations(ledger, call, state.before, reply, after, held)]
        return "; ".join(broken)

    def _check_epochs(
        self, state: _State, step: Step, call: Call | None, reply: Reply, after: Snapshot, epochs: Epochs
    ) -> str:
        """N1: every lease_epoch is the run_id of the native's last CLAIM or EXTEND of that row."""
        assert self.native is not None
        if isinstance(step, RawWrite):
            state.expected_epochs = dict(epochs)  # corruption may plant any epoch
            return ""
        expected = dict(state.expected_epochs)
        stamped = _stamped_row(call, reply) if not isinstance(step, BeginClaim) else None
        if stamped is not None:
            expected[stamped] = self.native.run_id.encode()
        expected = {k: v for k, v in expected.items() if k in after and after[k].kind == "hash"}
        state.expected_epochs = expected
        if epochs != expected:
            wrong = sorted(set(epochs.items()) ^ set(expected.items()))
            return f"N1: lease_epoch fields {dict(epochs)!r} differ from the expected {expected!r} ({wrong!r})"
        return ""

    def _denied(self, call: Call | None, user: str | None, before: Snapshot) -> frozenset[tuple[bytes, str]]:
        """Which derived keys the step's user may not read or write (asked of the server)."""
        if call is None or user is None:
            return frozenset()
        try:
            queue, args = check_call(call.verb, call.numkeys, call.rest)
        except GuardError:
            return frozenset()
        base = b"emq:{" + queue + b"}:"
        keys = [base + b"meta", base + b"metrics:failed", base + b"metrics:completed"]
        keys += [k for k in before if k.startswith(base + b"job:")]
        # rows of every member of the queue's sets too: a ghost's row does not exist, yet a
        # transition reaching it (EXISTS) needs the permission
        for suffix in (b"pending", b"active", b"delayed", b"dead", b"done"):
            entry = before.get(base + suffix)
            if entry is not None and isinstance(entry.value, dict):
                keys += [base + b"job:" + member for member in entry.value]
        keys = list(dict.fromkeys(keys))
        if call.verb in ("EXTEND", "COMPLETE", "FAIL", "REVIVE", "ENQUEUE"):
            keys.append(base + b"job:" + bytes(args[0]))
        unknown = [(key, perm) for key in keys for perm in ("read", "write") if (user, key, perm) not in self._acl]
        if unknown:
            pipe = self.native_server.client.pipeline(transaction=False)
            for key, perm in unknown:
                probe = [b"HGET", key, b"f"] if perm == "read" else [b"HSET", key, b"f", b"v"]
                pipe.execute_command(b"ACL", b"DRYRUN", user.encode(), *probe)
            for (key, perm), answer in zip(unknown, pipe.execute(raise_on_error=False), strict=True):
                self._acl[(user, key, perm)] = answer not in (b"OK", "OK")
        denied = {(key, perm) for key in keys for perm in ("read", "write") if self._acl[(user, key, perm)]}
        return frozenset(denied)


@dataclass
class _State:
    before: Snapshot = field(default_factory=dict)
    before_epochs: Epochs = field(default_factory=dict)
    expected_epochs: Epochs = field(default_factory=dict)
    begun: dict[str, BeginClaim] = field(default_factory=dict)
    paused_reads: dict[str, Reply] = field(default_factory=dict)
    last_walk: Any = None  # the native's raw walk that `before` was parsed from
    exposure: Exposure = field(default_factory=Exposure)
    ledger: Ledger = field(default_factory=Ledger)  # the native side's
    lua_ledger: Ledger = field(default_factory=Ledger)


def _same_reply_fast(left: Reply, right: Reply) -> bool:
    from difftest.contract import replies_equal

    return left == right or replies_equal(left, right)


def _stamped_row(call: Call | None, reply: Reply) -> bytes | None:
    """The row a successful CLAIM or EXTEND stamps with the run_id."""
    if call is None:
        return None
    try:
        queue, args = check_call(call.verb, call.numkeys, call.rest)
    except GuardError:
        return None
    base = b"emq:{" + queue + b"}:job:"
    if call.verb == "CLAIM" and isinstance(reply, list) and reply and isinstance(reply[0], bytes):
        return base + reply[0]
    if call.verb == "EXTEND" and reply == 1:
        return base + bytes(args[0])
    return None


def replay_once(history: History, module: Path, lua_scripts: Path | None = None) -> ReplayResult:
    with Replayer(module, lua_scripts=lua_scripts) as replayer:
        return replayer.replay(history)


__all__ = ["Divergence", "ReplayResult", "Replayer", "Side", "StepRecord", "replay_once", "segments"]
