"""Generated mutants of the Lua scripts: the usual mutation operators applied through a real Lua parser.

The scripts are read with luaparser (PyPI, MIT; its ANTLR lexer gives each token's exact offset, its
tree says which calls are statements and what their arguments are). Five operators, as PIT and
Stryker name them:

- `relational`: `==` <-> `~=`, `<` -> `<=`, `<=` -> `<`, `>` -> `>=`, `>=` -> `>` (negation and boundary);
- `arithmetic`: binary `+` <-> `-`, `*` <-> `/`;
- `constant`: each integer literal n -> n + 1 and n - 1, but not the subscripts of KEYS and ARGV (a
  wrong key is refused or misplaced at once, in every history: a cost with nothing to learn);
- `removed-call`: a call that is a statement (`redis.call('HSET', ...)` alone on its line) removed;
- `swapped-argument`: two neighbouring arguments of a call swapped when their texts differ; for
  `redis.call` only those after the key (never the command name nor the key, caught at once as above).

Each mutation changes one token or one span, so the script still parses; every one is checked by
parsing it again, and the test loads each into a real server (`SCRIPT LOAD`). Ids are stable under
edits elsewhere in a script: `lua-<script>-<operator slug>-<k>`, k counting the same slug in the
script in source order (not its line), so the triage (mutants/triage.toml) survives unrelated edits.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RELATIONAL = {"==": "~=", "~=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}
ARITHMETIC = {"+": "-", "-": "+", "*": "/", "/": "*"}
OPERATORS = ("relational", "arithmetic", "constant", "removed-call", "swapped-argument")
_NAMES = {"==": "eq", "~=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "+": "add", "-": "sub",
          "*": "mul", "/": "div"}  # fmt: skip
# a binary minus follows an operand; after anything else a `-` is unary (no binary swap for it)
_OPERAND_END = {"NAME", "INT", "FLOAT", "HEX", "HEX_FLOAT", "CP", "CB", "CCU", "NORMALSTRING", "CHARSTRING",
                "LONGSTRING", "NIL", "TRUE", "FALSE", "DDD"}  # fmt: skip


class LuaParserMissing(RuntimeError):
    """luaparser is not installed (it is a dependency of the project: `make setup` installs it)."""


@dataclass(frozen=True)
class LuaMutation:
    """One mutation of one script: the span [start, stop) of its text replaced."""

    script: str  # the file name, e.g. claim.lua
    operator: str  # one of OPERATORS
    slug: str  # what changed, short: eq-ne, int-1-2, del-hset, swap-zadd-2-3
    ordinal: int  # 1 for the first mutation with this slug in the script (source order)
    line: int
    column: int  # 1-based
    start: int
    stop: int
    original: str
    replacement: str

    @property
    def id(self) -> str:
        return f"lua-{self.script.removesuffix('.lua')}-{self.slug}-{self.ordinal}"

    @property
    def description(self) -> str:
        if self.operator == "removed-call":
            return f"{self.script}:{self.line}: removed the call {self.original}"
        return f"{self.script}:{self.line}:{self.column}: replaced {self.original} with {self.replacement}"

    def apply(self, source: str) -> str:
        return source[: self.start] + self.replacement + source[self.stop :]

    def patch(self, source: str) -> str:
        """A unified diff of the script (paths a/<script>, b/<script>: `patch -p1` in executors/lua)."""
        return "".join(
            difflib.unified_diff(
                source.splitlines(keepends=True),
                self.apply(source).splitlines(keepends=True),
                f"a/{self.script}",
                f"b/{self.script}",
            )
        )


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    start: int
    stop: int  # exclusive
    line: int
    column: int


def _luaparser() -> tuple[Any, Any, Any]:
    try:
        from luaparser import ast, astnodes
        from luaparser.parser.LuaLexer import LuaLexer
    except ImportError as missing:
        raise LuaParserMissing(f"luaparser is not installed ({missing}): run make setup") from None
    return ast, astnodes, LuaLexer


def _tokens(source: str) -> list[_Token]:
    ast, _, lexer = _luaparser()
    stream = ast.get_token_stream(source)
    stream.fill()
    names = lexer.symbolicNames
    return [
        _Token(names[t.type], t.text, t.start, t.stop + 1, t.line, t.column + 1)
        for t in stream.tokens
        if t.type > 0 and t.channel == 0
    ]


def parses(source: str) -> bool:
    """Whether luaparser reads the text as Lua."""
    ast, _, _ = _luaparser()
    try:
        ast.parse(source)
    except Exception:
        return False
    return True


def _calls(source: str, tokens: list[_Token]) -> Iterator[tuple[bool, int, int, list[tuple[int, int]]]]:
    """Each call: (is a statement, the start of its callee, the offset past its `)`, its arguments'
    spans), from the tree's calls and the tokens (the tree's start offsets of statement calls are off)."""
    ast, astnodes, _ = _luaparser()
    tree = ast.parse(source)
    kinds = (astnodes.Call, astnodes.Invoke)
    statements = {
        id(s)
        for block in ast.walk(tree)
        if isinstance(block, astnodes.Block)
        for s in block.body
        if isinstance(s, kinds)
    }
    index = {t.start: i for i, t in enumerate(tokens)}
    for node in ast.walk(tree):
        if not isinstance(node, kinds):
            continue
        close = index[node.stop_char]
        depth, i = 0, close
        while True:  # back to the matching "("
            kind = tokens[i].kind
            depth += kind in ("CP", "CB", "CCU")
            depth -= kind in ("OP", "OB", "OCU")
            if depth == 0:
                break
            i -= 1
        opening = i
        callee = opening - 1  # back over NAME ('.' | ':' NAME)*
        while callee >= 2 and tokens[callee - 1].kind in ("DOT", "COL") and tokens[callee - 2].kind == "NAME":
            callee -= 2
        args: list[tuple[int, int]] = []
        depth, first = 0, opening + 1
        for j in range(opening + 1, close + 1):
            kind = tokens[j].kind
            if kind in ("OP", "OB", "OCU"):
                depth += 1
            elif kind in ("CP", "CB", "CCU") and depth > 0:
                depth -= 1
            elif (kind == "COMMA" and depth == 0) or j == close:
                if j > first:
                    args.append((tokens[first].start, tokens[j - 1].stop))
                first = j + 1
        yield id(node) in statements, tokens[callee].start, tokens[close].stop, args


def _position(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    return line, offset - (source.rfind("\n", 0, offset) + 1) + 1


def _callee_name(source: str, start: int) -> str:
    """The callee's last name, lower case, or for redis.call / redis.pcall its command (hset)."""
    head = source[start : source.index("(", start)]
    if head in ("redis.call", "redis.pcall"):
        rest = source[source.index("(", start) + 1 :].lstrip()
        if rest[:1] in ("'", '"'):
            return rest[1 : rest.index(rest[0], 1)].lower()
    return head.replace(":", ".").rsplit(".", 1)[-1].lower()


