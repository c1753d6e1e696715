"""Benchmark: compared steps per second, the ratio to generating the same histories alone, and where
a compared step's time goes.

All figures come from one run on the same machine, so the ratios hold even when the machine is
noisy. Per mix: generation-only and compared steps/s, and the cost per step of each stage in µs
(generate: Hypothesis drawing the histories; send: the steps and their keyspace walks on both
servers, round trips included; walk: reading the walks into snapshots; judge: building each
observation and judging it; restart: stopping and starting the native server, reconnecting;
clock: moving the frozen clock; reset: flushing between histories and checking each server's clock;
resync: the Lua server taking the native's keyspace; other: what the compared run spent outside the
replay). The servers' CPU counts each zygote's reaped children (every server start it forked).

`--replicas` adds the cost of a replica beside each server (`difftest run --replicas`): per mix, each
history replayed on a pair without replicas and at once on a pair with them, and the ratio of the
two replay rates in steps/s (generation excluded: it is the same for both).

`--model` adds the cost of the spec's model (difftest/spec/model.py, held to each executor at every
step): per mix, each history replayed with the model off and at once with it on, on the same pair
(in alternating order), and the ratio of the two replay rates, with the judge stage's µs per step
each way.

`--hardening` adds the cost of the servers' hardening (difftest/servers/local.py HARDENING: above all
`sanitize-dump-payload yes`, which checks every RDB the AOF's base holds when a server restarts): per
mix, each history replayed on a pair started with it and at once on a pair started without it
(local.RELAXED), and the ratio of the two replay rates.

`--engines` names the ways of drawing measured side by side: `hooks` (strategies/engine.py's hooks,
what campaigns run on the pinned Hypothesis) and `public` (Hypothesis's public API alone, as with
DIFFTEST_ENGINE_HOOKS=0 or another Hypothesis version), each over the same mixes in the same run.

`--campaigns N` adds whole `difftest run --examples N` campaigns (one process each, as a user runs
them): one worker against two, and the docker backend against local when a Docker engine answers.

Usage: python bench/bench_replay.py [--examples N] [--pin] [--engines hooks public] [--replicas]
                                   [--model] [--hardening] [--campaigns N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hypothesis import Phase

from difftest.history.format import History
from difftest.replay.replayer import Replayer
from difftest.servers.local import pin_to_core
from executors.native.adapter import DEFAULT_MODULE
from strategies import engine
from strategies.machine import machine_settings, run_machine
from strategies.shape import HistoryShape

MIXES = {
    "default": HistoryShape(),
    "no-restarts": HistoryShape(restarts=False, crashes=False),
    "calls-only": HistoryShape(restarts=False, crashes=False, corruption=False, users=False,
                               interleaving=False, malformed=False),
}  # fmt: skip
ENGINES = {"hooks": engine.AVAILABLE, "public": frozenset[str]()}
BENCH_SEED = 7  # one fixed seed: the generation-only and compared runs draw the same histories
STAGES = ("generate", "send", "walk", "judge", "restart", "clock", "reset", "resync", "events", "other")


@dataclass
class Figure:
    mix: str
    engine: str
    histories: int
    steps: int
    generate_steps_per_s: float
    compared_steps_per_s: float
    ratio: float
    divergences: int
    us_per_step: dict[str, float] = field(default_factory=dict)  # by stage
    cpu_us_per_step: dict[str, float] = field(default_factory=dict)  # harness, servers, idle (compared run)


@dataclass
class ReplicaCost:
    mix: str
    steps: int
    without_steps_per_s: float
    with_steps_per_s: float
    ratio: float  # with / without, replays alone: 0.8 means replicas cost 20% of the replay rate
    campaign_ratio: float  # the same with generation counted in, as `difftest run`'s compared steps/s
    replica_us_per_step: float  # of which the replica checks themselves (the rest: their servers' starts)
    divergences: int  # with replicas (a propagation divergence counts here)


@dataclass
class ModelCost:
    mix: str
    steps: int
    off_steps_per_s: float
    on_steps_per_s: float
    ratio: float  # on / off, replays alone: 0.9 means the model costs 10% of the replay rate
    judge_off_us_per_step: float  # the judge stage (the model's work is in it)
    judge_on_us_per_step: float
    judged_share: float  # of the steps replayed with it on, the share the model judged
    divergences: int  # with the model on


@dataclass
class Campaign:
    label: str
    workers: int
    backend: str
    exit: int
    steps: int
    elapsed_s: float
    steps_per_s: float


def each_history(shape: HistoryShape, examples: int, body: Callable[[History], None], drawn_by: str = "hooks") -> None:
    """`examples` histories of the machine, from the one fixed seed, each handed to `body`; `drawn_by`
    names the engine's hooks on (`ENGINES`)."""
    with engine.using(ENGINES[drawn_by]):
        run_machine(shape, body, machine_settings(examples, shape.max_steps, phases=[Phase.generate]), seed=BENCH_SEED)


