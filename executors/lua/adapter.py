"""The Lua executor's host logic: EchoMQ.Jobs ported, guards and the `paused?` read around EVALSHA.

Pure: what the host does with a call (`host_plan`) and how it reads the `paused?` answer. The one
host that sends it all is `difftest.replay.sides.LuaSide`, for the replay and the tests alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from difftest.base.problems import SetupProblem
from difftest.spec.calls import Call
from difftest.spec.commands import TRANSITIONS, Layout
from difftest.spec.guards import GuardError, check_call
from difftest.spec.replies import Refused, Reply


def script_directory(directory: Path | None = None) -> Path:
    """Where the scripts are read from: `directory`, else this package's own (executors/lua)."""
    return directory if directory is not None else Path(__file__).resolve().parent


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
