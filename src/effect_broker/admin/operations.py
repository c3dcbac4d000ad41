"""The admin API's operations: what a model cannot say about itself.

One row per route: its query model, whether it takes the resolve body, and every status
it can answer with the model of that answer, including the problem+json errors and
their ``type`` slugs. ``admin.openapi`` turns this table and the models into the
published document; a test checks the table against the routes the app registers.
Links feed effect ids from one answer into the next request, which is how a client (and
schemathesis' stateful phase) walks from the list to one effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel

from effect_broker.admin.requests import InspectQuery, ListQuery, Query
from effect_broker.admin.schemas import (
    Effect,
    EffectDetail,
    EffectPage,
    Health,
    Problem,
    Readiness,
    Receipt,
)


@dataclass(frozen=True)
class Reply:
    """One documented answer: a model (``Problem`` means problem+json) or raw text."""

    description: str
    model: type[BaseModel] | None = None
    media: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Operation:
    path: str
    method: str
    operation_id: str
    summary: str
    responses: Mapping[int, Reply]
    description: str = ""
    bearer: bool = True
    query: type[Query] | None = None
    body: bool = False


def problem(description: str) -> Reply:
    return Reply(description, Problem)


UNAUTHORIZED = Reply(
    "Missing or invalid bearer token (`unauthorized`), or no admin token configured on "
    "this sidecar (`admin-token-not-configured`).",
    Problem,
    headers={"WWW-Authenticate": 'Bearer realm="effect-broker-admin"'},
)
TOO_MANY_FAILED_CREDENTIALS = Reply(
    "Gateway mode: too many wrong bearer tokens from this address "
    "(`too-many-failed-credentials`); nothing was looked up. Retry after `Retry-After`.",
    Problem,
    headers={"Retry-After": "Seconds to wait before the next attempt counts."},
)
NOT_FOUND = problem(
    "No such effect for this tenant (`not-found`): unknown id, not a UUID, or another "
    "tenant's effect, which is never distinguished from a missing one."
)
TOO_LARGE = problem(
    "The request body is larger than the admin API reads (`body-too-large`)."
)


def _effect_links(expression: str) -> dict[str, str]:
    """Links from an answer carrying an effect id to every operation on that effect."""
    return {
        target: expression
        for target in ("getEffect", "getReceipt", "reconcileEffect", "resolveEffect")
    }


EFFECT_ID = "$response.body#/id"

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "/healthz",
        "get",
        "healthz",
        "Liveness: the process answers (the database is not checked).",
        {200: Reply("Alive.", Health)},
        bearer=False,
    ),
    Operation(
        "/readyz",
        "get",
        "readyz",
        "Readiness: the ledger answers and has every migration.",
        {
            200: Reply("Ready.", Readiness),
            503: Reply(
                "The ledger is unavailable, or migrations are pending.", Readiness
            ),
        },
        bearer=False,
    ),
    Operation(
        "/metrics",
        "get",
        "metrics",
        "Prometheus metrics; unknown-effect gauges from the ledger.",
        {
            200: Reply("Prometheus text exposition format 0.0.4.", media="text/plain"),
            503: problem("The ledger is unreachable (`store-unavailable`)."),
        },
        description=(
            "Open: labels are routes and statuses, never tenants. "
            "effect_broker_unknown_effects{route,status} and "
            "effect_broker_oldest_unknown_age_seconds{route} are refreshed from the "
            "ledger on every scrape; a route with nothing unknown reads 0."
        ),
        bearer=False,
    ),
    Operation(
        "/openapi.json",
        "get",
        "openapi",
        "This document.",
        {200: Reply("OpenAPI 3.1.", media="application/json")},
        bearer=False,
    ),
    Operation(
        "/v1/effects",
        "get",
        "listEffects",
        "List this tenant's effects, newest first.",
        {
            200: Reply(
                "One page of effects.",
                EffectPage,
                links=_effect_links("$response.body#/effects/0/id"),
            ),
            400: problem(
                "A parameter is invalid, repeated or unknown (`invalid-parameter`; "
                "`parameter` names it)."
            ),
            401: UNAUTHORIZED,
            429: TOO_MANY_FAILED_CREDENTIALS,
        },
        query=ListQuery,
    ),
    Operation(
        "/v1/effects/{effect_id}",
        "get",
        "getEffect",
        "Inspect one effect with its event history and guarantee.",
        {
            200: Reply(
                "The effect and its history.",
                EffectDetail,
                links=_effect_links(EFFECT_ID),
            ),
            400: problem("A parameter is invalid or unknown (`invalid-parameter`)."),
            401: UNAUTHORIZED,
            429: TOO_MANY_FAILED_CREDENTIALS,
            404: problem(
                "No such effect for this tenant (`not-found`), or `at_sequence` is "
                "after its last event (`no-such-event`)."
            ),
        },
        query=InspectQuery,
    ),
    Operation(
        "/v1/effects/{effect_id}/receipt",
        "get",
        "getReceipt",
        "The immutable receipt of a settled effect, decrypted.",
        {
            200: Reply(
                "What a client retry gets back.",
                Receipt,
                links=_effect_links("$response.body#/effect_id"),
            ),
            401: UNAUTHORIZED,
            429: TOO_MANY_FAILED_CREDENTIALS,
            404: problem(
                "No such effect (`not-found`), or it is not settled and has no receipt "
                "yet (`no-receipt`)."
            ),
        },
    ),
    Operation(
        "/v1/effects/{effect_id}/reconcile",
        "post",
        "reconcileEffect",
        "Have the reconciler look at this effect now.",
        {
            202: Reply(
                "Rescheduled; the reconciler acts next.",
                Effect,
                links=_effect_links(EFFECT_ID),
            ),
            401: UNAUTHORIZED,
            429: TOO_MANY_FAILED_CREDENTIALS,
            404: NOT_FOUND,
            409: problem(
                "Nothing automatic can settle it (`not-reconcilable`: an unsafe "
                "contract or manual_review; resolve it instead), it is already settled "
                "(`already-settled`), or it changed meanwhile (`stale-version`)."
            ),
        },
        description=(
            "For a retryable effect, or an outcome_unknown one whose contract lets the "
            "reconciler act (idempotent: resend with the same key; reconcilable: look "
            "it up), the next look is due immediately. Nothing is sent by this call."
        ),
    ),
    Operation(
        "/v1/effects/{effect_id}/resolve",
        "post",
        "resolveEffect",
        "Settle an unknown effect by hand, with reason and evidence.",
        {
            200: Reply(
                "Resolved; the effect as it is now.",
                Effect,
                links=_effect_links(EFFECT_ID),
            ),
            400: problem(
                "The request is incomplete or malformed (`invalid-resolution`; `field` "
                "names what)."
            ),
            401: UNAUTHORIZED,
            429: TOO_MANY_FAILED_CREDENTIALS,
            404: NOT_FOUND,
            409: problem(
                "Refused: already settled (`already-settled`), not awaiting an operator "
                "(`not-resolvable`), a requeue the contract forbids (`requeue-refused`: "
                "an unsafe target cannot be safely resent; resolve as did_not_happen "
                "with proof, or abandoned), or it changed meanwhile (`stale-version`)."
            ),
            413: TOO_LARGE,
        },
        description=(
            "Only from outcome_unknown or manual_review. `succeeded` (evidence "
            "required) stores an operator receipt that client retries are answered "
            "from: it happened. `not_committed` requeues the effect for dispatch, "
            "which only idempotent and reconcilable contracts allow. `did_not_happen` "
            "(evidence required: the proof) settles it as failed_final; a retry is told "
            "it did not happen and may be sent under a new Operation-Key. `abandoned` "
            "settles it as failed_final without a claim; a retry is told it may have "
            "happened, and that a new Operation-Key risks doing it twice. `failed` is "
            "the deprecated word for `abandoned`. The reason and evidence are recorded "
            "in the event history."
        ),
        body=True,
    ),
)
