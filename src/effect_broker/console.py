"""The ``effect-broker`` console script, installed with every distribution.

The bare distribution carries only the agent-side helpers (``effect_broker.client``),
so the command may find the server's libraries missing. Then it says which extra to
install, in one line, instead of a traceback from deep inside an import.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from importlib.util import find_spec
from typing import Any

# Modules the command line imports on every run; none comes with the bare distribution.
SERVER_MODULES = ("typer", "aiohttp", "asyncpg")

INSTALL_HINT = (
    "effect-broker: the server is not installed here (only the agent-side helpers, "
    "effect_broker.client, are). Install it with: pip install 'effect-broker[server]' "
    "(or 'effect-broker[embedded]' to run `up` with its own PostgreSQL). Missing: {}."
)


def missing_modules(names: Iterable[str], find: Callable[[str], Any]) -> list[str]:
    """The modules among ``names`` that cannot be imported here."""
    return [name for name in names if find(name) is None]


def main() -> None:
    missing = missing_modules(SERVER_MODULES, find_spec)
    if missing:
        sys.exit(INSTALL_HINT.format(", ".join(missing)))
    from effect_broker.cli import main as cli_main

    cli_main()
