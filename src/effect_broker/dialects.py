"""The proxy's own refusals, written in the error envelope of the target's SDK.

An SDK reads a failed answer in its own API's error shape; an RFC 9457 problem document
is none of them. stripe-python then raises a bare ``APIError`` ("Invalid response
object from API") with no code, and anthropic prints the raw dict. A contract may name
a dialect, and the proxy's own refusals on its routes (a payload mismatch, a request in
flight, an unknown outcome, a missing key) go out in that envelope instead:

- ``stripe``: ``{"error": {"type", "code", "message", ...}}``; a reused key with another
  payload is Stripe's own ``400 idempotency_error`` (``IdempotencyError``), a request in
  flight a ``409 idempotency_error``, other 4xx ``invalid_request_error``, 5xx
  ``api_error``. Stripe answers no 422, so a 422 becomes a 400.
- ``openai``: ``{"error": {"type", "code", "message", "param"}}`` with the status kept,
  which the SDK maps to its exception classes by status.
- ``anthropic``: ``{"type": "error", "error": {"type", "message"}}``, status kept.

Whatever the dialect, the problem document itself travels inside the error
(``problem``), its ``type`` URI as ``problem_type``; the ``Effect-*`` headers and the
retry hints are untouched. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from effect_broker.config.contracts import ErrorDialect
from effect_broker.errors import PROBLEM_TYPE_BASE

#: Problem slugs that Stripe itself reports as ``idempotency_error``.
STRIPE_IDEMPOTENCY = frozenset({"payload-mismatch", "in-flight"})

ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


def slug_of(document: Mapping[str, Any]) -> str:
    """The stable slug of a problem's ``type`` URI (``payload-mismatch``)."""
    uri = str(document.get("type", ""))
    return uri.removeprefix(PROBLEM_TYPE_BASE)


def translate(
    dialect: ErrorDialect, status: int, document: Mapping[str, Any]
) -> tuple[int, dict[str, Any]]:
    """The status and body of ``document`` in ``dialect`` (unchanged for ``problem``)."""
    if dialect == "problem":
        return status, dict(document)
    slug = slug_of(document)
    message = str(document.get("message") or document.get("detail") or "")
    kept = {
        "code": slug.replace("-", "_"),
        "message": message,
        "problem_type": document.get("type"),
        "problem": dict(document),
    }
    if dialect == "stripe":
        if slug in STRIPE_IDEMPOTENCY:
            kind = "idempotency_error"
        else:
            kind = "invalid_request_error" if status < 500 else "api_error"
        out_status = 400 if status == 422 else status
        return out_status, {"error": {"type": kind, "param": None, **kept}}
    if dialect == "openai":
        kind = "invalid_request_error" if status < 500 else "server_error"
        return status, {"error": {"type": kind, "param": None, **kept}}
    kind = ANTHROPIC_TYPES.get(
        status, "invalid_request_error" if status < 500 else "api_error"
    )
    return status, {"type": "error", "error": {"type": kind, **kept}}
