"""The command table (difftest/spec/commands.py) against what the module registers and the Lua scripts.

The module's key positions must let the server (ACL, cluster routing, COMMAND GETKEYS) find every
declared key: first key 2, last key 1 + numkeys, step 1; neither `write` nor `denyoom` (the
server would refuse before the module runs, where the scripts are refused only at their first
write: docs/contract-decisions.md, "The memory limit"), but `may-replicate`, as EVAL, which COMMAND INFO
does not list (tests/test_conditions.py holds that CLIENT PAUSE WRITE holds them back).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import valkey

from difftest.servers.local import EmbeddedServer
from difftest.spec.commands import TRANSITIONS, queue_keys
from executors.lua.adapter import load_scripts

LUA_DIR = Path(__file__).resolve().parent.parent / "executors" / "lua"


def raw_client(server: EmbeddedServer) -> valkey.Valkey:
    """A client that hands COMMAND replies back unparsed (valkey-py's parser knows only INFO's)."""
    client = server.new_client()
    client.set_response_callback("COMMAND", lambda response, **_: response)
    return client


def command_info(server: EmbeddedServer, name: str) -> list[Any]:
    reply = raw_client(server).execute_command("COMMAND", "INFO", name)
    assert len(reply) == 1 and reply[0] is not None, f"{name} is not registered"
    return list(reply[0])


@pytest.mark.parametrize("verb", list(TRANSITIONS))
def test_command_info_matches_the_table(native_server: EmbeddedServer, verb: str) -> None:
    transition = TRANSITIONS[verb]
    name, _arity, flags, first, last, step = command_info(native_server, transition.native_name)[:6]
    assert name.decode().upper() == transition.native_name
    assert (first, last, step) == (2, 1 + transition.numkeys, 1)
    assert {b"write", b"denyoom"} & set(flags) == transition.server_checked_flags, flags


@pytest.mark.parametrize("verb", list(TRANSITIONS))
def test_getkeys_finds_exactly_the_declared_keys(native_server: EmbeddedServer, verb: str) -> None:
    transition = TRANSITIONS[verb]
    keys = queue_keys(transition, b"q")
    args = [b"1"] * len(transition.args)
    found = raw_client(native_server).execute_command(
        "COMMAND", "GETKEYS", transition.native_name, str(len(keys)), *keys, *args
    )
    assert found == keys


def test_the_module_registers_exactly_the_tables_verbs(native_server: EmbeddedServer) -> None:
    listed = raw_client(native_server).execute_command("COMMAND", "LIST", "FILTERBY", "MODULE", "emq")
    assert {n.decode().upper() for n in listed} == {t.native_name for t in TRANSITIONS.values()}
    everything = raw_client(native_server).execute_command("COMMAND", "LIST")
    emq = {n.decode().upper() for n in everything if n.decode().upper().startswith("EMQ.")}
    assert emq == {t.native_name for t in TRANSITIONS.values()}


def test_a_server_without_the_module_knows_no_emq_command(lua_server: EmbeddedServer) -> None:
    """The control for the tests above: COMMAND INFO of an unknown command answers nil."""
    assert raw_client(lua_server).execute_command("COMMAND", "INFO", "EMQ.CLAIM") == [None]


def test_one_lua_script_per_scripted_transition() -> None:
    scripts = {p.name for p in LUA_DIR.glob("*.lua")}
    scripted = {t.script_name for t in TRANSITIONS.values() if t.scripted}
    assert scripts == scripted
    assert set(load_scripts()) == {v for v, t in TRANSITIONS.items() if t.scripted}
    # PAUSE and RESUME are plain commands on the Lua side: no script of theirs exists
    assert {t.verb for t in TRANSITIONS.values() if not t.scripted} == {"PAUSE", "RESUME"}
