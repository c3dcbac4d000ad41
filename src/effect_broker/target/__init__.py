"""The target kit: what a Python service on PostgreSQL runs to be ``transactional``.

The service stores each attempt's response as a receipt in the same transaction as its
mutation, under the attempt key the proxy sent; the kit's lookup and tombstone endpoints
let the proxy prove, after a lost answer, whether that attempt committed or never will.

Only the standard library is imported here and in the pure modules, so the proxy and
services that use another stack can import the package; each driver or framework has
its own module, imported by those who use it:

``protocol``      the wire format, shared with the proxy
``outcomes``      values, errors and standard answers (``AttemptTaken``, ...)
``asyncpg``       ``prior``/``record``/``run_attempt``/``lookup``/``tombstone``,
                  ``install``/``check_installed`` and ``AsyncpgBackend``
``psycopg``       the same for psycopg 3 (async), and ``PsycopgBackend``
``aiohttp``       ``setup(app, backend, secret=...)``: the endpoints on aiohttp
``asgi``          ``KitMiddleware``: the endpoints for Starlette, FastAPI, any ASGI app
``schema``        the table's migrations (``python -m effect_broker.target.schema``)
"""

from effect_broker.target.outcomes import (
    AttemptInProgress,
    AttemptTaken,
    KitError,
    KitNotInstalled,
    MalformedAttemptKey,
    Tombstoned,
    TombstoneResult,
    answer_for,
    read_attempt_key,
    tombstoned_answer,
)
from effect_broker.target.protocol import (
    ATTEMPT_KEY_HEADER,
    SECRET_HEADER,
    AttemptReport,
    AttemptState,
    StoredAnswer,
)

__all__ = [
    "ATTEMPT_KEY_HEADER",
    "SECRET_HEADER",
    "AttemptInProgress",
    "AttemptReport",
    "AttemptState",
    "AttemptTaken",
    "KitError",
    "KitNotInstalled",
    "MalformedAttemptKey",
    "StoredAnswer",
    "TombstoneResult",
    "Tombstoned",
    "answer_for",
    "read_attempt_key",
    "tombstoned_answer",
]
