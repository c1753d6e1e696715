"""`difftest run --lua-coverage`: an instrumented copy of the scripts logs the lines each call ran.

It must change nothing the scripts write or answer: every hand-written history and the scenario
still agree with the native executor under the contract with the instrumented scripts (the judge
compares replies and whole keyspaces), and the same calls on two servers, one with the scripts and
one with their instrumented copy, leave the same keyspaces and replies (error codes included). A
script that stops at an error reports the lines it ran before it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from difftest.cli.main import EXIT_OK, EXIT_SETUP, main
from difftest.coverage import lua as lua_coverage
from difftest.history import format as hist
from difftest.history.scenario import SCENARIO
from difftest.replay.replayer import Replayer
from difftest.servers.group import ServerGroup
from difftest.servers.wire import Wire
from difftest.spec.replies import ErrorReply
from difftest.spec.snapshot import take_snapshot
from executors.lua import instrument as lua_instrument
from executors.lua.adapter import load_scripts
from executors.native.adapter import DEFAULT_MODULE
from tests.helpers import Q

HISTORIES = Path(__file__).parent / "histories"


def test_the_statement_lines_of_a_script() -> None:
    source = """-- a comment
local t = redis.call('TIME')
local x = {1,
  2}
if x then
  return {}
elseif t then return 1
else
  redis.call('SET', 'k',
    'v')
end
"""
    assert lua_instrument.countable_lines(source) == [2, 3, 5, 6, 9]  # no mark can go before elseif
    counts = lua_instrument.parse_log(
        b"1:M * difftest-lua-coverage claim 4,5,6\nother\n1:M * difftest-lua-coverage claim 4\n"
    )
    assert counts == {("claim", 4): 2, ("claim", 5): 1, ("claim", 6): 1}


def test_the_instrumented_scripts_write_and_answer_what_the_scripts_do(group: ServerGroup) -> None:
    scripts = load_scripts()
    plain, marked = group.add("plain"), group.add("marked")
    sides = {plain: scripts, marked: lua_instrument.instrumented(scripts)}
    keys = [Q + suffix for suffix in ("pending", "active", "", "done")]
    calls = [
        ("ENQUEUE", [Q + "pending", Q + "delayed", Q], ["j1", "p", "0"]),
        ("ENQUEUE", [Q + "pending", Q + "delayed", Q], ["j2", "p", "0"]),
        ("CLAIM", keys[:3], ["100"]),
        ("COMPLETE", [Q + "active", Q + "done", Q], ["j1", "1"]),
        ("SET", [Q + "active"], ["junk"]),  # a plain write: active is not a zset (D5's state)
        ("CLAIM", keys[:3], ["100"]),  # pops j2, writes its row, then WRONGTYPE at ZADD
        ("CLAIM", keys[:3], ["100"]),  # nothing pending: answers empty
    ]
    seen = {}
    for server, sources in sides.items():
        wire = Wire(server.address)
        shas = {verb: wire.call(b"SCRIPT", b"LOAD", source) for verb, source in sources.items()}
        replies = []
        for verb, call_keys, args in calls:
            if verb == "SET":
                replies.append(wire.call(verb, *call_keys, *args))
            else:
                replies.append(wire.call(b"EVALSHA", shas[verb], str(len(call_keys)), *call_keys, *args))  # type: ignore[arg-type]
        seen[server.name] = replies
        wire.close()
    first, second = seen["plain"], seen["marked"]
    assert len(first) == len(second)
    assert first == second  # byte for byte, the error replies' texts and locations included
    assert isinstance(first[5], ErrorReply) and first[5].message.startswith("WRONGTYPE")
    assert take_snapshot(plain.client) == take_snapshot(marked.client)
    # the failed claim reported the lines up to its failing ZADD (line 17), not its return (line 18)
    counts = lua_instrument.parse_log(marked.logfile.read_bytes())
    assert counts[("claim", 17)] == 2 and counts[("claim", 18)] == 1 and counts[("claim", 4)] == 3
    assert not lua_instrument.parse_log(plain.logfile.read_bytes())


@pytest.mark.servers
@pytest.mark.timeout(300)
def test_every_hand_history_and_the_scenario_agree_with_the_instrumented_scripts(tmp_path: Path) -> None:
    with lua_instrument.measuring(tmp_path), Replayer(DEFAULT_MODULE) as replayer:
        assert b"difftest-lua-coverage" in replayer.scripts["CLAIM"]
        for history in [*(hist.load(path) for path in sorted(HISTORIES.glob("*.jsonl"))), SCENARIO]:
            result = replayer.replay(history)
            assert result.divergence is None, (history.note, result.divergence and result.divergence.reason)
    document = lua_coverage.collect(tmp_path)
    assert document["replayers"] == 1 and not (tmp_path / lua_instrument.RAW_DIR).exists()
    by_file = {entry["file"]: entry for entry in document["files"]}
    assert set(by_file) == {f"{verb.lower()}.lua" for verb in load_scripts()}
    assert all(entry["lines"]["reached"] > 0 for entry in by_file.values())
    assert 0 < document["totals"]["lines"]["reached"] <= document["totals"]["lines"]["total"]
    # outside a measured campaign the scripts are the plain ones
    with Replayer(DEFAULT_MODULE) as plain:
        assert plain.scripts == load_scripts()


@pytest.mark.servers
@pytest.mark.timeout(300)
def test_a_campaign_reports_lua_coverage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--lua-coverage", "--examples", "40", "--seed", "4", "--workers", "1", "--no-database",
            "--reports", str(tmp_path)]  # fmt: skip
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    assert "Lua script coverage: lines" in out
    (run,) = tmp_path.iterdir()
    document = json.loads((run / lua_coverage.JSON_FILE).read_text())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["lua_coverage"] == document and document["totals"]["lines"]["reached"] > 0
    assert "Lua script coverage" in (run / "report.html").read_text()
    code = main(["run", "--lua-coverage", "--backend", "docker", "--examples", "1", "--reports", str(tmp_path)])
    assert code == EXIT_SETUP and "--lua-coverage reads the Lua servers' logs" in capsys.readouterr().err


@pytest.mark.servers
@pytest.mark.timeout(300)
def test_merge_sums_the_shards_lua_coverage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shards = []
    for index in (1, 2):
        reports = tmp_path / f"shard-{index}"
        argv = ["run", "--lua-coverage", "--seed", "6", "--examples", "80", "--shard", f"{index}/2", "--workers",
                "1", "--no-database", "--reports", str(reports)]  # fmt: skip
        assert main(argv) == EXIT_OK, capsys.readouterr()
        (run,) = reports.iterdir()
        shards.append(json.loads((run / lua_coverage.JSON_FILE).read_text()))
        shards[-1]["dir"] = str(run)
    merged = tmp_path / "merged"
    assert main(["merge", str(merged), *(shard["dir"] for shard in shards)]) == EXIT_OK
    whole = json.loads((merged / lua_coverage.JSON_FILE).read_text())

    def unreached(document: dict[str, Any]) -> set[tuple[str, int]]:
        return {(group["file"], n) for group in document["unreached"] for n, _ in group["lines"]}

    assert unreached(whole) == unreached(shards[0]) & unreached(shards[1])
    calls = sum(count for _, _, count in whole["counts"])
    assert calls == sum(count for shard in shards for _, _, count in shard["counts"]) > 0
    assert json.loads((merged / "summary.json").read_text())["lua_coverage"] == whole
