"""The admin API described as OpenAPI 3.1, served at ``/openapi.json``.

Hand-written on purpose: it documents what the handlers promise (problem types, the
guarantee sentence, what is refused and why), which a generator could not know. A test
checks that every route the app registers appears here, and that every ``$ref``
resolves. Enumerations come from the domain enums so they cannot drift.
"""

from __future__ import annotations

from typing import Any

from effect_broker.admin.views import DEFAULT_LIMIT, MAX_LIMIT
from effect_broker.engine.resolution import MAX_EXTERNAL_ID, MAX_REASON, Resolution
from effect_broker.errors import PROBLEM_TYPE_BASE
from effect_broker.models import EffectStatus, ReceiptSource, SafetyClass

PROBLEM_JSON = "application/problem+json"

_STRING_OR_NULL: dict[str, Any] = {"type": ["string", "null"]}
_TIME_OR_NULL: dict[str, Any] = {"type": ["string", "null"], "format": "date-time"}
_BEARER: list[dict[str, list[str]]] = [{"bearerAuth": []}]
_OPEN: list[dict[str, list[str]]] = []


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def _json(schema_name: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/json": {
                "schema": {"$ref": f"#/components/schemas/{schema_name}"}
            }
        },
    }


_V1_ERRORS: dict[str, Any] = {
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": _problem(
        "No such effect for this tenant (`not-found`): unknown id, not a UUID, or "
        "another tenant's effect, which is never distinguished from a missing one."
    ),
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "effect-broker admin API",
        "version": "1",
        "description": (
            "List, inspect, reconcile and resolve the effects effect-broker recorded. "
            "Every route under /v1 needs `Authorization: Bearer <token>`: in a sidecar "
            "the EFFECT_BROKER_ADMIN_TOKEN, which means the sidecar's tenant; in a "
            "gateway one of the tenant's API keys (ebk_...), which means that tenant. "
            "Errors are RFC 9457 problem+json with a stable `type` under "
            f"{PROBLEM_TYPE_BASE}. There is deliberately no 'retry anyway'."
        ),
    },
    "paths": {
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness: the process answers (the database is not checked).",
                "security": _OPEN,
                "responses": {
                    "200": {
                        "description": "Alive.",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {"status": {"const": "ok"}},
                                }
                            }
                        },
                    }
                },
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: the ledger answers and has every migration.",
                "security": _OPEN,
                "responses": {
                    "200": {"description": 'Ready: `{"status": "ready"}`.'},
                    "503": {
                        "description": (
                            'Unavailable (`{"status": "unavailable", "detail"}`) '
                            'or migrations pending (`{"status": "migrations '
                            'pending", "pending": [...]}`).'
                        )
                    },
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics; unknown-effect gauges from the ledger.",
                "description": (
                    "Open: labels are routes and statuses, never tenants. "
                    "effect_broker_unknown_effects{route,status} and "
                    "effect_broker_oldest_unknown_age_seconds{route} are refreshed from "
                    "the ledger on every scrape; a route with nothing unknown reads 0."
                ),
                "security": _OPEN,
                "responses": {
                    "200": {
                        "description": "Prometheus text exposition format 0.0.4.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "503": _problem("The ledger is unreachable (`store-unavailable`)."),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document.",
                "security": _OPEN,
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1.",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
        "/v1/effects": {
            "get": {
                "operationId": "listEffects",
                "summary": "List this tenant's effects, newest first.",
                "security": _BEARER,
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "description": "Only these statuses; repeat for several.",
                        "schema": {
                            "type": "array",
                            "items": {"$ref": "#/components/schemas/EffectStatus"},
                        },
                        "style": "form",
                        "explode": True,
                    },
                    {
                        "name": "route",
                        "in": "query",
                        "description": "Only effects of this route (routes.yaml name).",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "operation_key_prefix",
                        "in": "query",
                        "description": "Only operation keys starting with this text.",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "older_than",
                        "in": "query",
                        "description": "Only effects created at least this many "
                        "seconds ago.",
                        "schema": {"type": "number", "minimum": 0},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "description": "Page size.",
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_LIMIT,
                            "default": DEFAULT_LIMIT,
                        },
                    },
                    {
                        "name": "cursor",
                        "in": "query",
                        "description": "The `next_cursor` of the previous page, as is.",
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": _json("EffectPage", "One page of effects."),
                    "400": _problem(
                        "A parameter is invalid or unknown (`invalid-parameter`; "
                        "`parameter` names it)."
                    ),
                    "401": {"$ref": "#/components/responses/Unauthorized"},
                },
            }
        },
        "/v1/effects/{effect_id}": {
            "get": {
                "operationId": "getEffect",
                "summary": "Inspect one effect with its event history and guarantee.",
                "security": _BEARER,
                "parameters": [
                    {"$ref": "#/components/parameters/EffectId"},
                    {
                        "name": "at_sequence",
                        "in": "query",
                        "description": "Also fold the history up to this event: what "
                        "the ledger believed at that step.",
                        "schema": {"type": "integer", "minimum": 1},
                    },
                ],
                "responses": {
                    "200": _json("EffectDetail", "The effect and its history."),
                    "400": _problem(
                        "at_sequence is not an event of this effect "
                        "(`invalid-parameter`)."
                    ),
                    **_V1_ERRORS,
                },
            }
        },
        "/v1/effects/{effect_id}/receipt": {
            "get": {
                "operationId": "getReceipt",
                "summary": "The immutable receipt of a settled effect, decrypted.",
                "security": _BEARER,
                "parameters": [{"$ref": "#/components/parameters/EffectId"}],
                "responses": {
                    "200": _json("Receipt", "What a client retry gets back."),
                    "401": {"$ref": "#/components/responses/Unauthorized"},
                    "404": _problem(
                        "No such effect (`not-found`), or it is not settled and has "
                        "no receipt yet (`no-receipt`)."
                    ),
                },
            }
        },
        "/v1/effects/{effect_id}/reconcile": {
            "post": {
                "operationId": "reconcileEffect",
                "summary": "Have the reconciler look at this effect now.",
                "description": (
                    "For a retryable effect, or an outcome_unknown one whose contract "
                    "lets the reconciler act (idempotent: resend with the same key; "
                    "reconcilable: look it up), the next look is due immediately. "
                    "Nothing is sent by this call itself."
                ),
                "security": _BEARER,
                "parameters": [{"$ref": "#/components/parameters/EffectId"}],
                "responses": {
                    "202": _json("Effect", "Rescheduled; the reconciler acts next."),
                    "409": _problem(
                        "Nothing automatic can settle it (`not-reconcilable`: an unsafe "
                        "contract or manual_review; resolve it instead), it is already "
                        "settled (`already-settled`), or it changed meanwhile "
                        "(`stale-version`)."
                    ),
                    **_V1_ERRORS,
                },
            }
        },
        "/v1/effects/{effect_id}/resolve": {
            "post": {
                "operationId": "resolveEffect",
                "summary": "Settle an unknown effect by hand, with reason and evidence.",
                "description": (
                    "Only from outcome_unknown or manual_review. `succeeded` stores an "
                    "operator receipt (200, JSON) that client retries replay; `failed` "
                    "stores a 422 receipt; `not_committed` requeues the effect for "
                    "dispatch, which only idempotent and reconcilable contracts allow. "
                    "The reason and evidence are recorded in the event history."
                ),
                "security": _BEARER,
                "parameters": [{"$ref": "#/components/parameters/EffectId"}],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/ResolutionRequest"}
                        }
                    },
                },
                "responses": {
                    "200": _json("Effect", "Resolved; the effect as it is now."),
                    "400": _problem(
                        "The request is incomplete or malformed "
                        "(`invalid-resolution`; `field` names what)."
                    ),
                    "409": _problem(
                        "Refused: already settled (`already-settled`), not awaiting an "
                        "operator (`not-resolvable`), a requeue the contract forbids "
                        "(`requeue-refused`: an unsafe target cannot be safely resent; "
                        "resolve as failed and use a new Operation-Key), or it changed "
                        "meanwhile (`stale-version`)."
                    ),
                    **_V1_ERRORS,
                },
            }
        },
    },
    "components": {
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": (
                    "Sidecar: EFFECT_BROKER_ADMIN_TOKEN (unset: every /v1 call is "
                    "401 `admin-token-not-configured`). Gateway: a tenant API key."
                ),
            }
        },
        "parameters": {
            "EffectId": {
                "name": "effect_id",
                "in": "path",
                "required": True,
                "description": "The effect's id (the Effect-Id response header).",
                "schema": {"type": "string", "format": "uuid"},
            }
        },
        "responses": {
            "Unauthorized": {
                "description": (
                    "Missing or invalid bearer token (`unauthorized`), or no admin "
                    "token configured on this sidecar (`admin-token-not-configured`)."
                ),
                "headers": {
                    "WWW-Authenticate": {
                        "description": 'Bearer realm="effect-broker-admin"',
                        "schema": {"type": "string"},
                    }
                },
                "content": {
                    PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}
                },
            }
        },
        "schemas": {
            "Problem": {
                "type": "object",
                "description": "RFC 9457 problem details.",
                "required": ["type", "title", "status", "detail"],
                "properties": {
                    "type": {
                        "type": "string",
                        "format": "uri",
                        "description": f"Stable per cause, under {PROBLEM_TYPE_BASE}.",
                    },
                    "title": {"type": "string"},
                    "status": {"type": "integer"},
                    "detail": {"type": "string", "description": "What to do about it."},
                    "parameter": {
                        "type": "string",
                        "description": "invalid-parameter: the parameter.",
                    },
                    "field": {
                        "type": "string",
                        "description": "invalid-resolution: the field.",
                    },
                },
            },
            "EffectStatus": {"type": "string", "enum": [s.value for s in EffectStatus]},
            "SafetyClass": {"type": "string", "enum": [s.value for s in SafetyClass]},
            "Effect": {
                "type": "object",
                "required": ["id", "operation_key", "route", "contract", "status"],
                "properties": {
                    "id": {"type": "string", "format": "uuid"},
                    "tenant": {"type": "string"},
                    "operation_key": {"type": "string"},
                    "route": {"type": "string"},
                    "contract": {"type": "string", "description": "name@version"},
                    "safety": {"$ref": "#/components/schemas/SafetyClass"},
                    "status": {"$ref": "#/components/schemas/EffectStatus"},
                    "version": {"type": "integer"},
                    "attempts": {"type": "integer"},
                    "downstream_key": {
                        "type": "string",
                        "description": "The idempotency or correlation key the target "
                        "saw: search the target's records by it.",
                    },
                    "created_at": {"type": "string", "format": "date-time"},
                    "updated_at": {"type": "string", "format": "date-time"},
                    "first_dispatched_at": _TIME_OR_NULL,
                    "due_at": _TIME_OR_NULL,
                    "retention_deadline": _TIME_OR_NULL,
                    "settlement_deadline": _TIME_OR_NULL,
                    "lease_owner": _STRING_OR_NULL,
                    "lease_expires_at": _TIME_OR_NULL,
                    "last_error": _STRING_OR_NULL,
                    "request_preview": {
                        "type": "object",
                        "description": "Method, path, content type and size; no values.",
                    },
                },
            },
            "EffectPage": {
                "type": "object",
                "required": ["effects", "next_cursor"],
                "properties": {
                    "effects": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/Effect"},
                    },
                    "next_cursor": _STRING_OR_NULL,
                },
            },
            "Event": {
                "type": "object",
                "properties": {
                    "seq": {"type": "integer"},
                    "kind": {"type": "string"},
                    "from": {
                        "oneOf": [
                            {"$ref": "#/components/schemas/EffectStatus"},
                            {"type": "null"},
                        ]
                    },
                    "to": {"$ref": "#/components/schemas/EffectStatus"},
                    "actor": {"type": "string"},
                    "details": {"type": "object"},
                    "occurred_at": {"type": "string", "format": "date-time"},
                    "prev_digest": {"type": "string", "description": "hex"},
                    "digest": {"type": "string", "description": "hex"},
                },
            },
            "Attempt": {
                "type": "object",
                "properties": {
                    "attempt_no": {"type": "integer"},
                    "owner": {"type": "string"},
                    "started_at": {"type": "string", "format": "date-time"},
                },
            },
            "HistoryState": {
                "type": "object",
                "description": "The effect as the events up to `seq` fold to.",
                "properties": {
                    "seq": {"type": "integer"},
                    "status": {"$ref": "#/components/schemas/EffectStatus"},
                    "attempts": {"type": "integer"},
                    "last_kind": {"type": "string"},
                    "last_actor": {"type": "string"},
                    "occurred_at": {"type": "string", "format": "date-time"},
                },
            },
            "EffectDetail": {
                "allOf": [
                    {"$ref": "#/components/schemas/Effect"},
                    {
                        "type": "object",
                        "required": ["guarantee", "chain_intact", "history"],
                        "properties": {
                            "guarantee": {
                                "type": "string",
                                "description": "What this safety class lets the proxy "
                                "prove, and what it cannot.",
                            },
                            "chain_intact": {
                                "type": "boolean",
                                "description": "Every event digest verifies.",
                            },
                            "history": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/Event"},
                            },
                            "attempt_log": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/Attempt"},
                            },
                            "at_sequence": {"$ref": "#/components/schemas/HistoryState"},
                        },
                    },
                ]
            },
            "Receipt": {
                "type": "object",
                "properties": {
                    "effect_id": {"type": "string", "format": "uuid"},
                    "status_code": {"type": "integer"},
                    "source": {
                        "type": "string",
                        "enum": [s.value for s in ReceiptSource],
                    },
                    "external_id": _STRING_OR_NULL,
                    "recorded_at": {"type": "string", "format": "date-time"},
                    "response": {
                        "type": "object",
                        "properties": {
                            "status": {"type": "integer"},
                            "reason": {"type": "string"},
                            "headers": {
                                "type": "array",
                                "description": "[name, value] pairs, in order.",
                                "items": {
                                    "type": "array",
                                    "items": {"type": "string"},
                                    "minItems": 2,
                                    "maxItems": 2,
                                },
                            },
                            "body_base64": {"type": "string"},
                            "body_text": {
                                "type": ["string", "null"],
                                "description": "The body, if it is UTF-8.",
                            },
                        },
                    },
                },
            },
            "ResolutionRequest": {
                "type": "object",
                "additionalProperties": False,
                "required": ["resolution", "reason"],
                "properties": {
                    "resolution": {
                        "type": "string",
                        "enum": [r.value for r in Resolution],
                    },
                    "reason": {"type": "string", "minLength": 1, "maxLength": MAX_REASON},
                    "evidence": {
                        "type": "object",
                        "description": "Required and non-empty for `succeeded`, e.g. "
                        '{"external_id": "ch_1", "checked_in": "stripe dashboard"}.',
                    },
                    "external_id": {
                        "type": "string",
                        "maxLength": MAX_EXTERNAL_ID,
                        "description": "The target's id for the effect, kept on the "
                        "receipt.",
                    },
                },
            },
        },
    },
}
