"""doctor finds the embedded PostgreSQL of a running ``effect-broker up`` by itself."""

from __future__ import annotations

import os
from pathlib import Path

from effect_broker.cli.doctor import up_database
from tests.support import unused_pid


def postmaster_pid(data_dir: Path, pid: int) -> None:
    """The first lines of PostgreSQL's postmaster.pid: pid, data, start, port, socket."""
    (data_dir / "postgres").mkdir(parents=True)
    socket_dir = str(data_dir / "sock")
    lines = [str(pid), str(data_dir / "postgres"), "1700000000", "54321", socket_dir]
    (data_dir / "postgres" / "postmaster.pid").write_text("\n".join(lines) + "\n")


def test_a_running_server_gives_its_socket_dsn(tmp_path: Path) -> None:
    postmaster_pid(tmp_path, os.getpid())

    dsn = up_database(tmp_path)

    assert dsn == f"postgresql://postgres@/postgres?host={tmp_path}/sock&port=54321"


def test_a_stale_pid_file_or_none_gives_nothing(tmp_path: Path) -> None:
    assert up_database(tmp_path) is None
    postmaster_pid(tmp_path, unused_pid())

    assert up_database(tmp_path) is None