def _run(drawn_by: str, shape: HistoryShape, examples: int, replayer: Replayer | None) -> tuple[int, int, float, int]:
    counts = {"histories": 0, "steps": 0, "divergences": 0}

    def body(history: History) -> None:
        counts["histories"] += 1
        counts["steps"] += len(history.steps)
        if replayer is not None and replayer.replay(history).divergence is not None:
            counts["divergences"] += 1

    started = time.perf_counter()
    each_history(shape, examples, body, drawn_by)
    return counts["histories"], counts["steps"], time.perf_counter() - started, counts["divergences"]


def _process_cpu_s(pid: int, reaped: bool = False) -> float | None:
    """A live process's CPU time (user and system, /proc), None once it is gone; `reaped`: with
    its children's that it has waited for (a zygote's: every server start it forked and reaped)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _servers_cpu(replayer: Replayer) -> dict[int, float]:
    """The CPU of each server process now running and of each zygote with its reaped starts, by pid."""
    cpu: dict[int, float] = {}
    for server in replayer.group.servers:
        for pid, reaped in ((getattr(server, "pid", None), False), (getattr(server, "zygote_pid", None), True)):
            if pid is not None and (used := _process_cpu_s(pid, reaped)) is not None:
                cpu[pid] = used
    return cpu


def measure(mix: str, examples: int, replayer: Replayer, drawn_by: str = "hooks") -> Figure:
    shape = MIXES[mix]
    _, gen_steps, gen_s, _ = _run(drawn_by, shape, examples, None)
    stages = getattr(replayer, "stages", {})  # a checkout from before the counters: all "other"
    before = dict(stages)
    times_before, servers_before = os.times(), _servers_cpu(replayer)
    count, steps, total_s, divergences = _run(drawn_by, shape, examples, replayer)
    times_after, servers_after = os.times(), _servers_cpu(replayer)
    assert steps == gen_steps, "the same seed must give the same histories"
    spent = {stage: stages.get(stage, 0.0) - before.get(stage, 0.0) for stage in STAGES}
    spent["generate"] = gen_s
    spent["other"] = total_s - sum(spent.values())
    generate_rate, compared_rate = gen_steps / gen_s, steps / total_s
    per_step = {stage: round(seconds / steps * 1e6, 1) for stage, seconds in spent.items()}
    ratio = compared_rate / generate_rate
    # CPU, not wall: the harness's own, and the servers' (those running at both ends, those that
    # ended meanwhile (reaped: whole lives, less what they had used before), those started since);
    # what is left of the wall time is the core waiting (sleeps, a server's start-up calibration)
    harness = times_after.user + times_after.system - times_before.user - times_before.system
    reaped = times_after.children_user + times_after.children_system
    reaped -= times_before.children_user + times_before.children_system
    servers = reaped + sum(cpu - servers_before.get(pid, 0.0) for pid, cpu in servers_after.items())
    servers -= sum(cpu for pid, cpu in servers_before.items() if pid not in servers_after)
    cpu = {"harness": harness, "servers": servers, "idle": max(total_s - harness - servers, 0.0)}
    cpu_per_step = {name: round(seconds / steps * 1e6, 1) for name, seconds in cpu.items()}
    return Figure(mix, drawn_by, count, steps, generate_rate, compared_rate, ratio, divergences, per_step,
                  cpu_per_step)  # fmt: skip


def replica_cost(mix: str, examples: int, plain: Replayer, replicated: Replayer) -> ReplicaCost:
    """The same histories compared without and with a replica beside each server: each
    history on one pair, then at once on the other, so the machine's noise falls on both alike."""
    shape = MIXES[mix]
    spent = {"plain": 0.0, "replicated": 0.0}
    counts = {"steps": 0, "divergences": 0}
    before = replicated.stages.get("replicas", 0.0)

    def body(history: History) -> None:
        counts["steps"] += len(history.steps)
        for name, replayer in (("plain", plain), ("replicated", replicated)):
            started = time.perf_counter()
            result = replayer.replay(history)
            spent[name] += time.perf_counter() - started
            if name == "replicated" and result.divergence is not None:
                counts["divergences"] += 1

    started = time.perf_counter()
    each_history(shape, examples, body)
    generate_s = time.perf_counter() - started - spent["plain"] - spent["replicated"]
    steps = counts["steps"]
    checks_s = replicated.stages.get("replicas", 0.0) - before
    without, with_ = steps / spent["plain"], steps / spent["replicated"]
    campaign = (generate_s + spent["plain"]) / (generate_s + spent["replicated"])
    return ReplicaCost(mix, steps, without, with_, with_ / without, campaign, round(checks_s / steps * 1e6, 1),
                       counts["divergences"])  # fmt: skip


