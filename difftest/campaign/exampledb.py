"""Hypothesis's example database from a spec: a local directory, or a Valkey server many machines share."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable
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


def client_of(spec: str, timeout_s: float = 30.0, retries: bool = True) -> Redis:
    """A client of the server a spec names. `retries` off: an error is the caller's at once (redis-py
    otherwise tries a command three more times with backoff, which a caller that buffers does itself)."""
    from redis import Redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    parts = urlsplit(spec)
    url = parts._replace(scheme=_SCHEMES[parts.scheme]).geturl()
    options: dict[str, object] = {"socket_connect_timeout": min(CONNECT_TIMEOUT_S, timeout_s),
                                  "socket_timeout": timeout_s}  # fmt: skip
    if not retries:
        options["retry"] = Retry(NoBackoff(), 0)
    try:
        return Redis.from_url(url, **options)
    except ValueError as exc:  # a malformed URL: say which, and the shape that works
        raise SetupProblem(f"example database {spec!r}: {exc}; use valkey://HOST:PORT[/DB]") from None


def open_database(spec: str | Path, tolerant: bool = False) -> ExampleDatabase:
    """The database a spec names. Each worker process opens its own (connections do not cross
    processes); examples saved by any worker or machine are replayed first by every other.
    `tolerant` (the fuzzing service's workers): a server that does not answer fetches nothing and
    saves nothing, quickly, instead of ending the Hypothesis run (the examples are a speed-up; what
    must not be lost, the findings, the service keeps itself: difftest/fuzz/outbox.py)."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    if not is_server(spec):
        return DirectoryBasedExampleDatabase(str(spec))
    from hypothesis.extra.redis import RedisExampleDatabase

    if not tolerant:
        return RedisExampleDatabase(client_of(str(spec)))
    return _tolerant(RedisExampleDatabase(client_of(str(spec), timeout_s=TOLERANT_TIMEOUT_S, retries=False)))


TOLERANT_TIMEOUT_S = 2.0  # a paused server costs a tolerant database's caller this long per call, at most


@functools.cache  # one class, made on first use (hypothesis loads late), for every batch's database
def _tolerant_class() -> type:
    from hypothesis.database import ExampleDatabase
    from redis.exceptions import RedisError

    class Tolerant(ExampleDatabase):
        """Hypothesis's example database over a server that may be away: its errors are no examples."""

        def __init__(self, inner: ExampleDatabase) -> None:
            super().__init__()
            self.inner = inner

        def save(self, key: bytes, value: bytes) -> None:
            with contextlib.suppress(RedisError):
                self.inner.save(key, value)

        def fetch(self, key: bytes) -> Iterable[bytes]:
            try:
                return list(self.inner.fetch(key))
            except RedisError:
                return []

        def delete(self, key: bytes, value: bytes) -> None:
            with contextlib.suppress(RedisError):
                self.inner.delete(key, value)

        def move(self, src: bytes, dest: bytes, value: bytes) -> None:
            with contextlib.suppress(RedisError):
                self.inner.move(src, dest, value)

    return Tolerant


def _tolerant(inner: ExampleDatabase) -> ExampleDatabase:
    database: ExampleDatabase = _tolerant_class()(inner)
    return database


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
