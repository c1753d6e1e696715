"""The class corpus: one short directed history per class label (difftest/coverage/labels.py, CLASS_LABELS),
built from the command table and the value domains (difftest/spec/domains.py).

A campaign replays it as Hypothesis's explicit examples in its first batch, before generating: every
bound, every value class of every field a transition reads, every key a transition writes made of
another type, every permission on every key it reaches, ids, payloads and errors at their edges and
long-lived counters are met at least once whatever the seed; so are the reply kinds, sweep verdicts
and contract rows the generator meets only by chance (`_behaviours`), so that every label coverage.py
requires is reached by any campaign, `--examples 1` too. The generator draws the same classes at
random beside everything else, in combinations no corpus lists.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

from difftest.coverage.labels import ADVANCE_CLASSES, CLOCK_ORIGINS, CROSSINGS, DRAWN_PAIRS
from difftest.history.format import (
    REPLICA,
    REPLICA_IGNORES,
    REPLICA_OBEYS,
    SCRIPTS,
    Advance,
    BeginClaim,
    Bulk,
    CallStep,
    EndClaim,
    Exec,
    History,
    MemoryLimit,
    Multi,
    Notify,
    RawWrite,
    ReplicasRequired,
    Restart,
    Step,
)
from difftest.spec import domains
from difftest.spec.calls import Call
from difftest.spec.commands import COMPLETED, FAILED, TRANSITIONS, Layout, Rows, Transition, Verb
from strategies.pools import QUEUES, USERS
from strategies.upgrade import lua_era

QUEUE = QUEUES[0]
LAYOUT = Layout(QUEUE)
HELD, DUE, DEAD, SPARE = b"j1", b"j2", b"j3", b"j4"

# j1 active (attempt 1, its lease expired by the end), j2 delayed and due, j3 dead, j4 pending
PRELUDE: tuple[Step, ...] = (
    CallStep(Call.of(Verb.ENQUEUE, QUEUE, HELD, b"p", 0)),
    CallStep(Call.of(Verb.ENQUEUE, QUEUE, DUE, b"p", 5)),
    CallStep(Call.of(Verb.ENQUEUE, QUEUE, DEAD, b"p", 0)),
    CallStep(Call.of(Verb.CLAIM, QUEUE, 10)),
    CallStep(Call.of(Verb.CLAIM, QUEUE, 100)),
    CallStep(Call.of(Verb.FAIL, QUEUE, DEAD, 1, b"e", 1, 0)),
    CallStep(Call.of(Verb.ENQUEUE, QUEUE, SPARE, b"p", 0)),
    Advance(10),
)

# the prelude's job in each set a transition takes a job from (the command table's `takes_from`), and
# the new id an ENQUEUE adds ("")
JOB_IN: dict[str, bytes] = {"active": HELD, "delayed": DUE, "dead": DEAD, "pending": SPARE, "": b"j5"}
# each argument's plain value by its name in the command table (the held token is 1); an id is the
# job of the set the transition takes from
PLAIN_VALUES: dict[str, bytes | int] = {
    "payload": b"p", "delay_ms": 0, "lease_ms": 10, "token": 1, "error": b"e", "max_attempts": 1, "backoff_ms": 0,
    "limit": 3, "max_stalled": 1,
}  # fmt: skip
# each verb's arguments aimed at the prelude's jobs
PLAIN_ARGS: dict[str, tuple[bytes | int, ...]] = {
    verb: tuple(JOB_IN[t.takes_from] if a.name == "id" else PLAIN_VALUES[a.name] for a in t.args)
    for verb, t in TRANSITIONS.items()
}
# a call that reaches each kind of key through the row or set the prelude left for it
ROW_OF: dict[str, bytes] = {verb: JOB_IN[t.takes_from] for verb, t in TRANSITIONS.items() if t.rows is not Rows.NONE}


def plain(verb: str, *args: bytes | int) -> Call:
    """The verb's call on the corpus's queue: these arguments, or its plain ones aimed at the prelude."""
    return Call.of(verb, QUEUE, *(args or PLAIN_ARGS[verb]))


CORPUS_NOTE = "class corpus: "  # how a corpus history is told from a generated one


def _history(note: str, *steps: Step, users: dict[str, tuple[str, ...]] | None = None) -> History:
    return History((*PRELUDE, *steps), users=users or {}, note=CORPUS_NOTE + note)


def _bounds() -> Iterator[History]:
    for verb, arg in domains.INT_ARGS:
        transition = TRANSITIONS[verb]
        position = next(i for i, a in enumerate(transition.args) if a.name == arg)
        for edge in domains.BOUND_EDGES:
            args = list(PLAIN_ARGS[verb])
            args[position] = domains.bound_value(verb, arg, edge)
            yield _history(f"bound:{verb}:{arg}:{edge}", CallStep(plain(verb, *args)))


def _values() -> Iterator[History]:
    for field_bytes, readers in domains.ROW_FIELDS.items():
        field = field_bytes.decode()
        # each kind of reader once: CLAIM's increment, and the fence of the calls that present a token
        kinds = {TRANSITIONS[r].fenced: r for r in reversed(readers)}
        for cls in domains.FIELD_CLASSES[field]:
            value = domains.FIELD_VALUE_CLASSES[cls]
            for reader in kinds.values():
                row = LAYOUT.row(ROW_OF[reader])
                write = (b"HDEL", row, field_bytes) if value is None else (b"HSET", row, field_bytes, value)
                token = domains.lenient_integer(value) if field == "attempts" else None
                args = list(PLAIN_ARGS[reader])
                if TRANSITIONS[reader].fenced and token is not None and token >= 0:
                    args[1] = token  # the number a careless reader takes it for
                yield _history(f"value:{field}:{cls} by {reader}", RawWrite(write), CallStep(plain(reader, *args)))
    for cls in domains.FIELD_CLASSES["paused"]:
        value = domains.FIELD_VALUE_CLASSES[cls]
        meta = LAYOUT.meta
        write = (b"HDEL", meta, b"paused") if value is None else (b"HSET", meta, b"paused", value)
        yield _history(f"value:paused:{cls}", RawWrite(write), CallStep(plain(Verb.CLAIM)))
    for cls in domains.FIELD_CLASSES["count"]:
        value = domains.FIELD_VALUE_CLASSES[cls]
        metrics = LAYOUT.metrics("completed")
        write = (b"HDEL", metrics, b"count") if value is None else (b"HSET", metrics, b"count", value)
        yield _history(f"value:count:{cls}", RawWrite(write), CallStep(plain(Verb.COMPLETE)))
    for name, readers in domains.SCORE_READERS.items():
        member = JOB_IN[name]
        for cls, score in domains.SCORE_CLASSES.items():
            write = (b"ZADD", LAYOUT.key(name), score, member)
            yield _history(f"value:score:{name}:{cls}", RawWrite(write), CallStep(plain(readers[0])))
    for cls, raw in domains.BYTES_EDGES.items():
        yield _history(f"edge:id:{cls}", CallStep(plain(Verb.ENQUEUE, raw, b"p", 0)))
        yield _history(f"edge:payload:{cls}", CallStep(plain(Verb.ENQUEUE, b"j5", raw, 0)))
        yield _history(f"edge:error:{cls}", CallStep(plain(Verb.FAIL, HELD, 1, raw, 1, 0)))


def _wrong_types() -> Iterator[History]:
    for verb, transition in TRANSITIONS.items():
        for index, kind in enumerate(domains.written_keys(transition)):
            key = LAYOUT.row(ROW_OF[verb]) if kind == domains.ROWS_KEY else LAYOUT.key(kind)
            wrong = domains.WRONG_TYPES[index % len(domains.WRONG_TYPES)]
            writes = [RawWrite(c) for c in domains.wrong_type_commands(key, kind, wrong)]
            yield _history(f"wrongtype:{verb}:{kind} as {wrong}", *writes, CallStep(plain(verb)))


def _permissions() -> Iterator[History]:
    for verb, transition in TRANSITIONS.items():
        for kind in domains.reached_keys(transition):
            for perm in domains.PERMS:
                user = domains.acl_user(kind, perm)
                note = f"acl:{verb}:{domains.acl_key(kind)}:{perm}"
                yield _history(note, CallStep(plain(verb), user), users={user: USERS[user]})
        # a caller restricted on a key the transition does not reach: it may read and write all it does
        elsewhere = next(kind for kind in domains.KEY_KINDS if kind not in domains.reached_keys(transition))
        user = domains.acl_user(elsewhere, "none")
        yield _history(f"acl:{verb}:{domains.acl_keys(transition)[0]}:both", CallStep(plain(verb), user),
                       users={user: USERS[user]})  # fmt: skip


def _long_lived() -> Iterator[History]:
    spare, held = LAYOUT.row(SPARE), LAYOUT.row(HELD)
    yield _history("long:claimed", RawWrite((b"HSET", spare, b"attempts", b"10")), CallStep(plain(Verb.CLAIM)))
    yield _history("long:fenced-held", RawWrite((b"HSET", held, b"attempts", b"10")),
                   CallStep(plain(Verb.COMPLETE, HELD, 10)))  # fmt: skip
    yield _history("long:fenced-stale", RawWrite((b"HSET", held, b"attempts", b"10")),
                   CallStep(plain(Verb.COMPLETE, HELD, 1)))  # fmt: skip
    yield _history("long:stalled", RawWrite((b"HSET", held, b"stalled", b"9")), CallStep(plain(Verb.SWEEP, 10, 3)))
    # attempts past 2^53: the retired CLAIM replies the nearest double (contract:N5, docs/contract-decisions.md)
    yield _history("contract:N5", RawWrite((b"HSET", spare, b"attempts", str(2**53 + 2).encode())),
                   CallStep(plain(Verb.CLAIM)))  # fmt: skip


def _laid_out(transition: Transition, position: str, cls: str) -> Call:
    """The plain call of a transition with one key position of a layout class."""
    keys = domains.laid_out(transition, QUEUE, position, cls, QUEUES[1])
    return Call(transition.verb, str(transition.numkeys).encode(), (*keys, *plain(transition.verb).rest[len(keys) :]))


def _argument_edges() -> Iterator[History]:
    """Each class of each argument rule (difftest/spec/domains.py): the rules are checked before any state
    is read, so a refused call stands alone; an accepted integer meets the prelude's jobs, and a
    queue of an accepted odd name is enqueued to and claimed from. The transitions take turns."""
    verbs = list(TRANSITIONS.values())
    for index, cls in enumerate(domains.SHAPE_CLASSES):
        turn = verbs[index % len(verbs) :] + verbs[: index % len(verbs)]
        for t in turn:
            numkeys, rest = domains.shaped(t, plain(t.verb).rest, cls)
            if domains.shape_class(t, numkeys, rest) == cls:
                yield History((CallStep(Call(t.verb, numkeys, rest)),), note=f"{CORPUS_NOTE}edge:shape:{cls}")
                break
    for index, label in enumerate(domains.layout_labels()):
        position, cls = label.split(":")[2:]
        turn = verbs[index % len(verbs) :] + verbs[: index % len(verbs)]
        if cls in domains.ACCEPTED_QUEUES:  # an odd queue name: a job enqueued to it and claimed
            turn = [TRANSITIONS[Verb.ENQUEUE], TRANSITIONS[Verb.CLAIM]]
        else:
            turn = [next(t for t in turn if cls in domains.layout_classes(t, position)
                         and position in domains.layout_positions(t))]  # fmt: skip
        steps = [CallStep(_laid_out(t, position, cls)) for t in turn]
        yield History(tuple(steps), note=f"{CORPUS_NOTE}{label}")
    for index, cls in enumerate(domains.INT_CLASSES):
        verb, arg = domains.INT_ARGS[index % len(domains.INT_ARGS)]
        at = next(i for i, a in enumerate(TRANSITIONS[verb].args) if a.name == arg)
        args = list(PLAIN_ARGS[verb])
        args[at] = domains.INT_CLASSES[cls].raw
        step = CallStep(plain(verb, *args))
        if domains.int_outcome(verb, arg, cls) is None:
            yield _history(f"edge:int:{cls} at {verb} {arg}", step)
        else:
            yield History((step,), note=f"{CORPUS_NOTE}edge:int:{cls} at {verb} {arg}")


def _upgrades() -> Iterator[History]:
    """The module takes over a keyspace the scripts built (strategies/upgrade.py): the prelude ran
    through the scripts on both servers, so its rows lack lease_epoch in every set."""

    def after_lua_era(note: str, *steps: Step) -> History:
        return History((*lua_era(PRELUDE), *steps), note=CORPUS_NOTE + note)

    yield after_lua_era("upgrade:lua-prefix", CallStep(plain(Verb.ENQUEUE)))
    yield after_lua_era("upgrade:lua-row-in:pending", CallStep(plain(Verb.CLAIM)))
    yield after_lua_era("upgrade:lua-row-in:active", CallStep(plain(Verb.EXTEND)))
    yield after_lua_era("upgrade:lua-row-in:delayed", CallStep(plain(Verb.PROMOTE)))
    yield after_lua_era("upgrade:lua-row-in:dead", CallStep(plain(Verb.REVIVE)))
    yield after_lua_era("upgrade:lua-row-in:done", *lua_era([CallStep(plain(Verb.COMPLETE))]),
                        CallStep(plain(Verb.COMPLETE)))  # fmt: skip
    yield after_lua_era("upgrade:d7-lua-lease", CallStep(plain(Verb.SWEEP)))
    # a rolling upgrade: the prelude on the module, then a worker still on the scripts takes a lease
    # and sweeps (counting the module's lease), and the module's sweeper meets the scripts' lease (D7)
    yield _history("upgrade:mixed-fleet", CallStep(plain(Verb.CLAIM), executor=SCRIPTS),
                   CallStep(plain(Verb.SWEEP), executor=SCRIPTS), Advance(10), CallStep(plain(Verb.SWEEP)))  # fmt: skip


def _behaviours() -> Iterator[History]:
    """The required labels outside the classes that the prelude and the histories above leave unmet:
    each reply kind, sweep verdict and contract row the generator only meets by chance, so that a
    campaign of any seed and budget (--examples 1 too) reaches every required label."""
    yield _history("reply:PAUSE:already", CallStep(plain(Verb.PAUSE)), CallStep(plain(Verb.PAUSE)))
    yield _history("reply:RESUME:resumed", CallStep(plain(Verb.PAUSE)), CallStep(plain(Verb.RESUME)))
    yield _history("reply:REVIVE:not-dead", CallStep(plain(Verb.REVIVE, SPARE)))  # j4 is pending, not dead
    # an active member whose row another writer removed: the sweep counts it a ghost
    yield _history("sweep:ghost", RawWrite((b"DEL", LAYOUT.row(HELD))), CallStep(plain(Verb.SWEEP)))
    # a PAUSE between the Lua host's paused? read and its script: the script still claims j4
    yield _history("contract:D1", BeginClaim("A", plain(Verb.CLAIM)), CallStep(plain(Verb.PAUSE), worker="B"),
                   EndClaim("A"))  # fmt: skip
    # a caller denied the pending set claims from a paused queue: the Lua host answers from its read
    user = domains.acl_user("pending", "none")
    yield _history("contract:N3", CallStep(plain(Verb.PAUSE)), CallStep(plain(Verb.CLAIM), user),
                   users={user: USERS[user]})  # fmt: skip


def _conditions() -> Iterator[History]:
    """Server conditions (issue 27): each transition on a worker's RESP3 connection, and each but
    CLAIM inside MULTI/EXEC (with a REVIVE after it in the same transaction: two elements of one
    EXEC reply, the second reading what the first wrote)."""
    for verb in TRANSITIONS:
        yield _history(f"condition:resp3:{verb.lower()}", CallStep(plain(verb), protocol=3))
    for verb, transition in TRANSITIONS.items():
        if not transition.reads_meta:
            yield _history(f"condition:multi:{verb.lower()}", Multi(), CallStep(plain(verb)),
                           CallStep(plain(Verb.REVIVE)), Exec())  # fmt: skip


def _notifications() -> Iterator[History]:
    """Each verb with keyspace notifications on (`condition:notify:<verb>`): its events compared with
    the scripts' (SWEEP recovers the expired lease and dies nothing, with stalled 2; the prelude's
    SWEEP arguments dead-letter it; both fire hincrby then hset on the row)."""
    for verb in TRANSITIONS:
        steps: list[Step] = [Notify("KEA")]
        if verb == Verb.RESUME:
            steps.append(CallStep(plain(Verb.PAUSE)))
        steps.append(CallStep(plain(verb, *((2, 3) if verb == Verb.SWEEP else ()))))
        if verb == Verb.SWEEP:
            steps += [CallStep(plain(Verb.CLAIM, 1)), Advance(1), CallStep(plain(Verb.SWEEP, 1, 3))]
        yield _history(f"condition:notify:{verb.lower()}", *steps, Notify(""))


def _production() -> Iterator[History]:
    """Each transition where production runs (`condition:*`): its queue in another database; a TTL
    another writer gave its row (or pending), beside one the frozen clock has passed (metrics:failed,
    gone) and one taken away again (PERSIST); a field of an operator's in meta and in its row."""
    for verb in TRANSITIONS:
        call = CallStep(plain(verb))
        row = LAYOUT.row(ROW_OF.get(verb, SPARE)) if verb != Verb.ENQUEUE else LAYOUT.pending
        yield History((*PRELUDE, call), note=f"{CORPUS_NOTE}condition:db:{verb.lower()}", db=2)
        ttl = (
            RawWrite((b"PEXPIRE", row, b"100000")), RawWrite((b"PEXPIRE", LAYOUT.metrics("failed"), b"1")),
            RawWrite((b"PEXPIRE", LAYOUT.delayed, b"5")), RawWrite((b"PERSIST", LAYOUT.delayed)), Advance(2),
        )  # fmt: skip
        yield _history(f"condition:ttl:{verb.lower()}", *ttl, call)
        fields = (RawWrite((b"HSET", LAYOUT.meta, b"owner", b"ops")), RawWrite((b"HSET", row, b"note", b"")))
        yield _history(f"condition:fields:{verb.lower()}", *fields, call)


