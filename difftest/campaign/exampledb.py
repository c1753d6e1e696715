"""Hypothesis's example database from a spec: a local directory, or a Valkey server many machines share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from difftest.base.problems import SetupProblem

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase
    from redis import Redis

ENVIRONMENT = "DIFFTEST_DATABASE"  # the spec `difftest run` uses when --database is not given
DEFAULT_DIRECTORY = Path(".hypothesis") / "difftest-examples"
# valkey:// is what people write; redis-py, which speaks to Valkey, knows the redis:// spelling
_SCHEMES = {"valkey": "redis", "valkeys": "rediss", "redis": "redis", "rediss": "rediss"}
CONNECT_TIMEOUT_S = 5.0  # a server that does not answer is a set-up problem, not a hang


def is_server(spec: str | Path) -> bool:
    return isinstance(spec, str) and urlsplit(spec).scheme in _SCHEMES


def describe(spec: str | Path) -> str:
    """The spec as printed: a server URL without its password, or the directory."""
    if not is_server(spec):
        return str(spec)
    parts = urlsplit(str(spec))
    host = parts.hostname or "localhost"
    return f"{parts.scheme}://{host}:{parts.port or 6379}{parts.path}"


def check_spec(spec: str, origin: str) -> str:
    """The spec when it names a usable database, else a one-line SetupProblem naming `origin` (the
    option or variable it came from): an unknown URL scheme (which would be taken for a directory
    named `http:/...`), or a directory that cannot be made or written (Hypothesis would then save
    nothing, silently). A directory is made here if it is missing."""
    scheme = urlsplit(spec).scheme
    if "://" in spec and scheme not in _SCHEMES:
        raise SetupProblem(f"{origin} {spec!r}: unknown scheme {scheme + '://'!r}; the example database is a "
                           "directory or valkey://HOST:PORT[/DB] (valkeys:// for TLS)")  # fmt: skip
    if is_server(spec):
        return spec
    directory = Path(spec)
    fix = "name a directory you can write, or pass --no-database"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as problem:
        raise SetupProblem(f"{origin} {spec}: cannot make that directory ({problem.strerror}); {fix}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise SetupProblem(f"{origin} {spec}: that directory is not writable; {fix}")
    return spec


def client_of(spec: str) -> Redis:
    from redis import Redis

    parts = urlsplit(spec)
    url = parts._replace(scheme=_SCHEMES[parts.scheme]).geturl()
    try:
        return Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=30.0)
    except ValueError as exc:  # a malformed URL: say which, and the shape that works
        raise SetupProblem(f"example database {spec!r}: {exc}; use valkey://HOST:PORT[/DB]") from None


def open_database(spec: str | Path) -> ExampleDatabase:
    """The database a spec names. Each worker process opens its own (connections do not cross
    processes); examples saved by any worker or machine are replayed first by every other."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    if not is_server(spec):
        return DirectoryBasedExampleDatabase(str(spec))
    from hypothesis.extra.redis import RedisExampleDatabase

    return RedisExampleDatabase(client_of(str(spec)))


def check_database(spec: str | Path) -> None:
    """Raise a one-line SetupProblem unless the database can be used: the server answers PING."""
    if not is_server(spec):
        return
    from redis.exceptions import RedisError

    client = client_of(str(spec))
    try:
        client.ping()
    except RedisError as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SetupProblem(
            f"example database {describe(spec)} does not answer ({detail}): start that server, "
            f"or use another --database (or {ENVIRONMENT}), or --no-database"
        ) from None
    finally:
        client.close()
