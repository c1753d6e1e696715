#!/usr/bin/env bash
# Installs everything difftest needs on a fresh machine of this kind; safe to run again (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

# Debian packages: libclang for the module's bindgen, a C compiler for the servers' frozen clock
# (difftest/servers/c/frozen_clock.c, built on first use), chromium's headless shell for the test that
# renders report.html in a real browser.
need_apt=()
command -v cc >/dev/null || command -v gcc >/dev/null || need_apt+=(gcc)
ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || need_apt+=(chromium-headless-shell)
if [ ${#need_apt[@]} -gt 0 ]; then
    as_root=()
    if [ "$(id -u)" != 0 ]; then
        # a CI runner (GitHub Actions) is not root but has sudo without a password; a person is asked
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            as_root=(sudo -n)
        else
            say "missing Debian packages ${need_apt[*]}: run 'sudo apt-get install -y ${need_apt[*]}' and try again"
            exit 1
        fi
    fi
    say "installing ${need_apt[*]}"
    ${as_root[@]+"${as_root[@]}"} apt-get -o DPkg::Lock::Timeout=600 update -qq
    ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${need_apt[@]}" >/dev/null
fi

# Python: a venv of our own (the system Python is externally managed).
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
    say "installing Python packages"
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[dev]'
    rm -f .venv/.installed-*
    touch "$stamp"
fi

# The toolchain's own llvm-profdata and llvm-cov (rustup's llvm-tools component), which
# `--native-coverage` and its tests read the module's coverage with (Debian's llvm is too old).
if command -v rustup >/dev/null && ! rustup component list --installed 2>/dev/null | grep -q '^llvm-tools'; then
    say "adding the toolchain's llvm-tools (rustup component add llvm-tools)"
    rustup component add llvm-tools >/dev/null 2>&1 \
        || say "could not add llvm-tools: --native-coverage will say how to add them"
fi

# The native module: a plain release build (see docs: cargo test features must not reach it).
if [ -f executors/native/Cargo.toml ]; then
    say "building the native module (cargo build --release)"
    cargo build --release --quiet --manifest-path executors/native/Cargo.toml
fi
# The walker module (DIFFTEST.WALK) every test server loads: built from its own directory, so that
# its .cargo/config.toml puts it in the native crate's target dir (the dependencies compiled once).
if [ -f difftest/servers/walker-crate/Cargo.toml ]; then
    say "building the walker module (cargo build --release in difftest/servers/walker-crate)"
    (cd difftest/servers/walker-crate && cargo build --release --quiet)
fi

# The compose pair's two images (docker-compose.yml), built here FROM scratch, and its clock file:
# then a plain `docker compose up -d` works. Only when a Docker engine answers; the local backend
# needs none of it, so a failure here is reported and set-up goes on.
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    say "building the server images for docker-compose.yml (difftest servers build)"
    .venv/bin/difftest servers build >/dev/null \
        || say "could not build the server images: 'difftest servers up' will say why"
fi
