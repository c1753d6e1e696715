"""Replay one history on a Lua server and a native server side by side, recording what each did.

Steps between clock advances and restarts form a segment: each side gets the whole segment as one
pipeline (the Lua host breaks it only where it must read a reply before deciding), with a
canonical keyspace walk after every step. Each step's observation (replies, snapshots, epochs, the
ACL facts of its user) is handed to the judge (difftest/judge/verdicts.py), a pure fold that decides; replay
only executes and records. After an allowed difference whose rule re-synchronises, the Lua server
takes the native's keyspace and the rest of the segment runs again there.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from valkey.exceptions import ConnectionError as ValkeyConnectionError

from difftest.base.problems import ScriptDoesNotCompile, SetupProblem
from difftest.history.format import (
    Advance,
    CallStep,
    History,
    MemoryLimit,
    Multi,
    Notify,
    ReplicasRequired,
    Restart,
    Step,
    cut_after,
    unwalked_at,
)
from difftest.history.resolve import Resolved, resolve
from difftest.judge.contract import RULES, Verdict, acl_probe_keys
from difftest.judge.events import Events, events_problem
from difftest.judge.verdicts import JudgeState, Observation, assumed, judge
from difftest.replay.replicas import KIND as PROPAGATION
from difftest.replay.replicas import Propagation, Replicas, primary_options
from difftest.replay.sides import LuaSide, NativeSide, Side, StepOutcome
from difftest.servers.group import ServerGroup
from difftest.servers.walker import VERIFY_WALK, WALK_COMMAND
from difftest.servers.wire import Element, Future, Wire
from difftest.spec.commands import TRANSITIONS
from difftest.spec.replies import Died, NotSent, Reply, Simple
from difftest.spec.snapshot import (
    Epochs,
    Keyspace,
    Snapshot,
    Walk,
    WalkReader,
    apply_tracked,
    is_tracked,
    parse_canonical,
    resync_commands,
    with_epochs,
)
from executors.lua import instrument as lua_instrument
from executors.lua.adapter import load_scripts

if TYPE_CHECKING:
    import valkey

# past this, a server's AOF is rewritten between histories, so that it does not grow without end
# (measured: 200 histories took 4 s at the start of a campaign and 11 s after 1,200 without it)
AOF_COMPACT_BYTES = 256 * 1024
# before a history that restarts a server, past this already: a restart replays the whole AOF, and
# the earlier histories' writes in it (up to AOF_COMPACT_BYTES, FLUSHALLs between) cost a restart
# about 6 ms of the servers' CPU on average; a rewrite of the empty keyspace costs a fork
AOF_COMPACT_BEFORE_RESTART_BYTES = 4 * 1024
START_REWRITE, FINISH_REWRITE = "start", "finish"  # what the reset does about a server's AOF
ACL_ANSWERS_KEPT = 100_000  # ACL DRYRUN answers remembered across histories (then forgotten at once)
EVENTS = "events"  # a divergence's kind: the keyspace notifications of a step differ
# A segment is one pipeline, every step's walk in it read only once the whole pipeline is sent:
# longer runs (the clock unmoved) are cut into segments of this many steps, so that the replies a
# server holds unread stay bounded. Uncut, 20,000 ENQUEUEs left the native server writing gigabytes
# of walks its client did not read yet, and the client's write of the Lua pipeline timed out.
SEGMENT_STEPS = 256


# how a result's walks were read (ReplayResult.walks): tracked walks (proven at the end), whole
# walks only, or tracked and then the history again with whole walks (and why)
TRACKED, WHOLE, WHOLE_AGAIN = "tracked", "whole", "whole again"
UNANNOUNCED = "a write no keyspace event announced"
# a history's tracked walks are verified (DIFFTEST.WALK VERIFY: the server walks itself whole) at
# its end, before a restart, and at the end of a segment once its steps since the last verification
# times this reach the keyspace's keys: the verification's cost is then at most this many keys a
# step, and a write no event announced (a module's low-level write) is found within that many steps
VERIFY_KEYS_PER_STEP = 64


class _Unannounced(Exception):
    """A server's keyspace is not what its tracked walks reported (found before a restart)."""


class _Unpredicted(Exception):
    """A bulk's call, walked only after the bulk's last, whose keyspace the spec's model does not
    give (a script stopped half-way): the history is replayed again with the rest of that bulk walked
    call by call."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class ReferenceLost(RuntimeError):
    """The Lua server, the reference, exited or stopped answering. No history can stop it (only the
    native server restarts or crashes; a raw SHUTDOWN stops both, a harness failure too): something
    else did (a kill, the OOM killer). Never repaired: its keyspace, the reference, is gone, so the
    run stops there as difftest's own failure (exit 70), not a verdict (README, exit codes)."""


def _reference_lost(when: str, lost: BaseException | None = None) -> ReferenceLost:
    why = f" ({type(lost).__name__}: {' '.join(str(lost).split())})" if lost is not None else ""
    return ReferenceLost(f"the Lua server, the reference, was lost {when}{why}: no history stops it, so "
                         "something else did (a kill, the OOM killer); not started again")  # fmt: skip


@dataclass(frozen=True)
class StepRecord:
    index: int
    step: Step
    verdict: Verdict
    lua_reply: Reply
    native_reply: Reply
    resolved: Resolved


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
    kind: str = "divergence"  # or "propagation": a replica that does not hold its primary's keyspace
    propagation: Propagation | None = None  # then: which side, and both keyspaces
    # EVENTS: the keyspace notifications each server fired at the step differ (difftest/judge/events.py)
    lua_events: Events = ()
    native_events: Events = ()
    # what the spec's model predicted each side does at the step (a model.Prediction; None: it did
    # not predict it); the kind is SPEC when the executors agree with each other and not with it
    prediction: object = None


