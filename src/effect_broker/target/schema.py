"""The kit's table: its migrations as package files, and the check run at startup.

A service that forgot to create the table would only find out when the proxy's first
tombstone fails, long after deploying; so the middleware checks at startup and refuses
to start with a message that says how to create it. ``python -m
effect_broker.target.schema`` prints the SQL, for services that migrate with psql or
their own tool rather than calling ``install()``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from importlib.resources import files

from effect_broker.target.outcomes import KitNotInstalled

TABLE = "effect_broker_attempts"

#: The columns (and PostgreSQL types) the kit reads and writes.
REQUIRED_COLUMNS = {
    "attempt_key": "text",
    "state": "text",
    "status": "integer",
    "headers": "jsonb",
    "body": "bytea",
    "at": "timestamp with time zone",
}

#: The table's columns as the session sees it (its search path); empty: no table.
COLUMNS_SQL = (
    "SELECT column_name::text, data_type::text FROM information_schema.columns"
    f" WHERE table_name = '{TABLE}' AND table_schema = ANY (current_schemas(false))"
)

HOW_TO_INSTALL = (
    "call install(conn) from effect_broker.target.asyncpg or effect_broker.target.psycopg"
    ", or run: python -m effect_broker.target.schema | psql $DATABASE_URL"
)


def migrations() -> list[tuple[str, str]]:
    """Every migration as (file name, SQL), in the order they apply."""
    folder = files("effect_broker.target") / "sql"
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    return [(name, (folder / name).read_text(encoding="utf-8")) for name in names]


def missing() -> KitNotInstalled:
    """The error for a missing table (the drivers' "undefined table" becomes this)."""
    return KitNotInstalled(f"table {TABLE} is missing: {HOW_TO_INSTALL}")


def judge_columns(columns: Iterable[tuple[str, str]]) -> None:
    """Raise ``KitNotInstalled`` unless ``columns`` are those the kit needs."""
    found = dict(columns)
    if not found:
        raise missing()
    wrong = [
        f"{name} ({found.get(name, 'missing')}, expected {kind})"
        for name, kind in REQUIRED_COLUMNS.items()
        if found.get(name) != kind
    ]
    if wrong:
        raise KitNotInstalled(
            f"table {TABLE} does not have the kit's columns: {', '.join(wrong)};"
            f" {HOW_TO_INSTALL}"
        )


def main() -> None:
    for name, sql in migrations():
        sys.stdout.write(f"-- {name}\n{sql}\n")


if __name__ == "__main__":
    main()