@dataclass
class HardeningCost:
    mix: str
    steps: int
    hardened_steps_per_s: float
    relaxed_steps_per_s: float
    ratio: float  # hardened / relaxed, replays alone: 0.97 means the hardening costs 3% of the replay rate


def relaxed_replayer() -> Replayer:
    """A pair whose servers start without the hardening's checks (each server reads the flags once)."""
    from difftest.servers import local

    kept = local.HARDENING
    local.HARDENING = local.RELAXED
    try:
        return Replayer(DEFAULT_MODULE)
    finally:
        local.HARDENING = kept


def hardening_cost(mix: str, examples: int, hardened: Replayer, relaxed: Replayer) -> HardeningCost:
    """The same histories on a hardened and a relaxed pair, alternating which goes first."""
    spent = {"hardened": 0.0, "relaxed": 0.0}
    counts = {"steps": 0, "histories": 0}

    def body(history: History) -> None:
        counts["steps"] += len(history.steps)
        order = [("hardened", hardened), ("relaxed", relaxed)]
        counts["histories"] += 1
        for name, replayer in order if counts["histories"] % 2 else reversed(order):
            started = time.perf_counter()
            replayer.replay(history)
            spent[name] += time.perf_counter() - started

    each_history(MIXES[mix], examples, body)
    steps = counts["steps"]
    hardened_rate, relaxed_rate = steps / spent["hardened"], steps / spent["relaxed"]
    return HardeningCost(mix, steps, round(hardened_rate, 1), round(relaxed_rate, 1),
                         round(hardened_rate / relaxed_rate, 3))  # fmt: skip


def print_hardening_costs(costs: list[HardeningCost]) -> None:
    print(f"\n{'hardening':<12} {'steps':>7} {'hardened steps/s':>17} {'relaxed steps/s':>16} {'ratio':>6}")
    for c in costs:
        print(f"{c.mix:<12} {c.steps:>7} {c.hardened_steps_per_s:>17} {c.relaxed_steps_per_s:>16} {c.ratio:>6}")


def model_cost(mix: str, examples: int, replayer: Replayer) -> ModelCost:
    """The same histories replayed with the spec's model off and on, on one pair, in alternating
    order (so the machine's noise and any warm-up fall on both alike)."""
    from difftest.coverage.labels import MODEL_JUDGED, model_labels
    from difftest.judge import verdicts as judge

    shape = MIXES[mix]
    spent = {False: 0.0, True: 0.0}
    judged = dict.fromkeys((False, True), 0.0)
    counts = {"steps": 0, "divergences": 0, "histories": 0, "judged": 0, "shown": 0}

    def body(history: History) -> None:
        counts["steps"] += len(history.steps)
        counts["histories"] += 1
        order = (False, True) if counts["histories"] % 2 else (True, False)
        for on in order:
            judge.MODEL_ON = on
            stage = replayer.stages.get("judge", 0.0)
            started = time.perf_counter()
            result = replayer.replay(history)
            spent[on] += time.perf_counter() - started
            judged[on] += replayer.stages.get("judge", 0.0) - stage
            if on:
                labels = model_labels(result)
                counts["judged"] += labels[MODEL_JUDGED]
                counts["shown"] += sum(labels.values())
                counts["divergences"] += result.divergence is not None

    try:
        each_history(shape, examples, body)
    finally:
        judge.MODEL_ON = True
    steps = counts["steps"]
    off, on = steps / spent[False], steps / spent[True]
    return ModelCost(mix, steps, off, on, on / off, round(judged[False] / steps * 1e6, 1),
                     round(judged[True] / steps * 1e6, 1), counts["judged"] / max(counts["shown"], 1),
                     counts["divergences"])  # fmt: skip


