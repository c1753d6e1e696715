"""A raw step sends only data commands of the history's keys: the allow-list is Valkey's own flags
(asked of the server again here), and every other command is refused at load, one line, exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.cli.main import EXIT_SETUP, main
from difftest.history import format as hist
from difftest.history.rawcommands import CONTAINERS, DATA_COMMANDS, FORBIDDEN_CATEGORIES, WIPES, raw_command_name
from difftest.servers.local import EmbeddedServer
from difftest.servers.wire import Wire
from difftest.spec.replies import Simple
from strategies.corpus import class_corpus
from strategies.machine import HistoryShape, machine_settings, run_machine

HEADER = '{"format": "difftest-history", "version": 1, "start_ms": 1000}\n'
# the commands issue 38 names, each of which a history once sent to both servers
ESCAPES = [
    ["MIGRATE", "127.0.0.1", "9", "emq:{q}:x", "0", "100"],
    ["RESTORE", "emq:{q}:y", "0", "\u0000payload"],
    ["CONFIG", "GET", "dir"],
    ["SCRIPT", "LOAD", "return 1"],
    ["CLIENT", "LIST"],
    ["EVAL", "return 1", "0"],
    ["FUNCTION", "LIST"],
    ["MODULE", "LIST"],
    ["DEBUG", "SLEEP", "0"],
    ["SORT", "emq:{q}:pending", "GET", "*"],
    ["SWAPDB", "0", "1"],
    ["KEYS", "*"],
]


def _text(value: object) -> str:
    if isinstance(value, Simple):
        value = value.value
    return value.decode() if isinstance(value, bytes) else str(value)


def _server_data_commands(wire: Wire) -> set[str]:
    """The rule of difftest/history/rawcommands.py applied to what the server says of its commands."""
    found: set[str] = set()

    def walk(entry: list[object]) -> None:
        flags = {_text(f) for f in entry[2]}  # type: ignore[attr-defined]
        categories = {_text(c) for c in entry[6]}  # type: ignore[attr-defined]
        subcommands = entry[9] if len(entry) > 9 else []
        if subcommands:
            for sub in subcommands:  # type: ignore[attr-defined]
                walk(sub)
            return
        keyed = entry[3] != 0 or "movablekeys" in flags
        if ("write" in flags or "readonly" in flags) and keyed and not categories & set(FORBIDDEN_CATEGORIES):
            found.add(_text(entry[0]).upper().replace("|", " "))

    for entry in wire.call(b"COMMAND", b"INFO"):  # type: ignore[union-attr]
        if entry:
            walk(entry)
    return found


@pytest.fixture
def server_wire(lua_server: EmbeddedServer) -> Iterator[Wire]:
    wire = Wire(lua_server.address)
    yield wire
    wire.close()


def test_the_allow_list_is_the_servers_own_data_commands(server_wire: Wire) -> None:
    assert _server_data_commands(server_wire) == set(DATA_COMMANDS)
    # the two wipes are the only others, and the server has them
    entries = [e for e in server_wire.call(b"COMMAND", b"INFO") if e]  # type: ignore[union-attr]
    assert {_text(e[0]).upper() for e in entries} >= WIPES and not WIPES & DATA_COMMANDS
    assert {_text(e[0]).upper() for e in entries if len(e) > 9 and e[9]} == CONTAINERS


@pytest.mark.parametrize("command", ESCAPES, ids=lambda c: " ".join(c[:2]))
def test_a_command_that_reaches_past_the_keys_is_refused_at_load_in_one_line(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(HEADER + json.dumps({"op": "raw", "command": command}) + "\n")
    with pytest.raises(hist.HistoryError) as refused:
        hist.load(path)
    assert "is not a data command" in str(refused.value) and ":2 field 'command'" in str(refused.value)
    code = main(["replay", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_SETUP and len(err) == 1 and "is not a data command" in err[0]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.sampled_from(sorted(DATA_COMMANDS | WIPES)).map(lambda n: n.split(" ")),
        st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3),
        st.sampled_from([e for e in ESCAPES]),
    )
)
def test_no_raw_step_names_a_command_outside_the_allow_list(command: list[str]) -> None:
    line = {"op": "raw", "command": command}
    try:
        loaded = hist.loads(HEADER + json.dumps(line) + "\n")
    except hist.HistoryError:
        return
    (step,) = loaded.steps
    assert isinstance(step, hist.RawWrite)
    assert raw_command_name(step.command) in DATA_COMMANDS | WIPES


def test_the_generators_and_the_corpus_raw_steps_all_load() -> None:
    commands: set[str] = set()

    def on_history(history: hist.History) -> None:
        hist.loads(hist.dumps(history))  # every raw step of it loads
        commands.update(raw_command_name(s.command) for s in history.steps if isinstance(s, hist.RawWrite))

    run_machine(HistoryShape(), on_history, machine_settings(300, 40), seed=4243)
    for history in class_corpus(sizes=False):
        on_history(history)
    assert {"HSET", "SET", "DEL", "ZADD", "PEXPIRE"} <= commands <= DATA_COMMANDS | WIPES
