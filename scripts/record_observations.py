"""Record the judge's test material: replay every history of tests/histories/ on real servers and
write what each step observed, with the judge's verdicts, to tests/observations/<name>.jsonl.

Run it after a change to either executor or to the walk (`tests/test_judge_observations.py` says
when the stored files no longer match what the servers do), then read the diff: every verdict in
it is one the judge's tests will hold it to.

    .venv/bin/python scripts/record_observations.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from difftest.history import format as hist
from difftest.replay import observations
from difftest.replay.replayer import Replayer
from executors.native.adapter import DEFAULT_MODULE

ROOT = Path(__file__).resolve().parent.parent
HISTORIES = ROOT / "tests" / "histories"
OBSERVATIONS = ROOT / "tests" / "observations"


def main() -> int:
    OBSERVATIONS.mkdir(exist_ok=True)
    with Replayer(DEFAULT_MODULE) as replayer:
        for path in sorted(HISTORIES.glob("*.jsonl")):
            result = replayer.replay(hist.load(path))
            observations.save(result, OBSERVATIONS / path.name)
            verdict = "agree" if result.ok else f"DIVERGENCE at step {result.divergence.index}"  # type: ignore[union-attr]
            print(f"{path.name}: {len(result.observations)} steps, {dict(result.rules_hit)}, {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
