"""What the engine did with a tool call, as the JSON-RPC answer an MCP client reads.

A result (first or replayed) is always ``application/json`` under this request's own
id, even when the target streamed it as SSE: the client asked for this id, and a stored
stream carries another's. Every answer for a recorded call carries ``Effect-Id`` and
``Effect-Status``; refusals carry the same cause, detail and effect as the proxy's
problem documents, in ``error.data``.
"""

from __future__ import annotations

from aiohttp import web

from effect_broker.answers import MCP, Relay, answer_for, as_jsonrpc, stream_overflow
from effect_broker.engine import Answered, Outcome, StoredResponse
from effect_broker.errors import (
    EffectBrokerError,
    InFlight,
    OutcomeUnknown,
    PayloadMismatch,
    ResolvedByOperator,
    SendWithheld,
    UpstreamBusy,
    UpstreamTLS,
    UpstreamUnreachable,
)
from effect_broker.headers import REPLAYED_HEADER
from effect_broker.mcp.answers import content_type
from effect_broker.mcp.jsonrpc import (
    IN_FLIGHT,
    NOT_SENT,
    OUTCOME_UNKNOWN,
    PAYLOAD_MISMATCH,
    PROXY_ERROR,
    RESOLVED_BY_OPERATOR,
    RequestId,
    find_response,
    result_document,
    shaped_for,
)
from effect_broker.models import Effect
from effect_broker.problems import effect_headers

# A result streamed past a receipt's size is framed anew for this client.
_REFRAMED = ("content-length", "transfer-encoding")
# Upstream headers that describe the first answer's framing, or its session.
_NOT_COPIED = {"content-length", "content-type", "transfer-encoding", "content-encoding"}
#: The JSON-RPC error code of each problem the shared table can answer with.
CODES: dict[type[EffectBrokerError], int] = {
    PayloadMismatch: PAYLOAD_MISMATCH,
    InFlight: IN_FLIGHT,
    OutcomeUnknown: OUTCOME_UNKNOWN,
    ResolvedByOperator: RESOLVED_BY_OPERATOR,
    UpstreamBusy: NOT_SENT,
    SendWithheld: NOT_SENT,
    UpstreamTLS: NOT_SENT,
    UpstreamUnreachable: NOT_SENT,
}


def error_code(error: EffectBrokerError) -> int:
    """The server-defined JSON-RPC code that names ``error``'s problem."""
    return CODES.get(type(error), PROXY_ERROR)


async def render(
    outcome: Outcome,
    request_id: RequestId,
    request: web.Request,
    revision: str | None = None,
) -> web.StreamResponse:
    """The outcome as this client's answer, as the shared table (``answers``) words it
    for MCP; a result in the shape of the client's ``revision`` (``jsonrpc.shaped_for``),
    whichever revision recorded it, and a refusal as a JSON-RPC error whose
    ``error.data`` is the problem document the HTTP proxy would have sent."""
    if isinstance(outcome, Answered) and outcome.attempt.overflow is not None:
        # As the server sent it, framed anew for this client.
        return await stream_overflow(outcome, request, dropped=_REFRAMED, reason=False)
    answer = answer_for(outcome, MCP)
    if isinstance(answer, Relay):
        return _result(
            answer.response,
            answer.effect,
            request_id,
            replayed=answer.replayed,
            revision=revision,
        )
    return as_jsonrpc(answer, request_id, error_code(answer.error))


def _result(
    response: StoredResponse,
    effect: Effect,
    request_id: RequestId,
    *,
    replayed: bool,
    revision: str | None = None,
) -> web.Response:
    answer = find_response(content_type(response), response.body)
    if answer is not None and "result" in answer:
        answer["result"] = shaped_for(answer["result"], revision)
    if answer is None:  # no JSON-RPC inside (an HTTP refusal): the answer as it came
        out = web.Response(status=response.status, body=response.body)
        for name, value in response.headers:
            if name.lower() not in ("content-length", "effect-id", "effect-status"):
                out.headers.add(name, value)
    else:
        out = web.Response(
            status=200,
            body=result_document(request_id, answer),
            content_type="application/json",
        )
        if not replayed:  # the live answer's own headers (a new session id, say)
            for name, value in response.headers:
                if name.lower() not in _NOT_COPIED:
                    out.headers.add(name, value)
    out.headers.update(effect_headers(effect))
    if replayed:
        out.headers[REPLAYED_HEADER] = "true"
    return out