@dataclass
class ReplayResult:
    history: History
    records: list[StepRecord] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)  # what the judge was given, step by step
    divergence: Divergence | None = None
    elapsed_s: float = 0.0
    replicas: bool = False  # whether each server had a replica to keep up (`--replicas`)
    walks: str = WHOLE  # TRACKED, WHOLE, or WHOLE_AGAIN and why

    @property
    def ok(self) -> bool:
        return self.divergence is None

    @property
    def rules_hit(self) -> Counter[str]:
        return Counter(r.verdict.rule for r in self.records if r.verdict.rule)


def can_write(segment: list[Resolved]) -> bool:
    """Whether a segment holds a step that can write (a clock advance or a restart alone cannot)."""
    return any(not (step.is_advance or step.is_restart or step.is_notify or step.is_condition) for step in segment)


def segments(
    steps: tuple[Resolved, ...], alone_from: int | None = None, longest: int | None = None
) -> list[list[Resolved]]:
    """Runs of steps between clock advances, restarts, notify and condition steps, of at most `longest`
    steps (SEGMENT_STEPS, a transaction never cut: it is sent whole); each of those stands alone (a
    condition switched inside a transaction is part of it), and so does a call to a replica (sent
    once both replicas have caught up) and every step from index `alone_from` on (a round trip each:
    which step a server died at)."""
    longest = longest or SEGMENT_STEPS
    out: list[list[Resolved]] = []
    current: list[Resolved] = []
    for step in steps:
        alone = alone_from is not None and step.index >= alone_from
        if step.on_replica and (step.is_multi or step.in_multi) and not alone:
            # a transaction on the replicas: one segment, from its MULTI to its EXEC
            if step.is_multi and current:
                out.append(current)
                current = []
            current.append(step)
            continue
        if step.on_replica and step.is_exec and not alone:
            out.append([*current, step])
            current = []
            continue
        stands_alone = step.is_advance or step.is_restart or step.is_notify or step.on_replica
        if stands_alone or (step.is_condition and not step.in_multi) or alone:
            if current:
                out.append(current)
            out.append([step])
            current = []
        else:
            current.append(step)
            if len(current) >= longest and not (step.is_multi or step.in_multi):
                out.append(current)
                current = []
    if current:
        out.append(current)
    return out


class _SideWalks:
    """One side's walks read into snapshots: a whole walk's reply read whole (an unchanged one reusing
    its snapshot: most steps change nothing), a tracked walk's applied to the keyspace the walks
    before it reported."""

    def __init__(self) -> None:
        self.raw: Walk | None = None
        self.snapshot: Snapshot = Keyspace()
        self.epochs: Epochs = {}
        # keeps the Entry of every key a whole walk left unchanged: a step's cost is then in the keys
        # it changed, not in all it walks (a long history's keyspace grows)
        self.reader = WalkReader()
        self.tracked = False  # a tracked walk was applied since the last verification
        self.ever_tracked = False  # one was applied in this history

    def read(self, walk: Walk) -> tuple[Snapshot, Epochs]:
        # (a tracked walk's reply equal to the last one: the same keys written to the same rows, on
        # the keyspace that reply already made, which it leaves as it is)
        if walk != self.raw:
            if is_tracked(walk):
                self.snapshot, self.epochs = apply_tracked(self.snapshot, self.epochs, walk)
                self.tracked = self.ever_tracked = True
            else:
                self.snapshot, self.epochs = self.reader.read(walk)
            self.raw = walk
        return self.snapshot, self.epochs

    def current(self) -> tuple[Snapshot, Epochs] | None:
        """The keyspace the last walk read made (None before any)."""
        return None if self.raw is None else (self.snapshot, self.epochs)

    def adopt(self, walk: Walk, snapshot: Snapshot, epochs: Epochs) -> None:
        """The other side's snapshot and epochs taken as this side's (its walk, `walk`, said the same)."""
        self.raw, self.snapshot, self.epochs = walk, snapshot, epochs
        if is_tracked(walk):
            self.tracked = self.ever_tracked = True


