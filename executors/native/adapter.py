"""The native executor's adapter: one EMQ.<VERB> command per call, the reply taken as it comes."""

from __future__ import annotations

from pathlib import Path

import valkey
from valkey.exceptions import ResponseError

from difftest.calls import Call
from difftest.replies import ErrorReply, Reply
from difftest.wire import as_reply

CRATE_DIR = Path(__file__).resolve().parent
DEFAULT_MODULE = CRATE_DIR / "target" / "release" / "libemq_native.so"


class NativeModule:
    """Sends each call as the module command; the module does its own argument checks."""

    def __init__(self, client: valkey.Valkey) -> None:
        self.client = client

    def call(self, call: Call) -> Reply:
        try:
            return as_reply(self.client.execute_command(*call.command()))
        except ResponseError as exc:
            return ErrorReply(str(exc))
