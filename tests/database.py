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
it, so several runs on one machine never share or stop each other's server. The folder
is named for the run's pid and locked while the run lives; a run that finds another's
folder unlocked (its owner was killed before it could clean up) stops the server left
there and removes it.

If the server stops answering midway, the next test that asks for a database stops the
whole session with one message that says so, instead of hundreds of tests each failing
with ``ConnectionRefusedError``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

try:
    import fcntl
except ImportError:  # Windows: no advisory locks, so nothing is swept
    fcntl = None  # type: ignore[assignment]

from tests.support import poll

URL_VARIABLE = "EFFECT_BROKER_TEST_DATABASE_URL"
SOURCE_VARIABLE = "EFFECT_BROKER_TEST_DATABASE"
SOURCES = ("embedded", "testcontainers")
CONTAINER_IMAGE = "postgres:18"
#: Exit status of a session stopped because its test server died (pytest's own are 0-5).
SERVER_GONE = 7
#: How long a server that refuses connections gets to come back before the session ends.
GRACE_SECONDS = 30.0
#: The embedded server's folder: under the system's temporary directory, named for the
#: pid of the run that made it, holding ``OWNER_LOCK`` while that run lives.
HOME_PREFIX = "effect-broker-test-pg-"
OWNER_LOCK = "owner.lock"
#: A folder this old whose lock nobody holds belongs to a run that died.
SWEEP_AFTER_SECONDS = 60.0

#: Why this process stopped its session, and with which exit status: a worker of a
#: parallel run passes it on to the controller (tests/parallel.py).
stopped_because: list[tuple[str, int]] = []

# Each server this run uses, by DSN: what to call it, and its data folder if this run
# made one, for the message if it dies.
_started: dict[str, tuple[str, Path | None]] = {}


def stop_session(message: str, returncode: int) -> NoReturn:
    """End the whole session (every worker of a parallel run) with ``message``."""
    stopped_because.append((message, int(returncode)))
    pytest.exit(message, returncode=returncode)


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
        stop_session(
            f"{SOURCE_VARIABLE}={source!r} is not a test database source: use "
            f"'embedded' (the default) or 'testcontainers', or set {URL_VARIABLE}",
            pytest.ExitCode.USAGE_ERROR,
        )
    server = embedded_server() if source == "embedded" else container_server()
    with server as dsn:
        yield dsn


@contextmanager
def embedded_server() -> Iterator[str]:
    from effect_broker.embedded import embedded_postgres

    root = Path(tempfile.gettempdir())
    sweep_abandoned(root)
    home = Path(tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{os.getpid()}-", dir=root))
    home.chmod(0o755)
    with _owned(home):
        try:
            with embedded_postgres(home / "data", durable=False, keep_data=False) as dsn:
                _started[dsn] = ("the embedded PostgreSQL of this run", home / "data")
                yield dsn
        finally:
            shutil.rmtree(home, ignore_errors=True)


@contextmanager
def _owned(home: Path) -> Iterator[None]:
    """Hold ``home``'s lock for as long as this run uses it: a run that sees the lock
    free knows the owner is gone (killed before it could clean up), whatever its pid
    namespace, since the kernel drops a dead process's locks."""
    with (home / OWNER_LOCK).open("w") as lock:
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def sweep_abandoned(root: Path, *, older_than: float = SWEEP_AFTER_SECONDS) -> list[Path]:
    """Stop the servers of, and remove, the folders of test runs that died without
    cleaning up (SIGKILL, a closed terminal): each would otherwise keep a PostgreSQL
    running for nothing. A folder whose lock a live run holds is left alone, and so is
    one younger than ``older_than`` seconds (its run may not hold the lock yet)."""
    if fcntl is None:
        return []
    swept = []
    now = time.time()
    for home in root.glob(f"{HOME_PREFIX}*"):
        lock_path = home / OWNER_LOCK
        try:
            if now - lock_path.stat().st_mtime < older_than:
                continue
            lock = lock_path.open("a")
        except OSError:
            continue  # no lock file: not a folder of this scheme, or not ours to touch
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live run holds it
            _stop_postmaster(home / "data")
            shutil.rmtree(home, ignore_errors=True)
            swept.append(home)
    return swept


def _stop_postmaster(data: Path) -> None:
    """Stop the server whose data folder is ``data``, if one still runs there (checked
    by its command line, so a reused pid is never signalled)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return
    import psutil  # installed with the embedded PostgreSQL

    try:
        process = psutil.Process(pid)
        if str(data) not in " ".join(process.cmdline()):
            return
        process.terminate()
        process.wait(10)
    except psutil.TimeoutExpired:
        process.kill()
    except psutil.Error:
        return


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
        stop_session(server_gone_message(dsn, failures[-1], grace), SERVER_GONE)
    return connection
