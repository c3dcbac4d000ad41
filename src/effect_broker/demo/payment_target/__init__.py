"""A demo payment service: the *target* whose own table proves how many charges happened.

effect-broker can only promise what the target behind it can prove, so the demos and the
crash matrix need a target with an authoritative record. This one keeps every charge in
a SQLite table (WAL mode) and commits each charge before it answers. After any crash,
timeout or retry storm, counting rows in ``charges`` is the ground truth.

It offers the three kinds of target that effect-broker's safety classes describe, chosen
by path prefix and all writing the same ``charges`` table:

``POST /idempotent/v1/charges`` (header ``Idempotency-Key``)
    Deduplicates like a real payment provider: the same key with the same body gets the
    stored response back (``Idempotent-Replayed: true``), the same key with another body
    gets 422. Keys are forgotten after ``--key-retention`` seconds, as real providers
    forget them: a retry after that horizon charges again. That is the retention risk.

``POST /reconcilable/v1/charges`` (header ``X-Correlation-Id``)
    Never deduplicates, but records the correlation id and answers
    ``GET /reconcilable/v1/charges?correlation_id=X`` (200 with the charge, or 404). The
    lookup is an eventually consistent index: a charge shows up there only
    ``--settlement-delay`` seconds after its commit, so a 404 is conclusive only after
    that bound.

``POST /unsafe/v1/charges``
    No key, no lookup: every request is a new charge. Nothing can tell a lost response
    from a request that never arrived.

``POST /transactional/v1/charges`` (``Effect-Attempt-Key``; with ``--database-url``)
    Keeps its charges in PostgreSQL and runs the target kit: the charge's INSERT and
    the receipt for the attempt key commit in one transaction, and the kit's lookup
    and tombstone endpoints (``/.well-known/effect-broker/...``, secret from
    ``$PAYMENT_TARGET_KIT_SECRET``) let the proxy prove whether an attempt committed or
    never will. Two more faults exist in this mode, ``hold_before_receipt`` and
    ``hold_before_commit``: the next charge stops inside its open transaction until
    ``POST /_faults/release`` (``GET /_faults`` shows how many are ``held``).

For tests and humans: ``GET /charges`` lists every row, ``GET /charges/count?order_id=X``
counts them, ``GET /healthz`` answers 200. Failure injection, armed at runtime:
``POST /_faults`` with ``{"hang_after_commit": n}`` (commit, then never answer: "the
target committed but the response was lost") or ``{"fail_before_commit": n}`` (503
without writing anything), ``GET /_faults`` shows them, ``DELETE /_faults`` clears them.

Run it (``effect-broker up --demo`` starts it for you)::

    python -m effect_broker.demo.payment_target --port 9000 --db /tmp/payments.sqlite3

The code is split by job: ``charges`` (request bodies and the SQLite table),
``pg_charges`` (transactional mode's table, with the kit), ``faults`` (what
``/_faults`` arms), ``state`` (the app's keys and answer type), ``delivery`` (an
answer sent, withheld or cut by a fault), ``app`` (the aiohttp handlers) and
``command`` (the command line).

Without ``--database-url`` it needs only the standard library and aiohttp (and asyncpg
installed, as the proxy has it), so it can run anywhere the proxy runs.
"""

from effect_broker.demo.payment_target.app import build_app
from effect_broker.demo.payment_target.charges import (
    ChargeRequest,
    ChargeStore,
    Created,
    Drifted,
    InvalidCharge,
    Replayed,
    parse_charge,
)
from effect_broker.demo.payment_target.command import (
    BANNER,
    KIT_SECRET_ENV,
    MODULE,
    command,
    main,
    parse_args,
    serve,
)

__all__ = [
    "BANNER",
    "KIT_SECRET_ENV",
    "MODULE",
    "ChargeRequest",
    "ChargeStore",
    "Created",
    "Drifted",
    "InvalidCharge",
    "Replayed",
    "build_app",
    "command",
    "main",
    "parse_args",
    "parse_charge",
    "serve",
]
