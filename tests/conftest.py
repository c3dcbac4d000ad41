"""Shared fixtures: one real PostgreSQL per session, one fresh database per test.

The server is ``EFFECT_BROKER_TEST_DATABASE_URL`` when set, else an embedded PostgreSQL
in a folder of this run's own (or a container, asked for explicitly): see
tests/database.py. A template database is migrated once; each test clones it with
``CREATE DATABASE ... TEMPLATE``, which costs milliseconds and isolates every test.
The suite runs in parallel processes (pytest-xdist), each with its own of all that:
tests/parallel.py.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from effect_broker.store import Store
from effect_broker.store.migrations import apply_migrations
from tests import citus_support as citus
from tests.citus_support import citus_url
from tests.database import connect_admin, session_server, with_database
from tests.parallel import pytest_report_to_serializable as pytest_report_to_serializable
from tests.parallel import pytest_sessionfinish as pytest_sessionfinish
from tests.parallel import pytest_testnodedown as pytest_testnodedown

INTEGRATION_DIR = Path(__file__).parent / "integration"

# The proxies these tests start in-process run on pytest-asyncio's loop: asyncio's,
# unless EFFECT_BROKER_EVENT_LOOP=uvloop asks for uvloop, the loop `serve` and `up` use
# by default. CI runs the CONNECT and interception tests a second time that way (uvloop's
# transports are not asyncio.Transport subclasses, and those tests hand raw transports
# around). The hook exists only then: pytest-asyncio parametrizes every test it sees.
if os.environ.get("EFFECT_BROKER_EVENT_LOOP", "").strip().lower() == "uvloop":
    import uvloop

    def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item
    ) -> dict[str, Any]:
        return {"uvloop": uvloop.new_event_loop}


def pytest_configure(config: pytest.Config) -> None:
    """The opt-in Citus run is one process: its ledgers are databases made on every
    node of one cluster, and parallel workers making and dropping theirs at once break
    each other's connections between the nodes."""
    if citus_url() is not None and (config.getoption("numprocesses", None) or 0) > 0:
        raise pytest.UsageError(
            f"{citus.CITUS_VARIABLE} is set: run the Citus suite in one process, with "
            "-n 0 (parallel workers share one cluster and break each other's ledgers)"
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """The test server (see tests/database.py for where it comes from), or the Citus
    coordinator of the opt-in run (tests/citus_support.py)."""
    coordinator = citus_url()
    if coordinator is not None:
        yield coordinator
        return
    with session_server() as dsn:
        yield dsn


async def _create_template(server: str, name: str) -> None:
    admin = await connect_admin(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    conn = await connect_admin(with_database(server, name))
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()


async def _drop_database(server: str, name: str) -> None:
    admin = await connect_admin(server)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(scope="session")
def template_database(server_dsn: str) -> Iterator[str]:
    name = f"eb_template_{uuid.uuid4().hex[:12]}"
    if citus_url() is not None:  # on every node, with the extension and nothing else
        asyncio.run(citus.create_template(server_dsn, name))
        yield name
        asyncio.run(citus.drop_everywhere(server_dsn, name))
        return
    asyncio.run(_create_template(server_dsn, name))
    yield name
    asyncio.run(_drop_database(server_dsn, name))


@pytest.fixture
async def empty_database_url(server_dsn: str) -> AsyncIterator[str]:
    """A database with no schema at all, for migration tests."""
    name = f"eb_empty_{uuid.uuid4().hex[:12]}"
    admin = await connect_admin(server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield with_database(server_dsn, name)
    await _drop_database(server_dsn, name)


@pytest.fixture
async def database_url(server_dsn: str, template_database: str) -> AsyncIterator[str]:
    """A freshly migrated database of this test's own (distributed by tenant in the
    opt-in Citus run)."""
    if citus_url() is not None:
        ledger = await citus.create_ledger(server_dsn, template_database)
        yield ledger
        await citus.drop_everywhere(server_dsn, ledger.rsplit("/", 1)[-1])
        return
    name = f"eb_test_{uuid.uuid4().hex[:12]}"
    admin = await connect_admin(server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    finally:
        await admin.close()
    yield with_database(server_dsn, name)
    await _drop_database(server_dsn, name)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    ledger = await Store.connect(database_url, max_size=20)
    yield ledger
    await ledger.close()


@pytest.fixture
async def broker(database_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    """The proxy in front of the demo payment target, on a fresh ledger."""
    from tests.integration.harness import running_broker

    async with running_broker(database_url, tmp_path) as running:
        yield running
