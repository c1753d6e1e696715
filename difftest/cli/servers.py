"""`difftest servers up|down|build`: the long-lived compose pair of docker-compose.yml."""

from __future__ import annotations

import argparse
import os

from difftest.base.exits import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_IOERR,
    EXIT_MEANINGS,
    EXIT_OK,
    EXIT_SETUP,
    EXIT_TERMINATED,
    OneLineParser,
)
from difftest.base.problems import SetupProblem
from difftest.cli.arguments import module_file, subcommand


def command_servers(args: argparse.Namespace) -> int:
    """`difftest servers up|down|build`: the long-lived pair of docker-compose.yml."""
    from difftest.servers import compose

    settings = compose.settings_from(os.environ, args.project)
    if args.action == "build":
        images = compose.build(settings, args.module)
        print(f"images: lua {images['lua']}, native {images['native']} (tagged as docker-compose.yml's defaults)")
        print(f"clock: {settings.clock_dir / compose.CLOCK_FILE}; now 'docker compose up -d' starts the pair")
        return EXIT_OK
    if args.action == "up":
        addresses = compose.up(settings, args.module)
        print(f"servers: compose project {settings.project} is up")
        for service, address in addresses.items():
            print(f"  {service:<7} {address}")
        print(f"  clock   {settings.clock_dir / compose.CLOCK_FILE}")
        from difftest.replay.build import command

        named = [] if settings.project == compose.DEFAULT_PROJECT else [settings.project]
        down = command("servers", "down", *(["--project", *named] if named else []))
        print(f"replay on them: {command('run', '--attach', *named)}; remove them: {down}")
        return EXIT_OK
    left = compose.down(settings)
    if left:
        raise SetupProblem(f"compose down left {', '.join(left)}: remove them with docker rm / network rm / volume rm")
    print(f"servers: compose project {settings.project} removed (containers, network, data volumes)")
    return EXIT_OK


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    """`servers`'s page: the action, the native image's module, the compose project."""
    from executors.native.adapter import DEFAULT_MODULE

    servers = subcommand(
        commands, "servers", "the long-lived compose pair (docker-compose.yml): up, down, build",
        """Manage the pair of docker-compose.yml: a Lua-script server and a native-module server on fixed
        loopback ports (DIFFTEST_LUA_PORT, default 7701; DIFFTEST_NATIVE_PORT, default 7702), on a private
        network, with data volumes and the shared frozen clock. `up` builds the two images here (FROM
        scratch, no registry), runs docker compose up -d, waits until both answer PING and prints their
        addresses; `run`, `replay` and `scenario` with --attach then replay on it. `down` removes the
        containers, the network and the volumes. `build` only builds the images and the clock file, so
        that a plain `docker compose up -d` works (make setup runs it when a Docker engine answers).""",
        [
            "difftest servers up",
            "difftest servers up --module my-build/libemq_native.so   # refresh the native server",
            "difftest run --attach --seconds 600",
            "DIFFTEST_LUA_PORT=8801 DIFFTEST_NATIVE_PORT=8802 difftest servers up --project mine",
            "difftest servers down",
        ],
        {EXIT_OK: "done", EXIT_SETUP: EXIT_MEANINGS[EXIT_SETUP], EXIT_INTERNAL: EXIT_MEANINGS[EXIT_INTERNAL],
         EXIT_IOERR: "the machine refused a write (the images' files, the clock file): one line",
         EXIT_INTERRUPTED: "interrupted: a half-made pair removed", EXIT_TERMINATED: "terminated (SIGTERM): as 130"},
    )  # fmt: skip
    servers.add_argument("action", choices=("up", "down", "build"), help="what to do with the pair")
    servers.add_argument("--module", type=module_file, default=DEFAULT_MODULE,
                         help="the native image's module (default: this checkout's release build)")  # fmt: skip
    servers.add_argument("--project", default=None,
                         help="the compose project (default: $COMPOSE_PROJECT_NAME, else difftest)")  # fmt: skip