class _Walks:
    """Both sides' walks parsed into snapshots, a Lua walk equal to the native's sharing the native's
    snapshot (a tracked one only when the two keyspaces it was applied to were one snapshot too)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """As new (the servers were reset for a history replayed again): nothing parsed yet."""
        self.native, self.lua = _SideWalks(), _SideWalks()
        self.steps_since_verified = 0

    def parse(self, lua_walk: Walk, native_walk: Walk) -> tuple[Snapshot, Snapshot, Epochs]:
        self.steps_since_verified += 1
        shared_before = self.lua.snapshot is self.native.snapshot
        native_after, epochs = self.native.read(native_walk)
        # (a third string: the keys of other databases; a tracked walk's fourth: the keys gone)
        same = len(lua_walk) == len(native_walk) and lua_walk[0] == native_walk[0] and lua_walk[2:] == native_walk[2:]
        if same and (shared_before or not is_tracked(lua_walk)):
            self.lua.adopt(lua_walk, native_after, epochs)
            return native_after, native_after, epochs
        return self.lua.read(lua_walk)[0], native_after, epochs

    def verification_due(self) -> bool:
        """Whether the tracked walks since the last verification are to be proven now (at a
        segment's end): once the steps walked since would have walked as many keys whole as the
        keyspace holds, VERIFY_KEYS_PER_STEP a step (a whole walk's cost spread over them)."""
        if not (self.native.tracked or self.lua.tracked):
            return False
        return self.steps_since_verified * VERIFY_KEYS_PER_STEP >= len(self.native.snapshot)

    @property
    def ever_tracked(self) -> bool:
        """Whether a tracked walk was applied on either side in this history."""
        return self.native.ever_tracked or self.lua.ever_tracked


@dataclass
class _Sent:
    """A segment sent to both sides: each side's outcomes and (reply, walk) per step, and the keyspace
    events each side's subscribers read (when the history subscribes)."""

    native_out: list[StepOutcome] = field(default_factory=list)
    lua_out: list[StepOutcome] = field(default_factory=list)
    lua_results: list[tuple[Reply, Walk | None]] = field(default_factory=list)  # (None: not walked)
    native_results: list[tuple[Reply, Walk | None]] = field(default_factory=list)
    flags: str = ""
    lua_events: list[Events] = field(default_factory=list)
    native_events: list[Events] = field(default_factory=list)
    # the Lua server's conditions before the segment (a transaction in it may switch one)
    lua_conditions: frozenset[str] = frozenset()
    lua_replica_memory: str | None = None
    # After a re-sync the Lua side runs the segment's later steps again, in windows that double while
    # no step re-syncs (1, 2, 4, ... steps): `lua_fresh_to`, the first step whose Lua results are not
    # yet of the running since the last re-sync; `resynced_at`, that re-sync's step until its first
    # window is sent. All at once, a bulk CLAIM stuck on a wrong-typed row (D3 at each of its 400
    # calls) sent the rest of its segment again at every call: 60,000 round trips, 24 s of a 30 s history.
    lua_fresh_to: int = 0
    window: int = 1
    resynced_at: int | None = None


def _window_end(segment: list[Resolved], position: int, window: int) -> int:
    """Where a window of `window` steps from `position` ends (pure): never inside a transaction (one
    it opens or one a re-sync at an element left open), which runs to its 'exec' in one window."""
    end = min(len(segment), position + window)
    while end < len(segment) and (isinstance(segment[end - 1].step, Multi) or segment[end - 1].in_multi):
        end += 1
    return end


def conditions_after(conditions: frozenset[str], replica_memory: str | None,
                     steps: list[Resolved]) -> tuple[frozenset[str], str | None]:  # fmt: skip
    """The server conditions on after `steps` (pure), from those on before them."""
    on = set(conditions)
    for step in steps:
        if isinstance(step.step, MemoryLimit | ReplicasRequired):
            (on.add if step.step.on else on.discard)(step.step.condition)
            if isinstance(step.step, MemoryLimit):
                replica_memory = step.step.replica if step.step.on else None
    return frozenset(on), replica_memory


class Replayer:
    """A Lua server and a native server on one frozen clock, reused from history to history."""

    def __init__(
        self,
        module: Path,
        group: ServerGroup | None = None,
        lua_scripts: Path | None = None,
        backend: str = "local",
        replicas: bool = False,
    ) -> None:
        self.scripts = lua_instrument.scripts_for_replay(load_scripts(lua_scripts))  # instrumented: --lua-coverage
        # the same scripts, as sent, for the steps an upgrade's Lua-era workers run on the native server
        self.native_scripts = load_scripts(lua_scripts)
        self._owns_group = group is None
        self.group = ServerGroup(backend=backend) if group is None else group
        self.module = module
        self.replicas: Replicas | None = None
        # replicas started for the histories that call one, and those the history being replayed keeps
        # up (--replicas, those, or none)
        self.call_replicas: Replicas | None = None
        self.active_replicas: Replicas | None = None
        try:
            # a TCP port for each server's replica: with --replicas, and for the histories that call a
            # replica (`target`), whose replicas start only for them (embedded servers and containers;
            # an attached pair is not ours to reconfigure)
            self.tcp = self.group.pair is None
            options = primary_options() if self.tcp else {}
            self.lua_server = self.group.add("lua", **options)
            self.native_server = self.group.add("native", module=module, **options)
            if replicas:
                self.replicas = Replicas(self.group, [("lua", self.lua_server), ("native", self.native_server)])
            check_compiles(self.lua_server.client, self.native_scripts, lua_scripts)
        except BaseException:  # the first server (a container, an attached pair's lock) goes too
            if self._owns_group:
                self.group.close()
            raise
        self.lua: LuaSide | None = None
        self.native: NativeSide | None = None
        # (a user's ACL rules, key, perm) -> denied: what ACL DRYRUN answered, for every history (the
        # answer depends on the rules alone, and histories declare the same users again and again)
        self._acl: dict[tuple[tuple[str, ...], bytes, str], bool] = {}
        # seconds spent per stage over every replay (for bench/: where a compared step's time goes)
        self.stages: defaultdict[str, float] = defaultdict(float)
        # histories replayed again with whole walks after tracked ones, by why (bench/, tests)
        self.whole_again: Counter[str] = Counter()
        self._walks = _Walks()  # the walks of the history being replayed

    def close(self) -> None:
        for side in (self.lua, self.native):
            if side is not None:
                side.close()
        if self.replicas is not None:
            self.replicas.close()
        if self.call_replicas is not None:
            self.call_replicas.close()
        logfile = getattr(self.lua_server, "logfile", None)  # the Lua scripts' coverage lines (--lua-coverage)
        if logfile is not None:
            lua_instrument.harvest(Path(logfile))
        if self._owns_group:
            self.group.close()

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one history ------------------------------------------------------------------------

    def _reset(self, history: History) -> None:
        """Empty keyspaces, the history's users and start time; connections kept where possible."""
        if not self.lua_server.running:  # the reference is never started again (see ReferenceLost)
            raise _reference_lost("between histories")
        if not self.native_server.running:
            self.native_server.kill()  # reaps a process that died (a crash of the module)
            self.native_server.start()
        if self.lua is None or self.native is None:
            self.lua = LuaSide(self.lua_server, history.users, self.scripts, history.db)
            self.native = NativeSide(self.native_server, history.users, self.native_scripts, history.db)
        else:
            self.lua.prepare(history.users, history.db)
            self.native.prepare(history.users, history.db)
            self.lua.open_claims.clear()
            self.native.open_claims.clear()
        self.group.clock.set(history.start_ms)
        # both servers flushed (FLUSHALL: every database), asked their AOF's size and their time at
        # once: one round trip for the pair, which also proves each reads the frozen clock before any step runs
        for side in (self.lua, self.native):
            side.wires[None].send([(b"FLUSHALL",), (b"INFO", b"persistence"), (b"TIME",)])
        restarts = any(isinstance(step, Restart) for step in history.steps)
        rewriting = []
        for side, server in ((self.lua, self.lua_server), (self.native, self.native_server)):
            admin = side.wires[None]
            admin.read()
            aof_bytes = aof_size(admin.read())
            _check_clock(server.name, admin.read(), history.start_ms)
            # only the native server restarts (see _boundary): the Lua server's AOF is compacted
            # only once it has grown
            rewrite = aof_rewrite(aof_bytes, restarts and side is self.native)
            if rewrite is not None:
                admin.send([(b"BGREWRITEAOF",)])
                rewriting.append((admin, server, rewrite))
        for admin, server, rewrite in rewriting:
            # "started": the rewrite's child has forked, its snapshot the empty keyspace; not waited
            # for: the history's writes go to a new incremental file meanwhile. A restart before the
            # rewrite ends stops it (SHUTDOWN ends the child; a crash leaves it to finish its own
            # temporary file), and the server loads the old files and the new one: the same
            # keyspace, a longer load; the next reset starts another. "Already in progress" is an
            # answer too. "Scheduled" (another child runs: a replica's sync, a raw BGSAVE) would
            # fork later, mid-history: waited for, as is a rewrite past AOF_COMPACT_BYTES
            answer = admin.read()
            if rewrite == FINISH_REWRITE or (isinstance(answer, Simple) and b"scheduled" in answer.value):
                server.await_aof_rewrite()

    def replay(self, history: History, alone_from: int | None = None) -> ReplayResult:
        """Every step replayed and judged, up to the first divergence. `alone_from`: the steps from
        that index on go one round trip each (after the native died in a pipelined segment, its
        replies were never written, so the replay is repeated to find the step that killed it).

        Where tracked walks were read (a keyspace of TRACK_FROM keys or more), each server proves at
        the end that its keyspace is what its walks reported (`DIFFTEST.WALK VERIFY`); where one
        cannot (a write no keyspace event announced), and where a divergence was found, the history
        is replayed again with a whole walk after every step, whose verdict is the one returned."""
        walks = _Walks()
        try:
            result = self._replay(history, alone_from, walks)
        except _Unannounced as unannounced:
            return self._replayed_whole(history, alone_from, str(unannounced))
        if result.divergence is not None and unwalked_at(history.steps, result.divergence.index):
            # found on a bulk's call whose keyspace was the model's: the history up to it (an artifact
            # of it), where a walk follows it, says what the call left
            again = self.replay(replace(history, steps=cut_after(history.steps, result.divergence.index)), alone_from)
            if again.divergence is not None:
                again.history = history
                return again
        if not walks.ever_tracked:
            return result
        if result.divergence is not None:
            if isinstance(result.divergence.native_reply, Died):
                return result  # (a death is met alike whatever the walks read)
            return self._replayed_whole(history, alone_from, "a divergence found on tracked walks, confirmed")
        missed = self._unverified(walks)
        if missed is not None:
            return self._replayed_whole(history, alone_from, missed)
        result.walks = TRACKED
        return result

    def _replayed_whole(self, history: History, alone_from: int | None, why: str) -> ReplayResult:
        """The history replayed again with a whole walk after every step (`why`: the reason)."""
        assert self.lua is not None and self.native is not None
        self.whole_again[why.split(":")[0]] += 1
        sides = [side for side, server in ((self.lua, self.lua_server), (self.native, self.native_server))
                 if server.running]  # fmt: skip
        for side in sides:
            side.track(False)
        try:
            result = self._replay(history, alone_from, _Walks())
        finally:
            for side in (self.lua, self.native):
                if side.server.running:
                    side.track(True)
                else:  # (its next start walks tracked again, from a whole walk)
                    side.whole_walks = False
        result.walks = f"{WHOLE_AGAIN}: {why}"
        return result

    def _unverified(self, walks: _Walks, native_only: bool = False) -> str | None:
        """Why a server's keyspace is not what its tracked walks reported (None: each that read one
        is), by `DIFFTEST.WALK VERIFY`; the walks count as verified either way."""
        assert self.lua is not None and self.native is not None
        checked = [(self.native, walks.native)] if native_only else [(self.lua, walks.lua), (self.native, walks.native)]
        missed = None
        walks.steps_since_verified = 0
        for side, side_walks in checked:
            if not side_walks.tracked:
                continue
            side_walks.tracked = False
            answer = side.wires[None].call(*VERIFY_WALK)
            if isinstance(answer, list) and answer and answer[0] == 0:
                continue
            count, named = (str(answer[0]), answer[2::2]) if isinstance(answer, list) and answer else ("?", answer)
            missed = (
                missed or f"{UNANNOUNCED}: {count} key(s) of the {side.name} server not as its walks said ({named!r})"
            )
        return missed

    def _replay(self, history: History, alone_from: int | None, walks: _Walks) -> ReplayResult:
        """`replay` with the walks `walks` reads (tracked or whole, as the sides walk); again with the
        rest of a bulk walked call by call from a call the model gives no keyspace for (once a bulk)."""
        walked: set[int] = set()
        while True:
            try:
                return self._replay_steps(history, alone_from, walks, frozenset(walked))
            except _Unpredicted as unpredicted:
                walks.reset()
                index = unpredicted.index
                while unwalked_at(history.steps, index):  # (the bulk's last call is walked anyway)
                    walked.add(index)
                    index += 1

    def _replay_steps(self, history: History, alone_from: int | None, walks: _Walks,
                      walked: frozenset[int]) -> ReplayResult:  # fmt: skip
        """`_replay`, the bulk calls at the indexes `walked` walked."""
        started = time.perf_counter()
        replicas = self._start(history)
        result = ReplayResult(history, replicas=self.replicas is not None)
        mark = time.perf_counter()
        self.stages["reset"] += mark - started
        state = JudgeState()
        self._walks = walks
        # --replicas compares from the first step on; a history's own replicas (it calls one) from its
        # first call to a replica on, so that a verdict at a step depends on no later step: an
        # artifact, the history up to its divergence, replays to the same verdict alone
        comparing = self.replicas is not None
        for segment in segments(_walked(resolve(history.steps), walked), alone_from):
            if segment[0].on_replica and replicas is not None:
                # both replicas caught up and compared first, the history's first step too (a replica
                # kept linked since an earlier history still applies that history's stream and the
                # reset's FLUSHALL; a re-sync's writes reach the Lua replica after the check that closed
                # their segment), so the call reads what its primary holds; one behind is the call's
                # divergence: it would read it
                comparing = True
                behind = replicas.check()
                if behind is not None:
                    return self._propagated(result, state, segment, behind, started, sent=False)
            mark = self._boundary(segment[0], mark)
            sent = _Sent()
            try:
                self._send(segment, sent)
            except (ValkeyConnectionError, OSError) as lost:
                death = self._native_death(lost)  # the Lua server dying is the harness's failure: raised
                if len(segment) > 1 and alone_from is None:
                    return self.replay(history, alone_from=segment[0].index)
                return self._died(result, state, segment, sent.native_out, death, started)
            mark = self._read_events(sent, _lap(self.stages, "send", mark))
            # every replica caught up and compared now, before the clock moves; a contract divergence
            # in the segment is reported first (it comes at an earlier step)
            propagation = None
            if replicas is not None and comparing and can_write(segment):
                propagation = replicas.check()
                mark = _lap(self.stages, "replicas", mark)
            state, mark = self._judge_segment(result, state, walks, segment, sent, mark, started)
            if result.divergence is not None:
                return result
            if propagation is not None:
                return self._propagated(result, state, segment, propagation, started)
            if walks.verification_due():
                mark = self._verify(walks, mark)
        result.elapsed_s = time.perf_counter() - started
        return result

    def _read_events(self, sent: _Sent, mark: float) -> float:
        """The keyspace events of a sent segment's steps read into `sent`, where the native notifies
        any (each subscriber read up to each step's marker); the time it ended."""
        assert self.lua is not None and self.native is not None
        sent.flags = self.native.notify_flags
        if not sent.flags:
            return mark
        sent.lua_events, sent.native_events = self.lua.events(sent.lua_out), self.native.events(sent.native_out)
        return _lap(self.stages, "events", mark)

    def _verify(self, walks: _Walks, mark: float) -> float:
        """The tracked walks held to whole ones (their verification due); the time it ended. Raises
        _Unannounced for a key a tracked walk missed."""
        missed = self._unverified(walks)
        mark = _lap(self.stages, "verify", mark)
        if missed is not None:
            raise _Unannounced(missed)
        return mark

    def _start(self, history: History) -> Replicas | None:
        """Both servers reset for `history` (and the replicas linked again); the replicas it compares."""
        try:
            self._reset(history)
        except (ValkeyConnectionError, OSError) as lost:
            if not self.lua_server.answers():
                raise _reference_lost("at a history's start", lost) from lost
            raise
        if self.replicas is not None:
            self.replicas.relink()  # a server started again by the reset: its replica synced before any step
        replicas = self.active_replicas = self._replicas_for(history)
        return replicas

    def _send(self, segment: list[Resolved], sent: _Sent) -> None:
        """The segment sent to both sides and their replies read into `sent` (the native's outcomes
        first: should its server die, they say which step it was on)."""
        assert self.lua is not None and self.native is not None
        sent.lua_conditions, sent.lua_replica_memory = frozenset(self.lua.conditions), self.lua.replica_memory
        sent.native_out = self.native.run_steps(segment)  # a change of connection reads replies
        self.native.send()  # the native works on its pipeline while the Lua host runs
        sent.lua_out = self.lua.run_steps(segment)
        sent.lua_results = self.lua.finish(sent.lua_out)
        sent.native_results = self.native.finish(sent.native_out)
        sent.lua_fresh_to = len(segment)

    def _judge_segment(self, result: ReplayResult, state: JudgeState, walks: _Walks, segment: list[Resolved],
                       sent: _Sent, mark: float, started: float) -> tuple[JudgeState, float]:  # fmt: skip
        """A sent segment's steps judged in order and recorded in `result`, up to a divergence (then
        `result.divergence`); a step whose rule re-syncs the pair sends the segment's later Lua steps
        again. Returns the state after the last step judged, and the time it ended."""
        assert self.native is not None
        stages = self.stages
        now_ms = self.group.clock.now_ms
        run_id = self.native.run_id.encode()
        for position, resolved in enumerate(segment):
            if position >= sent.lua_fresh_to:
                self._send_again(segment, position, sent)
            observation, mark = self._observe(state, walks, resolved, sent.lua_results[position][0],
                                              sent.native_results[position][0], sent, position, now_ms, run_id,
                                              mark)  # fmt: skip
            after_state, verdict = judge(state, observation)
            result.observations.append(observation)
            result.records.append(StepRecord(resolved.index, resolved.step, verdict, observation.lua_reply,
                                             observation.native_reply, resolved))  # fmt: skip
            if not verdict.ok:
                result.divergence = Divergence(
                    resolved.index, resolved.step, verdict.reason, observation.lua_reply, observation.native_reply,
                    state.before, observation.lua_after, observation.native_after, observation.native_epochs,
                    verdict.finding or "divergence", prediction=verdict.prediction,
                )  # fmt: skip
                result.elapsed_s = time.perf_counter() - started
                return state, mark
            resyncs = bool(verdict.rule and RULES[verdict.rule].resync)
            if sent.flags:
                result.divergence = self._events_divergence(state, observation, resyncs, sent, position)
                if result.divergence is not None:
                    result.elapsed_s = time.perf_counter() - started
                    return state, mark
            state = after_state
            mark = _lap(stages, "judge", mark)
            if resyncs:
                self._resync_after(state, walks, resolved, sent, position)
                mark = _lap(stages, "resync", mark)
        return state, mark

    def _observe(self, state: JudgeState, walks: _Walks, resolved: Resolved, lua_reply: Reply, native_reply: Reply,
                 sent: _Sent, position: int, now_ms: int, run_id: bytes,
                 mark: float) -> tuple[Observation, float]:  # fmt: skip
        """What both sides did at a segment's step: their replies, and the keyspaces their walks read (a
        bulk's call before its last: the keyspace the spec's model says); the time it ended. Raises
        _Unpredicted for an unwalked call the model gives no keyspace for."""
        if resolved.unwalked:
            made = assumed(state, Observation(resolved, now_ms, run_id, lua_reply, native_reply, state.before,
                                              state.before, state.before_epochs,
                                              self._denied(resolved, state.before)))  # fmt: skip
            if made is None:
                raise _Unpredicted(resolved.index)
            return made, mark
        lua_walk, native_walk = sent.lua_results[position][1], sent.native_results[position][1]
        assert lua_walk is not None and native_walk is not None  # (a walked step: both sides walked)
        lua_after, native_after, epochs = walks.parse(lua_walk, native_walk)
        mark = _lap(self.stages, "walk", mark)
        return Observation(resolved, now_ms, run_id, lua_reply, native_reply, lua_after, native_after, epochs,
                           self._denied(resolved, state.before)), mark  # fmt: skip

    def _events_divergence(self, state: JudgeState, observation: Observation, resyncs: bool, sent: _Sent,
                           position: int) -> Divergence | None:  # fmt: skip
        """The divergence of a step's keyspace events, where the two sides' departs; None where they agree."""
        assert self.native is not None
        resolved = observation.resolved
        lua_events, native_events = sent.lua_events[position], sent.native_events[position]
        problem = events_problem(resolved, resyncs, sent.flags, lua_events, native_events, observation.native_reply,
                                 self.native.db)  # fmt: skip
        if problem is None:
            return None
        return Divergence(
            resolved.index, resolved.step, problem, observation.lua_reply, observation.native_reply, state.before,
            observation.lua_after, observation.native_after, observation.native_epochs, EVENTS, None, lua_events,
            native_events,
        )  # fmt: skip

    def _resync_after(self, state: JudgeState, walks: _Walks, resolved: Resolved, sent: _Sent, position: int) -> None:
        """The pair re-synced after a step whose rule says so; the segment's Lua steps after it due again."""
        # the Lua keyspace now: after the last step it ran (this one's walk, where it was the last:
        # as parsed, a tracked one too; a re-sync's first in a segment reads it whole)
        last = sent.lua_fresh_to - 1
        parsed = walks.lua.current() if last == position and not resolved.unwalked else None
        self._resync(state, sent.lua_results[last][1], parsed)
        sent.lua_fresh_to, sent.window, sent.resynced_at = position + 1, 1, position

    def _send_again(self, segment: list[Resolved], position: int, sent: _Sent) -> None:
        """After a re-sync, the segment's next window of steps from `position` runs again on the Lua
        side (the first from the workers it had at the re-sync's step, and the server conditions: a
        transaction among them switched one the first time), their replies, walks and events
        replacing the first ones; the next window twice as long."""
        assert self.lua is not None
        if sent.resynced_at is not None:
            at, sent.resynced_at = sent.resynced_at, None
            self.lua.restore_workers(sent.lua_out[at].workers)
            held, replica_memory = conditions_after(sent.lua_conditions, sent.lua_replica_memory, segment[: at + 1])
            for condition in sorted(held ^ self.lua.conditions):
                self.lua.set_condition(condition, condition in held, replica_memory)
        end = _window_end(segment, position, sent.window)
        again = self.lua.run_steps(segment[position:end])
        sent.lua_results[position:end] = self.lua.finish(again)
        sent.lua_out[position:end] = again
        if sent.flags:
            sent.lua_events[position:end] = self.lua.events(again)
        sent.lua_fresh_to, sent.window = end, sent.window * 2

    def _boundary(self, step: Resolved, mark: float) -> float:
        """Clock advances and restarts; returns the time it ended (for the stage counters)."""
        assert self.lua is not None and self.native is not None
        if isinstance(step.step, Advance):
            if step.step.ms < 0:  # the clock stepped back
                self.group.set_time(self.group.clock.now_ms + step.step.ms)
            else:
                self.group.advance(step.step.ms)  # the servers' next commands read it
            return _lap(self.stages, "clock", mark)
        if isinstance(step.step, Restart):
            # the native's tracked walks proven before its keyspace is reloaded (a write no event
            # announced would show at the restart, not at its own step)
            missed = self._unverified(self._walks, native_only=True)
            if missed is not None:
                raise _Unannounced(missed)
            # Not waited for: a rewrite the reset started (see there). Only the native server
            # restarts: the Lua server, the reference, would reload from its AOF the keyspace it
            # holds (every write it acknowledged is there, fsynced), and nothing else of it is
            # compared (docs/design-notes.md, "A restart")
            self.group.restart_all(crash=step.step.crash, only=[self.native_server])
            if self.active_replicas is not None:
                self.active_replicas.relink()  # fresh replicas, synced before the segment writes anything
            self.native.reconnect()  # notifications, if on, set again on the started server (Side.connect)
            return _lap(self.stages, "restart", mark)
        if isinstance(step.step, Notify):
            for side in (self.lua, self.native):
                side.set_notify(step.step.flags)
            return _lap(self.stages, "events", mark)
        if isinstance(step.step, MemoryLimit | ReplicasRequired):
            replica = step.step.replica if isinstance(step.step, MemoryLimit) else None
            for side in (self.lua, self.native):
                side.set_condition(step.step.condition, step.step.on, replica)
            return _lap(self.stages, "memory", mark)
        return mark

    def _propagated(self, result: ReplayResult, state: JudgeState, segment: list[Resolved], found: Propagation,
                    started: float, sent: bool = True) -> ReplayResult:  # fmt: skip
        """A replica that does not hold its primary's keyspace, found at the end of the segment: a
        divergence of its own kind at the segment's last step. `sent` False: found before the
        segment (a call to a replica) was sent, the divergence is the call's, which sent nothing."""
        last = segment[-1]
        if sent:
            record = result.records[-1]
            lua_reply, native_reply = record.lua_reply, record.native_reply
        else:
            lua_reply = native_reply = NotSent("not sent: the replica it reads did not hold its primary's keyspace")
        result.divergence = Divergence(last.index, last.step, found.reason, lua_reply, native_reply,
                                       state.before, state.before, state.before, dict(state.before_epochs),
                                       PROPAGATION, found)  # fmt: skip
        result.elapsed_s = time.perf_counter() - started
        return result

    def _native_death(self, lost: BaseException) -> str:
        """Why the native server is gone, once its process has exited; else `lost` is raised again.
        Only the native's death is a finding: when the Lua server does not answer either (a raw step
        stopped both, something killed them), it is the harness's failure."""
        if not self.lua_server.answers():
            raise _reference_lost("mid-history", lost) from lost
        deadline = time.monotonic() + 2.0  # the socket closes a moment before the process is reaped
        while self.native_server.running and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.native_server.running:
            raise lost
        self.native_server.kill()  # reaps it: the next history's reset starts it again
        return f"its process exited mid-segment: {lost}"

    def _died(self, result: ReplayResult, state: JudgeState, segment: list[Resolved], native_out: list[StepOutcome],
              why: str, started: float) -> ReplayResult:  # fmt: skip
        """The step the native was on when it died, observed as such and judged: the first whose
        reply or walk never came."""
        position = next(
            (i for i, o in enumerate(native_out) if not (_ready(o.reply) and (o.walk is None or o.walk.ready))),
            len(segment) - 1,
        )
        resolved = segment[position]
        observation = Observation(resolved, self.group.clock.now_ms, b"", NotSent("not read: the native died"),
                                  Died(why), state.before, state.before, dict(state.before_epochs))  # fmt: skip
        _, verdict = judge(state, observation)
        result.observations.append(observation)
        result.records.append(StepRecord(resolved.index, resolved.step, verdict, observation.lua_reply,
                                         observation.native_reply, resolved))  # fmt: skip
        result.divergence = Divergence(resolved.index, resolved.step, verdict.reason, observation.lua_reply,
                                       observation.native_reply, state.before, state.before, state.before,
                                       dict(state.before_epochs))  # fmt: skip
        result.elapsed_s = time.perf_counter() - started
        return result

    def _resync(self, state: JudgeState, lua_walk: Walk | None, parsed: tuple[Snapshot, Epochs] | None = None) -> None:
        """The Lua server's keyspace (`lua_walk`: as it is now; `parsed`: that walk as the walks
        parsed it, when they did) becomes the native's (epochs included): equal ground again. Only
        the keys that differ are written (a key held alike keeps its TTL to the millisecond)."""
        assert self.lua is not None
        admin: Wire = self.lua.wires[None]
        held_conditions, replica_memory = sorted(self.lua.conditions), self.lua.replica_memory
        for condition in held_conditions:  # RESTORE is a deny-oom write: the harness's writes never meet them
            self.lua.set_condition(condition, False)
        if parsed is not None:
            held = with_epochs(*parsed)
        else:
            if lua_walk is None or is_tracked(lua_walk):
                # (only the keys its last step wrote, or none: a segment that ends inside a bulk step,
                # cut at SEGMENT_STEPS, walks none after its last call: the whole keyspace read now)
                lua_walk = _walk_reply(admin.call(WALK_COMMAND))
            held = with_epochs(*parse_canonical(lua_walk))
        commands, at_expiry = resync_commands(held, with_epochs(state.before, state.before_epochs), self.lua.db)
        if commands:
            admin.send(commands)
            for _ in commands:
                admin.read()
        if at_expiry:
            # keys at their expiry's very millisecond: given it with the clock a millisecond back (no
            # other command reaches either server meanwhile), then the clock is where it was
            clock = self.group.clock
            now = clock.now_ms
            clock.set(now - 1)
            try:
                admin.send(at_expiry)
                for _ in at_expiry:
                    admin.read()
            finally:
                clock.set(now)
        for condition in held_conditions:
            self.lua.set_condition(condition, True, replica_memory)
        self.lua.drain()  # the re-sync's own events (RESTORE) are nobody's step
        if parsed is not None and self.lua.tracked_walk is not None and not self.lua.whole_walks:
            # no walk of the Lua server's went unread: one now reports the re-sync's own writes, so that
            # its walks stay tracked (not whole at every step of a bulk stuck on a wrong-typed key) and
            # VERIFY finds those writes reported (at a segment's last step, nothing after it walks)
            self._walks.lua.read(_walk_reply(admin.call(*self.lua.walk_command)))
        else:
            self.lua.forget_walks()  # the next Lua walk whole: the segment's later walks were never applied

    def _replicas_for(self, history: History) -> Replicas | None:
        """The replicas the history keeps up: --replicas', else, for a history that calls a replica,
        a replica beside each server started for it (kept for the next such history, stopped at the
        first that calls none: they cost a check after every segment that writes); each side told
        where its replica is. A replica kept from an earlier history holds what a fresh one would once
        it has caught up with the reset's FLUSHALL, which the check before the history's first call
        to a replica waits for (replay): no verdict depends on the earlier history."""
        assert self.lua is not None and self.native is not None
        calls_replica = any(isinstance(step, CallStep | Multi) and step.target is not None for step in history.steps)
        active = self.replicas
        if active is None and calls_replica:
            if not self.tcp:
                raise SetupProblem(
                    "a history calls a replica ('target'), which an attached pair has not: drop --attach"
                )
            if self.call_replicas is None:
                self.call_replicas = Replicas(self.group, [("lua", self.lua_server), ("native", self.native_server)])
            else:
                self.call_replicas.relink()  # a server started since: its replica synced before any step
            active = self.call_replicas
        elif self.call_replicas is not None and not calls_replica:
            # the Lua server never restarts: its replica stays linked for the next such history (a
            # start and a full sync saved); the native's would re-sync on its own after the native's
            # next restart (a fork mid-history), so it stops, and starts again when next called
            for pair in self.call_replicas.pairs:
                if pair.side == "native" and pair.replica.running:
                    pair.stop()
        for side in (self.lua, self.native):
            side.close_replica()
            side.replica = None
        if active is not None:
            for pair in active.pairs:
                (self.lua if pair.side == "lua" else self.native).replica = pair.replica
        return active

    def _denied(self, resolved: Resolved, before: Snapshot) -> frozenset[tuple[bytes, str]]:
        """Which derived keys the step's user may not read or write: asked of the server (ACL
        DRYRUN) before judging, remembered by the user's rules for every later history."""
        user = resolved.user
        keys = acl_probe_keys(resolved, before)
        if user is None or not keys:
            return frozenset()
        assert self.native is not None
        rules = tuple(self.native.users[user])
        known = self._acl
        if len(known) > ACL_ANSWERS_KEPT:  # forgotten before this step's keys are looked up, not between
            known.clear()
        unknown = [(key, perm) for key in keys for perm in ("read", "write") if (rules, key, perm) not in known]
        if unknown:
            self.native.ensure_user(user)  # a step the native did not send (a split claim's begin) made none
            pipe = self.native_server.client.pipeline(transaction=False)
            for key, perm in unknown:
                probe = [b"HGET", key, b"f"] if perm == "read" else [b"HSET", key, b"f", b"v"]
                pipe.execute_command(b"ACL", b"DRYRUN", user.encode(), *probe)
            for (key, perm), answer in zip(unknown, pipe.execute(raise_on_error=False), strict=True):
                known[(rules, key, perm)] = answer not in (b"OK", "OK")
        return frozenset((key, perm) for key in keys for perm in ("read", "write") if known[(rules, key, perm)])


def check_compiles(client: valkey.Valkey, scripts: dict[str, bytes], directory: Path | None) -> None:
    """Every script as the Lua server's own compiler sees it (SCRIPT LOAD compiles, runs nothing):
    one that does not compile is one line naming its file and the compiler's message and line,
    before any step (else every call of it would be a NOSCRIPT reply, read as a divergence)."""
    from valkey.exceptions import ResponseError

    from executors.lua.adapter import script_directory

    for verb, source in scripts.items():
        try:
            client.execute_command(b"SCRIPT", b"LOAD", source)
        except ResponseError as refused:
            path = script_directory(directory) / TRANSITIONS[verb].script_name
            message = " ".join(str(refused).split())
            raise ScriptDoesNotCompile(
                f"{path} does not compile: {message} (user_script:N is the file's line N); "
                "fix it, or pass --lua-scripts a directory whose scripts compile"
            ) from None


def check_scripts(lua_scripts: Path | None) -> None:
    """A user's scripts compiled once on an embedded Lua server of their own, before a campaign starts
    its workers (each of which checks again as its Replayer starts)."""
    scripts = load_scripts(lua_scripts)
    with contextlib.closing(ServerGroup()) as group:
        check_compiles(group.add("lua").client, scripts, lua_scripts)


def _check_clock(server: str, time_reply: Reply, expected_ms: int) -> None:
    """A server's TIME reply must be the frozen millisecond exactly, or no step may run on it."""
    if isinstance(time_reply, list) and len(time_reply) == 2:
        seconds, micros = time_reply
        if (
            isinstance(seconds, bytes)
            and isinstance(micros, bytes)
            and int(seconds) * 1000 + int(micros) // 1000 == expected_ms
        ):
            return
    raise RuntimeError(
        f"{server} answered TIME with {time_reply!r}, not the frozen {expected_ms} ms: is the clock library preloaded?"
    )


def aof_rewrite(aof_bytes: int, history_restarts: bool) -> str | None:
    """What the reset does about a server's AOF before the next history (pure): nothing, start a
    rewrite (START_REWRITE) or start it and wait for its end (FINISH_REWRITE). A rewrite starts when
    the AOF has grown past AOF_COMPACT_BYTES, or before a history that restarts the server once it
    holds more than the empty keyspace's few bytes (what a restart would replay of earlier
    histories). Such a history's restart may stop the rewrite, so its AOF can keep growing: past
    AOF_COMPACT_BYTES, the rewrite before a restarting history is waited for."""
    if aof_bytes > AOF_COMPACT_BYTES:
        return FINISH_REWRITE if history_restarts else START_REWRITE
    if history_restarts and aof_bytes > AOF_COMPACT_BEFORE_RESTART_BYTES:
        return START_REWRITE
    return None


def aof_size(info: Reply) -> int:
    """aof_current_size from an INFO persistence reply (0 when absent: AOF off)."""
    if isinstance(info, bytes):
        for line in info.splitlines():
            if line.startswith(b"aof_current_size:"):
                return int(line.split(b":", 1)[1])
    return 0


def _walk_reply(reply: Reply) -> Walk:
    """A walk's reply read on its own (a list of strings: anything else a harness's failure)."""
    assert isinstance(reply, list), reply
    return reply


def _walked(resolved: tuple[Resolved, ...], walked: frozenset[int]) -> tuple[Resolved, ...]:
    """A history's resolved steps, the bulk calls at the indexes `walked` walked after all."""
    if not walked:
        return resolved
    return tuple(replace(r, unwalked=False) if r.unwalked and r.index in walked else r for r in resolved)


def _lap(stages: defaultdict[str, float], stage: str, since: float) -> float:
    now = time.perf_counter()
    stages[stage] += now - since
    return now


def _ready(reply: Reply | Future | Element) -> bool:
    return not isinstance(reply, Future | Element) or reply.ready


def replay_once(history: History, module: Path, lua_scripts: Path | None = None) -> ReplayResult:
    with Replayer(module, lua_scripts=lua_scripts) as replayer:
        return replayer.replay(history)


__all__ = ["Divergence", "ReplayResult", "Replayer", "Side", "StepRecord", "replay_once", "segments"]
