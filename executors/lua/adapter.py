"""The Lua executor's host: EchoMQ.Jobs ported, guards and the `paused?` read around EVALSHA."""

from __future__ import annotations

import hashlib
from importlib import resources

import valkey
from valkey.exceptions import ResponseError

from difftest.calls import Call
from difftest.commands import TRANSITIONS, meta_key
from difftest.guards import GuardError, check_call
from difftest.replies import ErrorReply, Refused, Reply, as_reply


def load_scripts() -> dict[str, bytes]:
    """Every scripted transition's source, by verb, from this package's `<verb>.lua` files."""
    package = resources.files(__package__)
    return {
        verb: package.joinpath(t.script_name).read_bytes()
        for verb, t in TRANSITIONS.items()
        if t.scripted
    }


def reads_as_paused(reply: Reply) -> bool:
    """Jobs.paused?/2: any non-nil reply means paused, an error reply included."""
    return reply is not None


class LuaHost:
    """Runs calls as the retired host did: refuse bad input locally, then one script per call.

    CLAIM is two round trips (`paused_read`, then `claim_script`); `call` runs both back to back,
    and the engine may split them to let other workers' steps land in between (contract row D1).
    """

    def __init__(self, client: valkey.Valkey, scripts: dict[str, bytes] | None = None) -> None:
        self.client = client
        self.scripts = load_scripts() if scripts is None else scripts
        self.shas = {verb: hashlib.sha1(src).hexdigest() for verb, src in self.scripts.items()}

    def call(self, call: Call) -> Reply:
        try:
            queue, _ = check_call(call.verb, call.numkeys, call.rest)
        except GuardError as refusal:
            return Refused(refusal.message)
        if call.verb == "CLAIM":
            if reads_as_paused(self.paused_read(queue)):
                return []
            return self.claim_script(call)
        if call.verb == "PAUSE":
            return self._command(b"HSET", call.rest[0], b"paused", b"1")
        if call.verb == "RESUME":
            return self._command(b"HDEL", call.rest[0], b"paused")
        return self.run_script(call)

    def paused_read(self, queue: bytes) -> Reply:
        """CLAIM's first round trip: `HGET meta paused`, raw."""
        return self._command(b"HGET", meta_key(queue), b"paused")

    def claim_script(self, call: Call) -> Reply:
        """CLAIM's second round trip: the @claim2 script, sent whatever the pause read said."""
        return self.run_script(call)

    def run_script(self, call: Call) -> Reply:
        """EVALSHA; a NOSCRIPT (the cache is empty after a restart) loads the script and retries."""
        numkeys = int(call.numkeys)
        sha = self.shas[call.verb]
        reply = self._command(b"EVALSHA", sha.encode(), call.numkeys, *call.rest)
        if isinstance(reply, ErrorReply) and reply.code == "NOSCRIPT":
            self._command(b"SCRIPT", b"LOAD", self.scripts[call.verb])
            reply = self._command(b"EVALSHA", sha.encode(), str(numkeys).encode(), *call.rest)
        return reply

    def _command(self, *parts: bytes | str) -> Reply:
        try:
            return as_reply(self.client.execute_command(*parts))
        except ResponseError as exc:
            return ErrorReply(str(exc))
