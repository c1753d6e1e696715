"""Reading .github/workflows/nightly.yml as GitHub runs it: its jobs, their matrices, each step with the
environment it sees, and `${{ ... }}` expressions evaluated the way the runner would for one matrix leg
(the subset the workflow uses: names, 'literals', `a || b`, fromJSON(...))."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from difftest.report.nightly import plan

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"


def load() -> dict[Any, Any]:
    document = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(document, dict)
    return document


def triggers(document: dict[Any, Any]) -> dict[str, Any]:
    # YAML 1.1 (PyYAML) reads the bare key `on` as the boolean True
    found = document.get("on", document.get(True))
    assert isinstance(found, dict)
    return found


def input_defaults(document: dict[Any, Any]) -> dict[str, str]:
    inputs = triggers(document).get("workflow_dispatch", {}).get("inputs", {})
    return {name: str(spec.get("default", "")) for name, spec in inputs.items()}


def _term(text: str, context: dict[str, Any]) -> Any:
    text = text.strip()
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1]
    call = re.fullmatch(r"fromJSON\((.*)\)", text)
    if call:
        value = evaluate(call.group(1), context)
        return json.loads(value) if isinstance(value, str) and value else value
    assert re.fullmatch(r"[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*", text), (
        f"an expression this reader cannot evaluate: {text!r}"
    )
    value: Any = context
    for part in text.split("."):
        if not isinstance(value, dict) or part not in value:
            return ""
        value = value[part]
    return value


def evaluate(expression: str, context: dict[str, Any]) -> Any:
    """`a || b || 'c'`: the first term that is not empty (GitHub's falsy: '', null, false, 0)."""
    value: Any = ""
    for term in expression.split("||"):
        value = _term(term, context)
        if value not in ("", None, False, 0):
            return value
    return value


def substitute(text: str, context: dict[str, Any]) -> str:
    """Every `${{ ... }}` in a string replaced by its value."""

    def one(match: re.Match[str]) -> str:
        value = evaluate(match.group(1), context)
        return value if isinstance(value, str) else json.dumps(value)

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def plan_outputs(document: dict[Any, Any], inputs: dict[str, str] | None = None) -> dict[str, str]:
    """What the plan job would output for these inputs (default: the workflow's defaults), by the
    same function its command runs; a fixed seed for the random default."""
    given = {**input_defaults(document), **(inputs or {})}
    seed = int(given["seed"]) if given.get("seed", "random").isdigit() else 1
    return plan(
        int(given["campaign_shards"]),
        int(given["mutant_shards"]),
        given["valkey"].split(),
        seed,
        int(given["generated_shards"]),
    )


def matrix_legs(job: dict[str, Any], context: dict[str, Any]) -> list[dict[str, str]]:
    """Each leg of a job's matrix (an `include` list, or the product of one axis); [{}] without one."""
    matrix = job.get("strategy", {}).get("matrix")
    if matrix is None:
        return [{}]
    if isinstance(matrix, str):
        matrix = evaluate(matrix.strip().removeprefix("${{").removesuffix("}}"), context)
    assert isinstance(matrix, dict), matrix
    if "include" in matrix:
        return [dict(entry) for entry in matrix["include"]]
    ((axis, values),) = matrix.items()
    return [{axis: str(value)} for value in values]


def context_for(document: dict[Any, Any], inputs: dict[str, str], outputs: dict[str, str],
                matrix: dict[str, str], run_id: str = "1") -> dict[str, Any]:  # fmt: skip
    return {"inputs": inputs, "needs": {"plan": {"outputs": outputs}}, "matrix": matrix, "github": {"run_id": run_id}}


def environment(document: dict[Any, Any], job: dict[str, Any], step: dict[str, Any],
                context: dict[str, Any]) -> dict[str, str]:  # fmt: skip
    """The step's environment (workflow, job and step `env:`, the innermost winning), evaluated."""
    env = {**document.get("env", {}), **job.get("env", {}), **step.get("env", {})}
    return {name: substitute(str(value), context) for name, value in env.items()}


KNOWN_OK = "python -m difftest.report.nightly known-ok "  # runs the command after it, its exit 6 read as a pass


def commands(script: str) -> list[str]:
    """The shell commands of a `run:` block: one a line, continuations joined, comments dropped; a
    command run through `nightly known-ok` is the command it runs (the wrapper is tested apart)."""
    joined = re.sub(r"\\\n\s*", " ", script)
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [line.removeprefix(KNOWN_OK) for line in lines]


def expand(command: str, env: dict[str, str]) -> str:
    """$NAME and ${NAME} from the step's environment (which the workflow must set)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in env, f"{command!r} uses ${name}, which the workflow does not set"
        return env[name]

    return re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", value, command)


def job_commands(document: dict[Any, Any], name: str, inputs: dict[str, str] | None = None,
                 leg: int = 0) -> list[tuple[dict[str, Any], str, dict[str, str]]]:  # fmt: skip
    """(step, command as written, environment) for every command of a job's matrix leg `leg`."""
    given = {**input_defaults(document), **(inputs or {})}
    outputs = plan_outputs(document, given)
    job = document["jobs"][name]
    matrix = matrix_legs(job, context_for(document, given, outputs, {}))[leg]
    context = context_for(document, given, outputs, matrix)
    found = []
    for step in job["steps"]:
        if "run" in step:
            env = environment(document, job, step, context)
            found.extend((step, command, env) for command in commands(step["run"]))
    return found


def every_command(document: dict[Any, Any]) -> list[tuple[str, str]]:
    """(as written, as run with the defaults' first matrix leg) for every command of every job."""
    return [
        (command, expand(command, env)) for name in document["jobs"] for _, command, env in job_commands(document, name)
    ]


def words(command: str) -> list[str]:
    return shlex.split(command)


@contextlib.contextmanager
def artifacts_api(listing: dict[str, Any] | None, status: int = 200) -> Iterator[str]:
    """A stand-in for GitHub's REST API on 127.0.0.1, answering GET /repos/OWNER/NAME/actions/artifacts with
    `listing` (GitHub's documented shape: {"total_count", "artifacts": [{"id", "name", "expired", "created_at",
    "workflow_run": {"id"}}]}, filtered by ?name= as GitHub does) or with `status`; yields its base URL
    (what $GITHUB_API_URL holds on a runner). GitHub is the one outside service the nightly talks to; this
    stands in for it, never for Valkey."""
    import threading
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parsed = urllib.parse.urlparse(self.path)
            name = urllib.parse.parse_qs(parsed.query).get("name", [None])[0]
            if status != 200 or not re.fullmatch(r"/repos/[^/]+/[^/]+/actions/artifacts", parsed.path):
                self.send_response(status if status != 200 else 404)
                self.end_headers()
                return
            found = [a for a in (listing or {}).get("artifacts", []) if name is None or a.get("name") == name]
            body = json.dumps({"total_count": len(found), "artifacts": found}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
