"""RFC 9457 problem details: every error answer effect-broker makes, in one shape.

One function turns an ``EffectBrokerError`` into a problem document; the proxy, the
admin API and the raw CONNECT front only choose how to send it (an aiohttp response, or
bytes on a socket aiohttp never saw). The ``type`` is stable per cause so clients can
branch on it; ``detail`` is written for the person reading the log. No stack trace ever
reaches a client.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from http import HTTPStatus
from typing import Any

from aiohttp import web

from effect_broker.errors import EffectBrokerError
from effect_broker.models import Effect

PROBLEM_JSON = "application/problem+json"


def effect_headers(effect: Effect) -> dict[str, str]:
    return {"Effect-Id": str(effect.effect_id), "Effect-Status": str(effect.status)}


@dataclass(frozen=True, slots=True)
class Problem:
    status: int
    headers: Mapping[str, str]
    body: bytes
    document: Mapping[str, Any] | None = None  # the problem document ``body`` encodes


#: The document of a proxy-made problem answer, so it can be re-written in the dialect
#: of the client's SDK (``dialects``); an upstream's own answers never carry it.
PROBLEM_DOCUMENT = web.ResponseKey("problem_document", dict)


def problem(
    error: EffectBrokerError,
    *,
    status: int | None = None,
    effect: Effect | None = None,
    retry_after: timedelta | None = None,
    extra: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    retry_helps: bool | None = None,
    message: str | None = None,
) -> Problem:
    """The problem document for ``error``, with the effect it concerns if any.

    Beside RFC 9457's members it carries ``message``, the field SDKs (openai, stripe)
    show in their exceptions, and it says in ``x-should-retry`` and
    ``Stripe-Should-Retry`` whether sending the same request again can help, so those
    SDKs neither hammer an answer that will not change nor give up on one that will.
    """
    code = status or error.status
    body: dict[str, Any] = {
        "type": error.type_uri,
        "title": (type(error).__doc__ or "").strip().split("\n")[0],
        "status": code,
        "detail": error.message,
        "message": message or error.message,
    }
    should_retry = (
        "true" if (error.retry_helps if retry_helps is None else retry_helps) else "false"
    )
    out_headers: dict[str, str] = {
        "x-should-retry": should_retry,
        "Stripe-Should-Retry": should_retry,
        **(headers or {}),
    }
    if effect is not None:
        body["effect_id"] = str(effect.effect_id)
        body["effect_status"] = str(effect.status)
        out_headers.update(effect_headers(effect))
    if retry_after is not None:
        seconds = max(1, math.ceil(retry_after.total_seconds()))
        out_headers["Retry-After"] = str(seconds)
        body["retry_after_seconds"] = seconds
    body.update(error.extra)
    body.update(extra or {})
    return Problem(code, out_headers, json.dumps(body).encode(), body)


def problem_response(error: EffectBrokerError, **options: Any) -> web.Response:
    """``problem`` as an aiohttp response; ``options`` are those of ``problem``."""
    answer = problem(error, **options)
    response = web.Response(
        status=answer.status,
        body=answer.body,
        content_type=PROBLEM_JSON,
        headers=answer.headers,
    )
    response[PROBLEM_DOCUMENT] = dict(answer.document or {})
    return response


def problem_bytes(error: EffectBrokerError, **options: Any) -> bytes:
    """``problem`` as a complete HTTP/1.1 message that closes the connection, for a
    socket no HTTP server handles (the CONNECT front)."""
    answer = problem(error, **options)
    head = [
        f"HTTP/1.1 {answer.status} {HTTPStatus(answer.status).phrase}",
        f"Content-Type: {PROBLEM_JSON}",
        f"Content-Length: {len(answer.body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in answer.headers.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + answer.body


def jsonrpc_problem(
    error: EffectBrokerError,
    *,
    request_id: str | int | None,
    code: int,
    status: int = 200,
    **options: Any,
) -> Problem:
    """``problem`` as a JSON-RPC error for an MCP client: the same cause, detail and
    effect, in ``error.data``; ``options`` are those of ``problem``.

    An error for a request the proxy could read goes back as ``200 OK`` (the transport's
    way: the SDK raises it as the tool call's error); one for a body it could not read
    at all keeps an HTTP error status.
    """
    return jsonrpc_error(
        problem(error, **options), request_id=request_id, code=code, status=status
    )


def jsonrpc_error(
    answer: Problem, *, request_id: str | int | None, code: int, status: int = 200
) -> Problem:
    """A problem as a JSON-RPC error under ``code``: the document in ``error.data``,
    its ``message`` as the error's; ``status`` is the transport's (see above)."""
    data = json.loads(answer.body)
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": data["message"], "data": data},
    }
    return Problem(status, answer.headers, json.dumps(body).encode())
