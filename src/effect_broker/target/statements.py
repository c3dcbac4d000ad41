"""The kit's SQL, written once for both drivers (asyncpg's ``$n`` placeholders).

Values cross as text where a service's own type codecs could change them (a jsonb
codec on asyncpg, a row factory or a timestamp loader on psycopg): the kit must read and
write the same bytes whatever the service configured on its connections.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

#: ``at`` as ISO 8601 text in JSON's form, e.g. ``2025-01-31T12:00:00.123456+00:00``.
_COLUMNS = "state, status, headers::text, body, to_json(at) #>> '{}'"

FIND = f"SELECT {_COLUMNS} FROM effect_broker_attempts WHERE attempt_key = $1"

#: The receipt: the *last* statement of the service's transaction (see ``record``).
RECORD = (
    "INSERT INTO effect_broker_attempts (attempt_key, state, status, headers, body)"
    " VALUES ($1, 'committed', $2, $3::text::jsonb, $4)"
)

#: How long the tombstone may wait for an attempt's uncommitted row, this transaction.
LOCK_TIMEOUT = "SELECT set_config('lock_timeout', $1, true)"

TOMBSTONE = (
    "INSERT INTO effect_broker_attempts (attempt_key, state) VALUES ($1, 'tombstoned')"
    " ON CONFLICT (attempt_key) DO NOTHING RETURNING to_json(at) #>> '{}'"
)

UNIQUE_VIOLATION = "23505"
LOCK_NOT_AVAILABLE = "55P03"
UNDEFINED_TABLE = "42P01"
#: What a concurrent first install of the same table can fail with; a retry succeeds.
INSTALL_RACES = frozenset({UNIQUE_VIOLATION, "42P07", "42710"})

_PLACEHOLDER = re.compile(r"\$\d+")


def pyformat(sql: str) -> str:
    """``sql`` with psycopg's ``%s`` placeholders (each ``$n`` once, in order)."""
    return _PLACEHOLDER.sub("%s", sql)


def milliseconds(seconds: float) -> str:
    """A PostgreSQL duration setting, never 0 (which would mean "wait forever")."""
    return f"{max(1, round(seconds * 1000))}ms"


def json_text(headers: Mapping[str, str]) -> str:
    return json.dumps(dict(headers), separators=(",", ":"))
