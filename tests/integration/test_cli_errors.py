"""Mistakes a person makes when starting the broker end in one line, never a traceback.

Each case runs the real ``effect-broker`` executable: the point is what a terminal
shows, exit code included. Every case fails before serving, so each process ends by
itself; the timeout only bounds a regression that would start serving.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from effect_broker.crypto import MasterKey
from tests.support import ROOT

EXECUTABLE = str(Path(sys.executable).parent / "effect-broker")
ROUTES = str(ROOT / "routes.yaml")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port with a listener on it, as another program would hold it."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": str(Path(sys.executable).parent),
        "EFFECT_BROKER_MASTER_KEY": MasterKey.generate().to_base64(),
        "EFFECT_BROKER_ROUTES": ROUTES,
        "COLUMNS": "80",
    }
    return subprocess.run(
        [EXECUTABLE, *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The last line of stderr, after checking it is the only error and no traceback."""
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert result.stderr.rstrip().endswith(lines[0]), result.stderr
    return lines[0]


def test_serve_on_a_busy_proxy_port_names_the_address_and_the_flag(
    database_url: str, busy_port: int
) -> None:
    result = run(
        "serve",
        "--database-url",
        database_url,
        "--listen",
        f"127.0.0.1:{busy_port}",
        "--admin-listen",
        f"127.0.0.1:{free_port()}",
    )

    line = error_line(result)
    assert f"127.0.0.1:{busy_port} is already in use" in line
    assert "--listen or EFFECT_BROKER_LISTEN" in line
    assert "--admin-listen" not in line


def test_serve_on_a_busy_admin_port_names_the_admin_flag(
    database_url: str, busy_port: int
) -> None:
    result = run(
        "serve",
        "--database-url",
        database_url,
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--admin-listen",
        f"127.0.0.1:{busy_port}",
    )

    line = error_line(result)
    assert f"admin address 127.0.0.1:{busy_port} is already in use" in line
    assert "--admin-listen or EFFECT_BROKER_ADMIN_LISTEN" in line


def test_up_on_a_busy_port_says_so_in_one_line(
    database_url: str, busy_port: int, tmp_path: Path
) -> None:
    result = run(
        "up",
        "--database-url",
        database_url,
        "--no-demo",
        "--data-dir",
        str(tmp_path / "data"),
        "--listen",
        f"127.0.0.1:{busy_port}",
        "--admin-listen",
        f"127.0.0.1:{free_port()}",
    )

    assert f"127.0.0.1:{busy_port} is already in use" in error_line(result)


def test_an_address_that_is_not_host_port_is_named() -> None:
    result = run(
        "serve", "--database-url", "postgresql://x@127.0.0.1:1/x", "--listen", "8080"
    )

    assert "'8080' is not host:port; set --listen" in error_line(result)


def test_an_unreachable_database_is_one_line_with_host_port_and_fix() -> None:
    """It said only "[Errno 111] Connection refused": which server, and what to do?"""
    port = free_port()
    dsn = f"postgresql://postgres:s3cret@127.0.0.1:{port}/postgres"

    for command in ("serve", "migrate"):
        line = error_line(run(command, "--database-url", dsn))
        assert f"the ledger database at 127.0.0.1:{port} is unreachable" in line
        assert "--database-url (EFFECT_BROKER_DATABASE_URL)" in line, command
        assert "`effect-broker up` starts an embedded PostgreSQL" in line
        assert "s3cret" not in line


def test_a_wrong_database_name_or_user_says_which_and_where(database_url: str) -> None:
    if urlsplit(database_url).hostname is None:  # host:port is what the message names
        pytest.skip("the ledger listens on a Unix socket here; CI's second run uses TCP")
    server = database_url.rsplit("/", 1)[0]
    host_port = server.rsplit("@", 1)[-1]

    missing = error_line(run("migrate", "--database-url", f"{server}/no_such_db"))
    nobody = error_line(
        run("migrate", "--database-url", f"postgresql://no_such_role@{host_port}/x")
    )

    assert f"the PostgreSQL server at {host_port} has no such database" in missing
    assert "createdb" in missing
    assert f"the ledger database at {host_port} refused the login" in nobody
    assert "check the user and password" in nobody


def test_a_bad_routes_file_names_file_and_line(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text("version: 1\nroutes:\n  - name: charge\n    match: {method: POST\n")
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"

    line = error_line(run("serve", "--routes", str(routes), "--database-url", dsn))

    assert line.startswith(f"error: {routes}:")
    assert "invalid YAML" in line
