# The README's two commands: `make run` (the main job) and `make test` (the suite). Both set up first.
.PHONY: setup run test test-fast lint bench

setup:
	@scripts/setup.sh

run: setup
	.venv/bin/python -m difftest run

# cargo's unit tests first (--lib: the crate has no doc tests), then the suite on real servers
test: setup
	cd executors/native && cargo test --lib --quiet
	.venv/bin/python -m pytest -n 2 tests

# the pure tier alone (docs/usage.md, "The test tiers"): no server, cargo, Docker, browser or process; ~half a minute
test-fast: setup
	.venv/bin/python -m pytest -n 2 -m pure tests

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/zizmor --offline --no-progress .github/workflows/
	.venv/bin/actionlint .github/workflows/nightly.yml

bench: setup
	.venv/bin/python bench/bench_replay.py
