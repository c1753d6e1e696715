"""The replay's reply reader: every RESP2 type kept apart, and a reply cut anywhere waits for the rest."""

from __future__ import annotations

import pytest
from valkey.exceptions import ResponseError

from difftest.servers.wire import _Incomplete, as_reply, parse_reply
from difftest.spec.replies import ErrorReply, NilArray, Simple

CASES = [
    (b"+OK\r\n", Simple(b"OK")),
    (b"$2\r\nOK\r\n", b"OK"),  # the same bytes as a bulk string: another type
    (b"$0\r\n\r\n", b""),
    (b"$-1\r\n", None),
    (b"*-1\r\n", NilArray()),
    (b"*0\r\n", []),
    (b":-42\r\n", -42),
    (b"$4\r\n\r\n\x00\xff\r\n", b"\r\n\x00\xff"),  # a bulk string holding CR LF: its length decides
    (b"*3\r\n:1\r\n*2\r\n+a\r\n$-1\r\n-ERR inner\r\n", [1, [Simple(b"a"), None], ErrorReply("ERR inner")]),
]


@pytest.mark.parametrize(("wire", "reply"), CASES)
def test_each_type_is_read_as_itself(wire: bytes, reply: object) -> None:
    value, end = parse_reply(wire + b"+next\r\n", 0)
    assert as_reply(value) == reply and end == len(wire)


@pytest.mark.parametrize(("wire", "reply"), CASES)
def test_a_reply_cut_short_is_incomplete(wire: bytes, reply: object) -> None:
    for cut in range(len(wire)):
        with pytest.raises(_Incomplete):
            parse_reply(wire[:cut], 0)


def test_an_error_keeps_its_whole_text() -> None:
    value, _ = parse_reply(b"-NOPERM this user has no permissions\r\n", 0)
    assert isinstance(value, ResponseError) and str(value) == "NOPERM this user has no permissions"


def test_the_packer_packs_as_valkey_py_does() -> None:
    from valkey.connection import Connection

    from difftest.servers.wire import pack_commands

    commands = [(b"SET", "k\u00e9", 7), (b"EVALSHA", b"\x00\xff" * 40, b"0"), (b"DIFFTEST.WALK",), (b"", -12)]
    assert pack_commands(commands) == b"".join(Connection().pack_commands(commands))
