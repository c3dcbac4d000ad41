"""The opt-in run against a Citus cluster: test databases made on every node.

With ``EFFECT_BROKER_TEST_CITUS_URL`` set (the coordinator's URL, as
``deploy/citus/cluster.sh url`` prints it), the shared fixtures give each test a ledger
migrated and distributed by tenant on that cluster instead of a plain PostgreSQL
database. A Citus database is a cluster of its own: the database is created on the
coordinator and on every worker the coordinator's ``postgres`` database knows, from a
per-node template that already holds the extension, and the workers are added to it.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit, urlunsplit

from effect_broker.store.distribute import distribute
from effect_broker.store.migrations import apply_migrations
from tests.database import connect_admin, with_database

CITUS_VARIABLE = "EFFECT_BROKER_TEST_CITUS_URL"
#: Few shards per table: each test makes its own ledger, and 32 shards cost seconds.
TEST_SHARD_COUNT = 4
SKIP_REASON = (
    f"{CITUS_VARIABLE} is not set: these tests need a Citus cluster "
    "(deploy/citus/cluster.sh start, then set it to the printed coordinator URL)"
)


def citus_url() -> str | None:
    return os.environ.get(CITUS_VARIABLE) or None


def node_url(coordinator: str, host: str, port: int) -> str:
    """The coordinator's URL, pointed at another node of the cluster."""
    parts = urlsplit(coordinator)
    netloc = f"{parts.username}@{host}:{port}" if parts.username else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


async def cluster_nodes(coordinator: str) -> tuple[str, list[tuple[str, int]]]:
    """(coordinator host, [(host, port) of every worker]) as the coordinator knows."""
    conn = await connect_admin(coordinator)
    try:
        rows = await conn.fetch(
            "SELECT nodename, nodeport, groupid FROM pg_dist_node"
            " WHERE noderole = 'primary' ORDER BY groupid, nodeport"
        )
    finally:
        await conn.close()
    workers = [(row["nodename"], row["nodeport"]) for row in rows if row["groupid"] != 0]
    if not workers:
        raise RuntimeError(f"the Citus cluster at {coordinator} has no workers")
    return coordinator, workers


async def _on_node(url: str, statement: str) -> None:
    conn = await connect_admin(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def create_template(coordinator: str, name: str) -> None:
    """A database holding only the extension, on every node, to clone per test."""
    _, workers = await cluster_nodes(coordinator)
    urls = [coordinator] + [node_url(coordinator, h, p) for h, p in workers]
    for url in urls:
        await _on_node(url, f'CREATE DATABASE "{name}"')
        await _on_node(with_database(url, name), "CREATE EXTENSION citus")


async def create_ledger(coordinator: str, template: str, *, migrated: bool = True) -> str:
    """A fresh database on every node, its workers added, migrated and distributed
    (or, with ``migrated=False``, left empty for ``migrate --distribute`` to do it)."""
    name = f"eb_citus_{uuid.uuid4().hex[:12]}"
    _, workers = await cluster_nodes(coordinator)
    for url in [coordinator] + [node_url(coordinator, h, p) for h, p in workers]:
        await _on_node(url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    ledger = with_database(coordinator, name)
    conn = await connect_admin(ledger)
    try:
        host, port = _host_port(coordinator)
        await conn.execute("SELECT citus_set_coordinator_host($1, $2)", host, port)
        for worker_host, worker_port in workers:
            await conn.execute("SELECT citus_add_node($1, $2)", worker_host, worker_port)
        if migrated:
            await apply_migrations(conn)
            await distribute(conn, "citus", shard_count=TEST_SHARD_COUNT)
    finally:
        await conn.close()
    return ledger


async def drop_everywhere(coordinator: str, name: str) -> None:
    _, workers = await cluster_nodes(coordinator)
    for url in [coordinator] + [node_url(coordinator, h, p) for h, p in workers]:
        await _on_node(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432