def _memory_and_replica(replica_calls: bool) -> Iterator[History]:
    """Each transition over the memory limit (set, the call, lifted), each while the servers deny
    writes for want of replicas, and each sent to the server's read-only replica (one after the
    other: the replicas started for the first serve them all); without `replica_calls` (an attached
    pair: no replicas), none of the latter."""
    for verb in TRANSITIONS:
        yield _history(f"condition:oom:{verb.lower()}", MemoryLimit(True), CallStep(plain(verb)), MemoryLimit(False))
    for verb in TRANSITIONS:
        yield _history(f"condition:noreplicas:{verb.lower()}", ReplicasRequired(True), CallStep(plain(verb)),
                       ReplicasRequired(False))  # fmt: skip
    if replica_calls:
        for verb in TRANSITIONS:
            yield _history(f"condition:replica:{verb.lower()}", CallStep(plain(verb), target=REPLICA))
        # the replicas under a memory limit of their own, ignored as production's replicas do by
        # default (READONLY where the first write is) and obeyed (OOM first)
        for how, replica in (("ignored", REPLICA_IGNORES), ("obeyed", REPLICA_OBEYS)):
            yield _history(f"condition:replica-limit:{how}", MemoryLimit(True, replica),
                           CallStep(plain(Verb.ENQUEUE, b"j-new", b"p", 0), target=REPLICA),
                           CallStep(plain(Verb.PAUSE), target=REPLICA), MemoryLimit(False))  # fmt: skip


