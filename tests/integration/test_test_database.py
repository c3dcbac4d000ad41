"""The tests' own database source: a dead server stops the session with one message,
and the container source is explicit and skips cleanly where Docker is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import database
from tests.integration.proxy_support import closed_port


async def test_a_server_that_refuses_connections_stops_the_session_once() -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    database._started[dsn] = (
        "the embedded PostgreSQL of this run",
        Path("/nonexistent/data"),
    )

    with pytest.raises(pytest.exit.Exception) as stopped:
        await database.connect_admin(dsn, grace=0.5)

    assert stopped.value.returncode == database.SERVER_GONE
    message = str(stopped.value.msg)
    assert message.startswith("The test database server does not answer: ")
    assert "in /nonexistent/data refused or dropped the connection for 0.5 s" in message
    assert "ConnectionRefusedError" in message
    assert "the session stops here" in message
    assert "Its data folder /nonexistent/data is gone" in message


async def test_a_live_server_gives_a_connection(server_dsn: str) -> None:
    connection = await database.connect_admin(server_dsn, grace=5)
    try:
        assert await connection.fetchval("SELECT 1") == 1
    finally:
        await connection.close()


def test_containers_without_a_docker_engine_skip_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")

    with pytest.raises(pytest.skip.Exception) as skipped, database.container_server():
        pytest.fail("a container started without a Docker engine")

    assert "no Docker engine is reachable" in str(skipped.value.msg)
    assert "unset it to use the embedded PostgreSQL" in str(skipped.value.msg)


def test_an_unknown_source_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(database.URL_VARIABLE, raising=False)
    monkeypatch.setenv(database.SOURCE_VARIABLE, "sqlite")

    with pytest.raises(pytest.exit.Exception) as stopped, database.session_server():
        pytest.fail("an unknown source gave a server")

    assert "'sqlite' is not a test database source" in str(stopped.value.msg)
