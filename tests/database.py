"""Where the tests' PostgreSQL comes from, and what happens when it goes away.

The server is ``EFFECT_BROKER_TEST_DATABASE_URL`` when that is set. Otherwise
``EFFECT_BROKER_TEST_DATABASE`` chooses: ``embedded`` (the default) starts an embedded
PostgreSQL in a folder of this run's own; ``testcontainers`` starts a PostgreSQL
container through a reachable Docker engine, and skips the database tests (with the
reason) where there is none.

The embedded server's folder is made by ``mkdtemp`` under the system's temporary
directory, never under pytest's ``/tmp/pytest-of-<user>``: pytest makes that folder
private (0700) again, and prunes old runs there, whenever another session starts, and
the server (run as its own system user when the tests run as root) then loses its data
directory mid-run. Each run has its own folder and listens only on a Unix socket inside
it, so several runs on one machine never share or stop each other's server.

If the server stops answering midway, the next test that asks for a database stops the
whole session with one message that says so, instead of hundreds of tests each failing
with ``ConnectionRefusedError``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.support import poll

URL_VARIABLE = "EFFECT_BROKER_TEST_DATABASE_URL"
SOURCE_VARIABLE = "EFFECT_BROKER_TEST_DATABASE"
SOURCES = ("embedded", "testcontainers")
CONTAINER_IMAGE = "postgres:18"
#: Exit status of a session stopped because its test server died (pytest's own are 0-5).
SERVER_GONE = 7
#: How long a server that refuses connections gets to come back before the session ends.
GRACE_SECONDS = 30.0

# Each server this run uses, by DSN: what to call it, and its data folder if this run
# made one, for the message if it dies.
_started: dict[str, tuple[str, Path | None]] = {}


def with_database(dsn: str, database: str) -> str:
    """The same server DSN pointing at another database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


@contextmanager
def session_server() -> Iterator[str]:
    """The DSN of the session's PostgreSQL server, chosen as the module says."""
    external = os.environ.get(URL_VARIABLE)
    if external:
        _started[external] = (f"the server {URL_VARIABLE} names", None)
        yield external
        return
    source = os.environ.get(SOURCE_VARIABLE, "").strip().lower() or "embedded"
    if source not in SOURCES:
        pytest.exit(
            f"{SOURCE_VARIABLE}={source!r} is not a test database source: use "
            f"'embedded' (the default) or 'testcontainers', or set {URL_VARIABLE}",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
    server = embedded_server() if source == "embedded" else container_server()
    with server as dsn:
        yield dsn


@contextmanager
def embedded_server() -> Iterator[str]:
    from effect_broker.embedded import embedded_postgres

    home = Path(tempfile.mkdtemp(prefix="effect-broker-test-pg-"))
    home.chmod(0o755)
    try:
        with embedded_postgres(home / "data", durable=False, keep_data=False) as dsn:
            _started[dsn] = ("the embedded PostgreSQL of this run", home / "data")
            yield dsn
    finally:
        shutil.rmtree(home, ignore_errors=True)


def docker_unreachable() -> str | None:
    """Why no Docker engine can be used here, or None when one answers ``/_ping``.

    Asked over a plain socket (``DOCKER_HOST``, else the default Unix socket), so that
    finding no engine leaves nothing open behind it.
    """
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    parts = urlsplit(where)
    try:
        if parts.scheme == "unix":
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            engine.settimeout(5)
            with engine:
                engine.connect(parts.path)
                answer = _ping(engine)
        elif parts.scheme in ("tcp", "http", "https") and parts.hostname:
            if parts.scheme == "https" or os.environ.get("DOCKER_TLS_VERIFY"):
                return None  # TLS: let the Docker client itself try
            address = (parts.hostname, parts.port or 2375)
            with socket.create_connection(address, timeout=5) as engine:
                answer = _ping(engine)
        else:
            return f"DOCKER_HOST={where!r} is not an address this check understands"
    except OSError as exc:
        return f"{where}: {exc}"
    if b" 200 " not in answer.split(b"\r\n", 1)[0]:
        return f"{where} answered /_ping with {answer[:60]!r}"
    return None


def _ping(engine: socket.socket) -> bytes:
    engine.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
    return engine.recv(256)


@contextmanager
def container_server() -> Iterator[str]:
    """A PostgreSQL container for the session (asked for explicitly, never a fallback)."""
    reason = docker_unreachable()
    if reason is not None:
        pytest.skip(
            f"{SOURCE_VARIABLE}=testcontainers, but no Docker engine is reachable "
            f"({reason}); unset it to use the embedded PostgreSQL"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from testcontainers.community.postgres import PostgresContainer

        container = PostgresContainer(
            CONTAINER_IMAGE,
            username="postgres",
            password="postgres",
            dbname="postgres",
            driver=None,
        )
        container.start()
    try:
        dsn = container.get_connection_url()
        _started[dsn] = (f"the {CONTAINER_IMAGE} container of this run", None)
        yield dsn
    finally:
        container.stop()


def server_gone_message(dsn: str, error: BaseException, grace: float) -> str:
    described, data = _started.get(dsn, ("the test PostgreSQL server", None))
    if data is not None:
        described += f" in {data}"
    lines = [
        f"The test database server does not answer: {described} refused or dropped "
        f"the connection for {grace:g} s ({type(error).__name__}: {error}).",
        "Every test after this one would fail the same way, so the session stops here.",
    ]
    if data is not None:
        if not data.exists():
            lines.append(f"Its data folder {data} is gone: something removed it.")
        elif (data / "log").exists():
            lines.append(f"Its log: {data / 'log'}")
    return "\n".join(lines)


async def connect_admin(dsn: str, *, grace: float = GRACE_SECONDS) -> asyncpg.Connection:
    """A connection to the test server's maintenance database. A server that refuses
    connections for ``grace`` seconds is dead: the session stops, with one message."""
    failures: list[BaseException] = []

    async def attempt() -> asyncpg.Connection | None:
        try:
            return await asyncpg.connect(dsn, timeout=grace)
        except (OSError, asyncpg.CannotConnectNowError) as exc:
            failures.append(exc)
            return None

    try:
        connection: asyncpg.Connection = await poll(
            attempt, within=grace, every=0.2, what="the test server"
        )
    except AssertionError:
        pytest.exit(server_gone_message(dsn, failures[-1], grace), returncode=SERVER_GONE)
    return connection