# the user the combined corpus calls as: one who may only read job rows (its ENQUEUE meets the memory
# limit and its own denial at the same first write: which refusal wins, docs/contract-decisions.md)
PAIR_USER = domains.acl_user("job:*", "read")


def _memory(replica: str | None, on: bool) -> MemoryLimit:
    """The memory limit switched (on a replica's side, `replica` says how it meets its own)."""
    return MemoryLimit(on, replica if on else None)


def _combined(replica_calls: bool) -> Iterator[History]:
    """Each transition under two conditions at once (`pair:<a>+<b>:<verb>`, every pair a history can
    hold), made of each condition's part: the memory limit (on a replica: its own, obeyed) and
    writes denied switched around the call, the call sent to the replica, by a restricted user, on
    RESP3, inside a transaction (with a PAUSE in it: under a refusing condition, EXECABORT), in
    another database, under keyspace notifications. Without `replica_calls`, none with the replica."""
    for a, b in DRAWN_PAIRS:
        pair = (a, b)
        if "replica" in pair and not replica_calls:
            continue
        target = REPLICA if "replica" in pair else None
        protocol = 3 if "resp3" in pair else 2
        on: list[Callable[[bool], Step]] = []
        if "oom" in pair:
            on.append(functools.partial(_memory, REPLICA_OBEYS if target else None))
        if "noreplicas" in pair:
            on.append(ReplicasRequired)
        user = PAIR_USER if "user" in pair else None
        for verb, transition in TRANSITIONS.items():
            if "multi" in pair and transition.reads_meta:
                continue
            met: tuple[Step, ...]
            if "multi" in pair:
                pause = () if target else (CallStep(plain(Verb.PAUSE)),)  # (a replica refuses the rest anyway)
                met = (Multi(target, protocol), CallStep(plain(verb)), *pause, Exec())
            else:
                met = (CallStep(plain(verb), user, protocol=protocol, target=target),)
            paused = (CallStep(plain(Verb.PAUSE)),) if verb == Verb.RESUME else ()  # (a RESUME that writes)
            notify = (Notify("KEA"),) if "notify" in pair else ()
            steps: tuple[Step, ...] = (*paused, *notify, *(switch(True) for switch in on), *met,
                                       *(switch(False) for switch in on))  # fmt: skip
            note = f"{CORPUS_NOTE}pair:{a}+{b}:{verb.lower()}"
            users = {user: USERS[user]} if user is not None else {}
            yield History((*PRELUDE, *steps), users=users, note=note, db=2 if "db" in pair else 0)


