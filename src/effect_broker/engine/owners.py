"""Names for whoever holds a lease, readable in every event it writes."""

from __future__ import annotations

import os
import socket
import uuid


def worker_name(role: str) -> str:
    """Role, host, pid and a random suffix: unique per process and role."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