def print_model_costs(costs: list[ModelCost]) -> None:
    print(f"\n{'model':<12} {'steps':>7} {'off steps/s':>12} {'on steps/s':>11} {'ratio':>6} "
          f"{'judge µs off':>13} {'judge µs on':>12} {'judged':>8} {'div':>4}")  # fmt: skip
    for c in costs:
        print(f"{c.mix:<12} {c.steps:>7} {c.off_steps_per_s:>12.0f} {c.on_steps_per_s:>11.0f} {c.ratio:>6.2f} "
              f"{c.judge_off_us_per_step:>13.1f} {c.judge_on_us_per_step:>12.1f} {c.judged_share:>8.2%} "
              f"{c.divergences:>4}")  # fmt: skip


def print_replica_costs(costs: list[ReplicaCost]) -> None:
    print(f"\n{'replicas':<12} {'steps':>7} {'replay steps/s':>15} {'with replicas':>14} {'ratio':>6} "
          f"{'with generation':>16} {'check µs/step':>14} {'div':>4}")  # fmt: skip
    for c in costs:
        print(f"{c.mix:<12} {c.steps:>7} {c.without_steps_per_s:>15.0f} {c.with_steps_per_s:>14.0f} {c.ratio:>6.2f} "
              f"{c.campaign_ratio:>16.2f} {c.replica_us_per_step:>14.0f} {c.divergences:>4}")  # fmt: skip
    steps = sum(c.steps for c in costs)
    if steps:
        without_s = sum(c.steps / c.without_steps_per_s for c in costs)
        with_s = sum(c.steps / c.with_steps_per_s for c in costs)
        print(f"replicas, all mixes: the replays run at {without_s / with_s:.2f} of their rate without them "
              f"(cost {100 * (1 - without_s / with_s):.0f}%; with generation counted in: per mix, above)")  # fmt: skip


def campaign(label: str, examples: int, workers: int, backend: str) -> Campaign:
    """One `difftest run` as a user runs it (its own process, pinned workers), read from summary.json."""
    with tempfile.TemporaryDirectory(prefix="difftest-bench-") as reports:
        command = [sys.executable, "-m", "difftest", "run", "--examples", str(examples), "--seed", "7",
                   "--no-database", "--workers", str(workers), "--backend", backend, "--reports", reports]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        summaries = list(Path(reports).glob("*/summary.json"))
        summary = json.loads(summaries[0].read_text()) if summaries else {}
    steps, elapsed = int(summary.get("steps", 0)), float(summary.get("elapsed_s", 0.0))
    return Campaign(label, workers, backend, done.returncode, steps, elapsed, steps / elapsed if elapsed else 0.0)


def docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def print_mixes(figures: list[Figure]) -> None:
    header = ("mix", "engine", "histories", "steps", "gen steps/s", "compared steps/s", "ratio", "div")
    widths = (9, 9, 7, 12, 17, 6, 4)
    print(f"{header[0]:<12} " + " ".join(f"{h:>{w}}" for h, w in zip(header[1:], widths, strict=True)))
    for f in figures:
        print(f"{f.mix:<12} {f.engine:>9} {f.histories:>9} {f.steps:>7} {f.generate_steps_per_s:>12.0f} "
              f"{f.compared_steps_per_s:>17.0f} {f.ratio:>6.2f} {f.divergences:>4}")  # fmt: skip
    print("\nµs per step, by stage (the compared rate's inverse is their sum)")
    print(f"{'mix':<12} {'engine':>9} " + " ".join(f"{s:>8}" for s in STAGES) + f" {'total':>8}")
    for f in figures:
        total = sum(f.us_per_step.values())
        print(f"{f.mix:<12} {f.engine:>9} " + " ".join(f"{f.us_per_step[s]:>8.0f}" for s in STAGES)
              + f" {total:>8.0f}")  # fmt: skip
    print("\nCPU per step of the compared run, µs: the harness (generation included), the servers, the core idle")
    print(f"{'mix':<12} {'engine':>9} {'harness':>8} {'servers':>8} {'idle':>8}")
    for f in figures:
        cpu = " ".join(f"{f.cpu_us_per_step.get(part, 0.0):>8.0f}" for part in ("harness", "servers", "idle"))
        print(f"{f.mix:<12} {f.engine:>9} {cpu}")
    by = {(f.mix, f.engine): f for f in figures}
    for mix in dict.fromkeys(f.mix for f in figures):
        hooked, public = by.get((mix, "hooks")), by.get((mix, "public"))
        if hooked and public:
            generated = public.generate_steps_per_s / hooked.generate_steps_per_s
            compared = public.compared_steps_per_s / hooked.compared_steps_per_s
            print(f"{mix}: public / hooks, generation only {generated:.2f}, compared {compared:.2f}; "
                  f"ratio {public.ratio:.2f} against {hooked.ratio:.2f}")  # fmt: skip