def _switched_in_transactions() -> Iterator[History]:
    """Each condition switched on between MULTI and EXEC (`condition:multi-switch:*`): a PAUSE queued
    before it (the server discards the transaction at EXEC) and an ENQUEUE after it."""
    for name, switch in (("oom", MemoryLimit), ("noreplicas", ReplicasRequired)):
        steps = (Multi(), CallStep(plain(Verb.PAUSE)), switch(True), CallStep(plain(Verb.ENQUEUE, b"j-new", b"p", 0)),
                 Exec(), switch(False))  # fmt: skip
        yield _history(f"condition:multi-switch:{name}", *steps)


def _two_faults() -> Iterator[History]:
    """Two argument rules broken in one call (`edge:faults:*`): a key of another queue and a lease
    out of range (the layout wins), and two integers out of range in turn (the first wins)."""
    extend = TRANSITIONS[Verb.EXTEND]
    keys = domains.laid_out(extend, QUEUE, "active", domains.OTHER_QUEUE, QUEUES[1])
    yield History((CallStep(Call(Verb.EXTEND, str(extend.numkeys).encode(), (*keys, JOB_IN["active"], b"1", b"-1"))),),
                  note=f"{CORPUS_NOTE}edge:faults:layout+int")  # fmt: skip
    yield History((CallStep(plain(Verb.FAIL, JOB_IN["active"], 1, b"e", b"x", b"-5")),),
                  note=f"{CORPUS_NOTE}edge:faults:int+int")  # fmt: skip


