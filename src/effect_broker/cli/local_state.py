"""What ``effect-broker up`` leaves in its data directory, for the commands run beside it.

``up`` keeps a master key, an admin token and (while it runs) its addresses in
``./.effect-broker/`` and never exports them. ``serve``, ``doctor`` and ``effects`` run
in another shell would otherwise start without a key, or ask the wrong admin port. So
when a variable is unset they read the file instead and say so in one line: a value
taken from a file must never be a silent surprise.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from effect_broker.config.settings import Settings

MASTER_KEY_FILE = "master.key"
ADMIN_TOKEN_FILE = "admin.token"
#: Written by ``up`` once its ports are open, removed when it stops.
RUNNING_FILE = "up.json"
DATA_DIR_VARIABLE = "EFFECT_BROKER_DATA_DIR"


def data_dir() -> Path:
    """``up``'s data directory for commands without settings: the variable or default."""
    return Path(os.environ.get(DATA_DIR_VARIABLE) or ".effect-broker")


def shown(path: Path) -> str:
    """A path as a person should read it: ``./.effect-broker/master.key``."""
    return path.as_posix() if path.is_absolute() else f"./{path.as_posix()}"


def using(paths: list[Path]) -> str:
    """The one line that says which of ``up``'s files a command took values from."""
    return "using " + ", ".join(shown(path) for path in paths)


def read_secret(path: Path) -> str | None:
    """A secret file's content, or None when it is missing, unreadable or empty."""
    try:
        value = path.read_text().strip()
    except OSError:
        return None
    return value or None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True, slots=True)
class RunningUp:
    """A running ``up``: its process and the URLs of its proxy and admin ports."""

    pid: int
    proxy_url: str
    admin_url: str
    routes: str | None = None  # the routes file it serves (the packaged demo's too)

    def write(self, directory: Path) -> Path:
        path = directory / RUNNING_FILE
        found: dict[str, object] = {"pid": self.pid, "proxy_url": self.proxy_url}
        found["admin_url"] = self.admin_url
        if self.routes is not None:
            found["routes"] = self.routes
        path.write_text(json.dumps(found) + "\n")
        return path

    @classmethod
    def find(cls, directory: Path) -> RunningUp | None:
        """The ``up`` whose file is in ``directory``, if its process still runs.

        A file left by an ``up`` that was killed names a dead process and is ignored.
        """
        try:
            found = json.loads((directory / RUNNING_FILE).read_text())
            running = cls(int(found["pid"]), str(found["proxy_url"]), found["admin_url"])
            routes = found.get("routes")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if not isinstance(running.admin_url, str) or not _alive(running.pid):
            return None
        if isinstance(routes, str):
            running = dataclasses.replace(running, routes=routes)
        return running


def up_database(directory: Path) -> str | None:
    """The DSN of the embedded PostgreSQL that ``up`` runs in ``directory``, if running.

    Read from the server's own ``postmaster.pid`` (port and socket directory), so a
    command in another shell reaches the ledger ``up`` serves without being told.
    """
    try:
        lines = (directory / "postgres" / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), int(lines[3]), lines[4].strip()
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    if not socket_dir:
        return None
    return f"postgresql://postgres@/postgres?host={socket_dir}&port={port}"


def with_up_secrets(settings: Settings) -> tuple[Settings, list[Path]]:
    """``settings`` with the master key and admin token ``up`` keeps, where unset.

    Returns the files used, for the "using ..." line. A key given as
    ``EFFECT_BROKER_MASTER_KEYS`` (a rotation) counts as set: the file is not mixed in.
    """
    used: list[Path] = []
    directory = settings.data_dir
    update: dict[str, SecretStr] = {}
    if settings.master_key is None and settings.master_keys is None:
        path = directory / MASTER_KEY_FILE
        if (value := read_secret(path)) is not None:
            update["master_key"] = SecretStr(value)
            used.append(path)
    if settings.admin_token is None:
        path = directory / ADMIN_TOKEN_FILE
        if (value := read_secret(path)) is not None:
            update["admin_token"] = SecretStr(value)
            used.append(path)
    return settings.model_copy(update=update), used


DEFAULT_ADMIN_URL = "http://127.0.0.1:8081"


def admin_access(
    admin_url: str | None, token: str | None, directory: Path | None = None
) -> tuple[str, str | None, list[Path]]:
    """The admin URL and token to use, and the files of ``up``'s they came from.

    A flag or variable always wins; otherwise a running ``up``'s admin URL and its
    token file; otherwise the default port and no token.
    """
    directory = data_dir() if directory is None else directory
    used: list[Path] = []
    if admin_url is None:
        running = RunningUp.find(directory)
        if running is not None:
            admin_url = running.admin_url
            used.append(directory / RUNNING_FILE)
        else:
            admin_url = DEFAULT_ADMIN_URL
    if token is None:
        path = directory / ADMIN_TOKEN_FILE
        if (token := read_secret(path)) is not None:
            used.append(path)
    return admin_url, token, used
