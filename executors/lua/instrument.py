"""The Lua scripts instrumented for line coverage (`difftest run --lua-coverage`), and the channel
their counts travel by: the executor's side of Lua coverage, which the replay loads and harvests.
What the counts add up to, and how a report shows them, is difftest/coverage/lua.py.

A copy of the scripts is instrumented at the source: each line that starts a statement gets a mark
in front of it (`__h[12]=true`), the script's body runs as a function under `pcall`, and at the end
the script logs the lines it marked to the server's log (`redis.log`, one line per call) and then
returns the body's reply, or its error as the same reply: `pcall` hands a `redis.call` error over as
its message, so it is answered as that error reply with the location Valkey appends (`script: on
@user_script:<line>.`, the line of the last statement begun), and a Lua error is raised again as
it was. Byte for byte the replies of the scripts (tests/test_lua_coverage.py).
What the scripts write is untouched: no key, no extra command in the replication stream or the
AOF, no ACL check (a restricted caller's script would be refused a coverage key), and a script that
stops at an error still reports the lines it ran, the error-after-write paths of D3-D5, D8 and D9
included. The two channels the issue offered were not honest here (docs/design-notes.md, "Lua script
coverage"): a reply cannot carry the lines of a script that ended in an error, and a key is a write
a restricted user is refused, that FLUSHALL and the re-sync wipe, and that the AOF and replicas see.
Each replayer reads its Lua server's log when it closes (servers restarted and crashed meanwhile
kept appending to it) and writes the counts to the run's directory (`harvest`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from difftest.base.environment import variable_set
from difftest.base.files import write_atomically

ENVIRONMENT = "DIFFTEST_LUA_COVERAGE"  # the directory each replayer writes its counts to
MARK = "difftest-lua-coverage"  # how a script's log line starts
RAW_DIR = "lua-counts"
# a line that does not start a statement: a block's end or next branch, or a continued expression
_NOT_A_STATEMENT = re.compile(r"^(end|else|elseif|until|then|do|and|or)\b|^[)}\].,+*/%^<>=~-]|^\.\.")
_CONTINUES = re.compile(r"(,|\(|\{|\[|\.\.|=|\+|-|\*|/|%|\^|<|>|\band|\bor|\bnot)\s*$")
_LOGGED = re.compile(rb"difftest-lua-coverage (\w+) ([\d,]*)")


# ---- instrumenting the scripts (pure) -------------------------------------------------------------------


def _code(line: str) -> str:
    """The line without a trailing comment (the scripts keep no `--` inside strings)."""
    return line.split("--", 1)[0].rstrip()


def countable_lines(source: str) -> list[int]:
    """The line numbers that start a statement: the lines a mark goes in front of."""
    numbers, continued = [], False
    for number, line in enumerate(source.splitlines(), start=1):
        code = _code(line).strip()
        if not code:
            continue
        if not continued and not _NOT_A_STATEMENT.match(code):
            numbers.append(number)
        continued = bool(_CONTINUES.search(code))
    return numbers


def instrument(verb: str, source: bytes) -> bytes:
    """The script with a mark in front of every statement line, run under pcall, logging the marked
    lines before it answers or raises; line numbers and everything it calls are unchanged."""
    text = source.decode()
    marked = set(countable_lines(text))
    lines = [f"__at={n} __h[{n}]=true {line}" if n in marked else line
             for n, line in enumerate(text.splitlines(), start=1)]  # fmt: skip
    # the prologue shares the first line, so that an error's line number is the original script's
    prologue = "local __h, __at = {}, 0 local function __body() "
    epilogue = f"""
end
local __ok, __r = pcall(__body)
local __lines = {{}}
for __n in pairs(__h) do __lines[#__lines + 1] = __n end
redis.log(redis.LOG_WARNING, '{MARK} {verb.lower()} ' .. table.concat(__lines, ','))
if __ok then return __r end
if type(__r) == 'string' and not string.find(__r, '^user_script:%d+:') then
  return redis.error_reply(__r .. ' script: on @user_script:' .. __at .. '.')
end
error(__r, 0)
"""
    return (prologue + "\n".join(lines) + epilogue).encode()


def instrumented(scripts: dict[str, bytes]) -> dict[str, bytes]:
    """Every script instrumented (by verb, as executors/lua/adapter.load_scripts gives them)."""
    return {verb: instrument(verb, source) for verb, source in scripts.items()}


def scripts_for_replay(scripts: dict[str, bytes]) -> dict[str, bytes]:
    """The scripts a replayer loads: instrumented while a campaign measures Lua coverage."""
    return instrumented(scripts) if os.environ.get(ENVIRONMENT) else scripts


def parse_log(text: bytes) -> Counter[tuple[str, int]]:
    """How many calls reached each (script, line), from a server log's coverage lines."""
    counts: Counter[tuple[str, int]] = Counter()
    for verb, numbers in _LOGGED.findall(text):
        for number in filter(None, numbers.split(b",")):
            counts[(verb.decode(), int(number))] += 1
    return counts


# ---- a campaign's counts (I/O) --------------------------------------------------------------------------


@contextlib.contextmanager
def measuring(run_dir: Path) -> Iterator[Path]:
    """DIFFTEST_LUA_COVERAGE for the block: every replayer made in it (workers inherit the
    environment) loads the instrumented scripts and leaves its counts under run_dir/lua-counts/."""
    raw = (run_dir / RAW_DIR).absolute()
    raw.mkdir(parents=True, exist_ok=True)
    with variable_set(ENVIRONMENT, str(raw)):
        yield raw


def harvest(logfile: Path) -> None:
    """A replayer's Lua server log read for coverage lines, the counts written to the run's directory
    (nothing while no campaign measures)."""
    out = os.environ.get(ENVIRONMENT)
    if not out or not logfile.is_file():
        return
    counts = parse_log(logfile.read_bytes())
    rows = [[verb, line, count] for (verb, line), count in sorted(counts.items())]
    target = Path(out) / f"counts-{os.getpid()}-{id(logfile)}.json"
    write_atomically(target, json.dumps(rows) + "\n")