def _time() -> Iterator[History]:
    """Production's clocks (`time:*`): the prelude and a lease's expiry from each clock origin, one
    advance of each size (the lease past, then swept), and the 2038 and 2106 second counts crossed."""
    expiry = (CallStep(plain(Verb.CLAIM, 1)), Advance(2), CallStep(plain(Verb.SWEEP, 1, 3)))
    for name, start in CLOCK_ORIGINS.items():
        yield History((*PRELUDE, *expiry), start_ms=start, note=f"{CORPUS_NOTE}time:start:{name}")
    for name, below in ADVANCE_CLASSES:
        ms = below // 2 if below is not None else 2 * 86_400_000
        yield _history(f"time:advance:{name}", CallStep(plain(Verb.CLAIM, 1)), Advance(ms),
                       CallStep(plain(Verb.PROMOTE)), CallStep(plain(Verb.SWEEP, 1, 3)))  # fmt: skip
    for name in CROSSINGS:
        crossing = (*PRELUDE, Advance(2_000), *expiry)  # the origin is a second and a millisecond before it
        yield History(crossing, start_ms=CLOCK_ORIGINS[name], note=f"{CORPUS_NOTE}time:crosses:{name}")
    # restarted onto a clock a minute behind: the lease taken before runs a minute longer
    yield _history("time:back", CallStep(plain(Verb.CLAIM, 1)), Restart(), Advance(-60_000), Advance(2),
                   CallStep(plain(Verb.SWEEP, 1, 3)), CallStep(plain(Verb.PROMOTE)))  # fmt: skip


