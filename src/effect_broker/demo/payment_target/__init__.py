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

For tests and humans: ``GET /charges`` lists every row, ``GET /charges/count?order_id=X``
counts them, ``GET /healthz`` answers 200. Failure injection, armed at runtime:
``POST /_faults`` with ``{"hang_after_commit": n}`` (commit, then never answer: "the
target committed but the response was lost") or ``{"fail_before_commit": n}`` (503
without writing anything), ``GET /_faults`` shows them, ``DELETE /_faults`` clears them.

Run it (``effect-broker up --demo`` starts it for you)::

    python -m effect_broker.demo.payment_target --port 9000 --db /tmp/payments.sqlite3

The code is split by job: ``charges`` (request bodies and the SQLite table), ``app``
(the aiohttp handlers, fault injection) and ``command`` (the command line).

It needs only the standard library and aiohttp, so it can run anywhere the proxy runs.
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
from effect_broker.demo.payment_target.command import main, parse_args, serve

#: What ``python -m`` runs: how ``up``, the crash matrix and the tests start the target.
MODULE = "effect_broker.demo.payment_target"

__all__ = [
    "MODULE",
    "ChargeRequest",
    "ChargeStore",
    "Created",
    "Drifted",
    "InvalidCharge",
    "Replayed",
    "build_app",
    "main",
    "parse_args",
    "parse_charge",
    "serve",
]