def print_campaigns(runs: list[Campaign]) -> None:
    print(f"\n{'campaign':<22} {'workers':>7} {'backend':>8} {'exit':>4} {'steps':>7} {'s':>7} {'steps/s':>8}")
    for r in runs:
        print(f"{r.label:<22} {r.workers:>7} {r.backend:>8} {r.exit:>4} {r.steps:>7} {r.elapsed_s:>7.1f} "
              f"{r.steps_per_s:>8.0f}")  # fmt: skip
    by = {r.label: r.steps_per_s for r in runs}
    if by.get("local, 1 worker"):
        if "local, 2 workers" in by:
            print(f"two workers / one worker: {by['local, 2 workers'] / by['local, 1 worker']:.2f}x")
        if by.get("docker, 1 worker"):
            print(f"local / docker (1 worker): {by['local, 1 worker'] / by['docker, 1 worker']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=300, help="histories per mix")
    parser.add_argument("--pin", action="store_true", help="pin harness and servers to one core")
    parser.add_argument("--core", type=int, default=0, help="which core --pin pins to (default 0)")
    parser.add_argument("--mixes", nargs="*", default=list(MIXES), choices=list(MIXES), help="which mixes")
    parser.add_argument("--replicas", action="store_true",
                        help="also measure the cost of a replica beside each server, per mix (a ratio)")  # fmt: skip
    parser.add_argument("--model", action="store_true",
                        help="also measure the cost of the spec's model, per mix (a ratio: on / off)")  # fmt: skip
    parser.add_argument("--hardening", action="store_true",
                        help="also measure the cost of the servers' hardening flags, per mix (a ratio)")  # fmt: skip
    parser.add_argument("--campaigns", type=int, default=0, metavar="N",
                        help="also time `difftest run --examples N`: 1 and 2 workers, docker and local")  # fmt: skip
    parser.add_argument("--engines", nargs="*", default=["hooks"], choices=list(ENGINES),
                        help="how the machine draws, side by side (default: with the engine's hooks)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    figures: list[Figure] = []
    cores = os.sched_getaffinity(0)  # the campaigns get them back: --pin confines this process only
    if args.mixes:
        if args.pin:
            print(f"pinned to core {pin_to_core(args.core)}")
        with Replayer(DEFAULT_MODULE) as replayer:
            for mix in args.mixes:
                for drawn_by in args.engines:
                    figures.append(measure(mix, args.examples, replayer, drawn_by))
        print_mixes(figures)
    costs: list[ReplicaCost] = []
    if args.mixes and args.replicas:
        with Replayer(DEFAULT_MODULE) as plain, Replayer(DEFAULT_MODULE, replicas=True) as replicated:
            costs = [replica_cost(mix, args.examples, plain, replicated) for mix in args.mixes]
        print_replica_costs(costs)
    model_costs: list[ModelCost] = []
    if args.mixes and args.model:
        with Replayer(DEFAULT_MODULE) as replayer:
            model_costs = [model_cost(mix, args.examples, replayer) for mix in args.mixes]
        print_model_costs(model_costs)
    hardening: list[HardeningCost] = []
    if args.mixes and args.hardening:
        with Replayer(DEFAULT_MODULE) as hardened, relaxed_replayer() as relaxed:
            hardening = [hardening_cost(mix, args.examples, hardened, relaxed) for mix in args.mixes]
        print_hardening_costs(hardening)
    runs: list[Campaign] = []
    if args.campaigns:
        os.sched_setaffinity(0, cores)  # else two workers would share the one pinned core
        runs.append(campaign("local, 1 worker", args.campaigns, 1, "local"))
        runs.append(campaign("local, 2 workers", args.campaigns, 2, "local"))
        if docker_answers():
            runs.append(campaign("docker, 1 worker", args.campaigns, 1, "docker"))
        print_campaigns(runs)
    if args.json:
        document = {"mixes": [asdict(f) for f in figures], "replicas": [asdict(c) for c in costs],
                    "model": [asdict(c) for c in model_costs], "hardening": [asdict(c) for c in hardening],
                    "campaigns": [asdict(r) for r in runs]}  # fmt: skip
        args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