# production's size (issue 37): the fill of the size history, and how many of it each later bulk takes
SIZE_FILL, SIZE_BATCH, SIZE_CLAIMS, SIZE_DONE, SIZE_FAILED = 10_000, 2_000, 1_500, 100, 300


def _sizes() -> Iterator[History]:
    """Production's size, once whatever the seed (difftest/coverage/labels.py, SIZE_LABELS): a producer's
    bulk of 10,000 delayed jobs due together, a PROMOTE of 2,000 of them, a fleet's 1,500 CLAIMs, bulk
    COMPLETEs and FAILs of the fill's first ids (those not claimed: fenced), then a SWEEP of the
    leases that expired together."""
    fill = Bulk(Call.of(Verb.ENQUEUE, QUEUE, b"f0.", b"p", 5), SIZE_FILL)
    yield _history("size:queue:10000", *fill.steps(), Advance(5), CallStep(plain(Verb.PROMOTE, SIZE_BATCH)),
                   *Bulk(plain(Verb.CLAIM, 10), SIZE_CLAIMS).steps(),
                   *Bulk(plain(Verb.COMPLETE, b"f0.", 1), SIZE_DONE).steps(),
                   *Bulk(plain(Verb.FAIL, b"f0.", 1, b"e", 1, 0), SIZE_FAILED).steps(),
                   Advance(10), CallStep(plain(Verb.SWEEP, 1, SIZE_BATCH)))  # fmt: skip


