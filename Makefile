# The README's two commands: `make run` (the main job) and `make test` (the suite). Both set up first.
.PHONY: setup run test lint

setup:
	@scripts/setup.sh

run: setup
	.venv/bin/python -m difftest run

test: setup
	.venv/bin/python -m pytest -n 2 tests
	@if [ -f executors/native/Cargo.toml ]; then cd executors/native && cargo test --quiet; fi

lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy
