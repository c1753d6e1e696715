"""The sides make a history's users on their first use, after every start of a server."""

from __future__ import annotations

import pytest

from difftest.history import format as hist
from difftest.replay.replayer import Replayer
from executors.native.adapter import DEFAULT_MODULE

pytestmark = pytest.mark.servers

USERS = '"users": {"called": ["~emq:*"], "idle": ["~x"]}'
HISTORY = (
    '{"format": "difftest-history", "version": 1, "start_ms": 1000, '
    + USERS
    + """}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j1", "p", 0], "user": "called"}
{"op": "restart"}
{"op": "call", "verb": "ENQUEUE", "queue": "q", "args": ["j2", "p", 0]}
"""
)


def test_only_the_users_a_history_calls_are_made_and_a_restarted_server_makes_them_again_on_use() -> None:
    with Replayer(DEFAULT_MODULE) as replayer:
        result = replayer.replay(hist.loads(HISTORY))
        assert result.ok
        # a restart restarts the native server alone (the Lua server, the reference, keeps its keyspace
        # and its users); no call as a user since
        assert (replayer.lua_server.starts, replayer.native_server.starts) == (1, 2)
        assert replayer.lua_server.client.execute_command("ACL", "USERS") == [b"called", b"default"]
        assert replayer.native_server.client.execute_command("ACL", "USERS") == [b"default"]
        again = HISTORY.replace('"args": ["j2", "p", 0]}', '"args": ["j2", "p", 0], "user": "called"}')
        result = replayer.replay(hist.loads(again))
        assert result.ok and result.records[-1].lua_reply == result.records[-1].native_reply == 1
        for server in replayer.group.servers:
            assert server.client.execute_command("ACL", "USERS") == [b"called", b"default"]