def _counters() -> Iterator[History]:
    """Counters another writer left one below an edge production's counters cross, crossed by the
    history's own increments (difftest/coverage/labels.py, COUNTER_LABELS): metrics:completed past 2^31
    by a COMPLETE, a row's attempts past 2^32 by its CLAIM, metrics:failed past 2^53 by that job
    dead-lettered with the token the CLAIM gave, and metrics:completed to i64's end."""
    completed, failed = LAYOUT.metrics(COMPLETED), LAYOUT.metrics(FAILED)
    token = domains.COUNTER_EDGES["2^32"]
    yield _history("counter:crosses:2^31", RawWrite((b"HSET", completed, b"count", domains.below_edge("2^31", 1))),
                   CallStep(plain(Verb.COMPLETE, HELD, 1)),
                   RawWrite((b"HSET", LAYOUT.row(SPARE), b"attempts", domains.below_edge("2^32", 1))),
                   CallStep(plain(Verb.CLAIM)),
                   RawWrite((b"HSET", failed, b"count", domains.below_edge("2^53", 1))),
                   CallStep(plain(Verb.FAIL, SPARE, token, b"e", 1, 0)),
                   CallStep(plain(Verb.ENQUEUE, b"j5", b"p", 0)), CallStep(plain(Verb.CLAIM)),
                   RawWrite((b"HSET", completed, b"count", domains.below_edge("i64", 1))),
                   CallStep(plain(Verb.COMPLETE, b"j5", 1)))  # fmt: skip


def _megabytes() -> Iterator[History]:
    """A megabyte's payload enqueued and claimed back, and a megabyte's error text of its FAIL (a
    retry): difftest/coverage/labels.py, `size:value:*`."""
    yield _history("size:value:payload:1MiB", CallStep(plain(Verb.ENQUEUE, b"j5", domains.MEGABYTE, 0)),
                   CallStep(plain(Verb.CLAIM)), CallStep(plain(Verb.CLAIM)),
                   CallStep(plain(Verb.FAIL, b"j5", 1, domains.MEGABYTE, 2, 0)))  # fmt: skip


def class_corpus(replica_calls: bool = True, sizes: bool = True) -> list[History]:
    """Every directed history, in a fixed order (`replica_calls`: with those that call a replica;
    `sizes`: with production's size)."""
    return [*_bounds(), *_values(), *_wrong_types(), *_permissions(), *_long_lived(), *_argument_edges(), *_upgrades(),
            *_behaviours(), *_conditions(), *_notifications(), *_production(), *_memory_and_replica(replica_calls),
            *_combined(replica_calls), *_switched_in_transactions(), *_time(), *_two_faults(), *_counters(),
            *_megabytes(),
            *(_sizes() if sizes else ())]  # fmt: skip
