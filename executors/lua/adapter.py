"""The Lua executor's host: EchoMQ.Jobs ported, guards and the `paused?` read around EVALSHA."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import valkey
from valkey.exceptions import ResponseError

from difftest.calls import Call
from difftest.commands import TRANSITIONS, Layout, meta_key
from difftest.guards import GuardError, check_call
from difftest.problems import SetupProblem
from difftest.replies import ErrorReply, Refused, Reply
from difftest.wire import as_reply


def load_scripts(directory: Path | None = None) -> dict[str, bytes]:
    """Every scripted transition's source, by verb, from `<verb>.lua` files (this package's own,
    or a user's directory with their build of the scripts)."""
    package: Any = resources.files(__package__) if directory is None else directory
    if directory is not None:
        missing = [
            t.script_name for t in TRANSITIONS.values() if t.scripted and not (directory / t.script_name).is_file()
        ]
        if missing:
            raise SetupProblem(
                f"script directory {directory} lacks {', '.join(missing)}: point it at a copy of executors/lua"
            )
    return {verb: package.joinpath(t.script_name).read_bytes() for verb, t in TRANSITIONS.items() if t.scripted}


def reads_as_paused(reply: Reply) -> bool:
    """Jobs.paused?/2: any non-nil reply means paused, an error reply included."""
    return reply is not None


@dataclass(frozen=True)
class PlainCommand:
    """PAUSE and RESUME: the host sends a plain command, no script."""

    command: tuple[bytes, ...]


@dataclass(frozen=True)
class Script:
    """Every other transition: EVALSHA of its script with the call's numkeys, keys and args."""

    verb: str


@dataclass(frozen=True)
class PausedThenClaim:
    """CLAIM: the `paused?` read (`HGET meta paused`) first, the @claim2 script only if nil."""

    paused_read: tuple[bytes, ...]


HostPlan = Refused | PlainCommand | Script | PausedThenClaim


def host_plan(call: Call, guarded: Layout | str | None = None) -> HostPlan:
    """What the host does with a call, decided before anything is sent (pure). `guarded` is the
    guards' outcome when the caller has it already (the call's layout, or the refusal's text)."""
    if guarded is None:
        try:
            guarded = Layout(check_call(call.verb, call.numkeys, call.rest)[0])
        except GuardError as refusal:
            guarded = refusal.message
    if isinstance(guarded, str):
        return Refused(guarded)
    transition = TRANSITIONS[call.verb]
    if transition.reads_meta:
        return PausedThenClaim((b"HGET", guarded.meta, b"paused"))
    if not transition.scripted:
        first, *rest = transition.host_command
        return PlainCommand((first, guarded.meta, *rest))
    return Script(call.verb)


def evalsha_command(sha: str, call: Call) -> tuple[bytes, ...]:
    return (b"EVALSHA", sha.encode(), call.numkeys, *call.rest)


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
        plan = host_plan(call)
        if isinstance(plan, Refused):
            return plan
        if isinstance(plan, PausedThenClaim):
            if reads_as_paused(self._command(*plan.paused_read)):
                return []
            return self.claim_script(call)
        if isinstance(plan, PlainCommand):
            return self._command(*plan.command)
        return self.run_script(call)

    def paused_read(self, queue: bytes) -> Reply:
        """CLAIM's first round trip: `HGET meta paused`, raw."""
        return self._command(b"HGET", meta_key(queue), b"paused")

    def claim_script(self, call: Call) -> Reply:
        """CLAIM's second round trip: the @claim2 script, sent whatever the pause read said."""
        return self.run_script(call)

    def run_script(self, call: Call) -> Reply:
        """EVALSHA; a NOSCRIPT (the cache is empty after a restart) loads the script and retries."""
        command = evalsha_command(self.shas[call.verb], call)
        reply = self._command(*command)
        if isinstance(reply, ErrorReply) and reply.code == "NOSCRIPT":
            self._command(b"SCRIPT", b"LOAD", self.scripts[call.verb])
            reply = self._command(*command)
        return reply

    def _command(self, *parts: bytes | str) -> Reply:
        try:
            return as_reply(self.client.execute_command(*parts))
        except ResponseError as exc:
            return ErrorReply(str(exc))
