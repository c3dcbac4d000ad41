"""The tests' own database source: a dead server stops the session with one message
(every worker of a parallel run), and the container source is explicit and skips
cleanly where Docker is absent."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import database
from tests.integration.proxy_support import closed_port
from tests.support import ROOT


@pytest.fixture(autouse=True)
def _own_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests stop sessions on purpose and catch it: never this one's record."""
    monkeypatch.setattr(database, "stopped_because", [])


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
    assert database.stopped_because == [(message, database.SERVER_GONE)]


WORKER_STOPS = """
from tests import database

def test_the_server_dies():
    database.stop_session("the test server went away", database.SERVER_GONE)
"""


def test_a_worker_whose_server_dies_stops_the_parallel_run_with_its_status(
    tmp_path: Path,
) -> None:
    """Under pytest-xdist the worker's exit status and message reach the controller,
    which stops the other workers: the run ends with 7, as a serial one does."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "from tests.parallel import pytest_sessionfinish, pytest_testnodedown\n"
    )
    (tmp_path / "test_dies.py").write_text(WORKER_STOPS)
    for name in "abcdef":  # modules left for the workers when the server dies
        (tmp_path / f"test_{name}.py").write_text("def test_fine():\n    pass\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadfile",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == database.SERVER_GONE, output
    assert "the test server went away" in output
    assert "INTERNALERROR" not in output


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
    assert [code for _, code in database.stopped_because] == [pytest.ExitCode.USAGE_ERROR]


def _home(root: Path, name: str, *, age: float = 120.0) -> Path:
    home = root / f"{database.HOME_PREFIX}{name}"
    (home / "data").mkdir(parents=True)
    lock = home / database.OWNER_LOCK
    lock.write_text("1\n")
    os.utime(lock, (lock.stat().st_atime - age, lock.stat().st_mtime - age))
    return home


def test_a_dead_runs_folder_is_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    abandoned = _home(tmp_path, "111-abandoned")
    young = _home(tmp_path, "222-young", age=0)
    live = _home(tmp_path, "333-live")
    unlocked_kind = tmp_path / f"{database.HOME_PREFIX}old-style"
    unlocked_kind.mkdir()
    with (live / database.OWNER_LOCK).open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)

        swept = database.sweep_abandoned(tmp_path, older_than=60)

    assert swept == [abandoned]
    assert not abandoned.exists()
    assert young.exists() and live.exists() and unlocked_kind.exists()


def test_sweeping_stops_the_server_left_in_the_folder_and_no_other(
    tmp_path: Path,
) -> None:
    homes = [_home(tmp_path, "444-server"), _home(tmp_path, "555-stranger")]
    # A stand-in postmaster whose command line names its data folder, as PostgreSQL's
    # does (-D <data>), and a process that merely reuses the recorded pid's slot.
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", str(homes[0] / "data")]
    )
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        for home, process in zip(homes, (server, stranger), strict=True):
            (home / "data" / "postmaster.pid").write_text(f"{process.pid}\n/data\n")

        database.sweep_abandoned(tmp_path, older_than=60)

        assert server.wait(10) is not None
        assert stranger.poll() is None
        assert not any(home.exists() for home in homes)
    finally:
        for process in (server, stranger):
            process.kill()
            process.wait()