def mutations(script: Path) -> list[LuaMutation]:
    """Every mutation of one script, in source order; each parses."""
    source = script.read_text()
    tokens = _tokens(source)
    found: list[tuple[str, str, int, int, str]] = []  # operator, slug, start, stop, replacement
    for i, token in enumerate(tokens):
        before = tokens[i - 1].kind if i else ""
        if token.text in RELATIONAL and token.kind in ("EE", "SQEQ", "LT", "LE", "GT", "GE"):
            new = RELATIONAL[token.text]
            found.append(("relational", f"{_NAMES[token.text]}-{_NAMES[new]}", token.start, token.stop, new))
        elif token.text in ARITHMETIC and token.kind in ("PLUS", "MINUS", "STAR", "SLASH"):
            if token.kind == "MINUS" and before not in _OPERAND_END:
                continue  # unary minus
            new = ARITHMETIC[token.text]
            found.append(("arithmetic", f"{_NAMES[token.text]}-{_NAMES[new]}", token.start, token.stop, new))
        elif token.kind == "INT" and not (before == "OB" and i >= 2 and tokens[i - 2].text in ("KEYS", "ARGV")):
            value = int(token.text)
            for new_value in (value + 1, value - 1):
                text = str(new_value)
                if new_value < 0 and before in _OPERAND_END:
                    text = f"({text})"  # never a binary minus by accident (`x -1` is x minus 1 anyway)
                slug = f"int-{value}-{'plus' if new_value > value else 'minus'}"
                found.append(("constant", slug, token.start, token.stop, text))
    for statement, start, stop, args in _calls(source, tokens):
        name = _callee_name(source, start)
        if statement:
            found.append(("removed-call", f"del-{name}", start, stop, ""))
        first = 2 if source[start:].startswith(("redis.call", "redis.pcall")) else 0
        for k in range(first, len(args) - 1):
            (a0, a1), (b0, b1) = args[k], args[k + 1]
            left, right = source[a0:a1], source[b0:b1]
            if left == right:
                continue
            found.append(("swapped-argument", f"swap-{name}-{k + 1}-{k + 2}", a0, b1,
                          f"{right}{source[a1:b0]}{left}"))  # fmt: skip
    found.sort(key=lambda f: (f[2], OPERATORS.index(f[0]), f[1]))
    seen: Counter[str] = Counter()
    result = []
    for operator, slug, start, stop, replacement in found:
        seen[slug] += 1
        line, column = _position(source, start)
        mutation = LuaMutation(script.name, operator, slug, seen[slug], line, column, start, stop,
                               source[start:stop], replacement)  # fmt: skip
        if not parses(mutation.apply(source)):
            raise AssertionError(f"{mutation.id}: the mutated script does not parse")  # a bug of this module
        result.append(mutation)
    return result


def generate(scripts: Path) -> list[LuaMutation]:
    """Every mutation of every script under `scripts` (executors/lua), by script name."""
    return [m for script in sorted(scripts.glob("*.lua")) for m in mutations(script)]
