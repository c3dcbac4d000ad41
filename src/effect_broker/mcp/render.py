"""What the engine did with a tool call, as the JSON-RPC answer an MCP client reads.

A result (first or replayed) is always ``application/json`` under this request's own
id, even when the target streamed it as SSE: the client asked for this id, and a stored
stream carries another's. Every answer for a recorded call carries ``Effect-Id`` and
``Effect-Status``; refusals carry the same cause, detail and effect as the proxy's
problem documents, in ``error.data``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.resolution import read_operator_receipt
from effect_broker.engine.results import (
    Answered,
    Busy,
    Conflict,
    NotSent,
    Outcome,
    Replayed,
    Unknowable,
    Unknown,
)
from effect_broker.errors import (
    EffectBrokerError,
    InFlight,
    OutcomeUnknown,
    PayloadMismatch,
    ResolvedByOperator,
    SendWithheld,
    UpstreamUnreachable,
)
from effect_broker.mcp.answers import SERVER_REQUEST_CUT, content_type
from effect_broker.mcp.jsonrpc import (
    IN_FLIGHT,
    NOT_SENT,
    OUTCOME_UNKNOWN,
    PAYLOAD_MISMATCH,
    RESOLVED_BY_OPERATOR,
    RequestId,
    find_response,
    result_document,
    shaped_for,
)
from effect_broker.models import Effect, ReceiptSource, SafetyClass
from effect_broker.problems import Problem, effect_headers, jsonrpc_problem

REPLAYED_HEADER = "Idempotent-Replayed"
# Upstream headers that describe the first answer's framing, or its session.
_NOT_COPIED = {"content-length", "content-type", "transfer-encoding", "content-encoding"}


def json_response(answer: Problem) -> web.Response:
    return web.Response(
        status=answer.status,
        body=answer.body,
        headers=answer.headers,
        content_type="application/json",
    )


async def render(
    outcome: Outcome,
    request_id: RequestId,
    request: web.Request,
    revision: str | None = None,
) -> web.StreamResponse:
    """The outcome as this client's answer; a result in the shape of the client's
    ``revision`` (``jsonrpc.shaped_for``), whichever revision recorded it."""
    effect = outcome.effect
    match outcome:
        case Answered(attempt=attempt) if attempt.overflow is not None:
            return await _stream_overflow(outcome, request)
        case Answered(attempt=attempt):
            assert attempt.response is not None
            return _result(
                attempt.response, effect, request_id, replayed=False, revision=revision
            )
        case Replayed(source=ReceiptSource.OPERATOR, response=response):
            return _operator(effect, response, request_id)
        case Replayed(response=response):
            return _result(response, effect, request_id, replayed=True, revision=revision)
        case Conflict():
            return _error(
                PayloadMismatch(
                    "this operation key was first used with different arguments; use a "
                    "new key for a new intent, or resend the original arguments"
                ),
                effect,
                request_id,
                PAYLOAD_MISMATCH,
            )
        case Busy(reason=reason, retry_after=retry_after):
            return _error(
                InFlight(f"this tool call is {reason}"),
                effect,
                request_id,
                IN_FLIGHT,
                retry_after=retry_after,
            )
        case NotSent(detail=detail, retry_after=retry_after, withheld=True):
            return _error(
                SendWithheld(
                    f"{detail}; calling again with the same operation key is safe"
                ),
                effect,
                request_id,
                NOT_SENT,
                retry_after=retry_after,
            )
        case NotSent(detail=detail, retry_after=retry_after):
            return _error(
                UpstreamUnreachable(
                    f"could not reach the MCP server ({detail}); nothing was sent, so "
                    "calling again with the same operation key is safe"
                ),
                effect,
                request_id,
                NOT_SENT,
                retry_after=retry_after,
            )
        case Unknown():
            return _unknown(outcome, request_id)
    raise AssertionError(f"unhandled outcome {outcome!r}")


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


def _error(
    error: EffectBrokerError,
    effect: Effect,
    request_id: RequestId,
    code: int,
    **options: Any,
) -> web.Response:
    return json_response(
        jsonrpc_problem(error, request_id=request_id, code=code, effect=effect, **options)
    )


def _unknown(outcome: Unknown, request_id: RequestId) -> web.Response:
    effect = outcome.effect
    if outcome.detail.startswith(SERVER_REQUEST_CUT):
        return _error(
            OutcomeUnknown(_server_request_detail(outcome)),
            effect,
            request_id,
            OUTCOME_UNKNOWN,
            retry_helps=False,  # a resend would stop at the same question
        )
    if outcome.why in (Unknowable.TIMED_OUT, Unknowable.LOST):
        if effect.safety is SafetyClass.UNSAFE:
            advice = "It will not be sent again; an operator resolves it."
        else:
            advice = "Calling again with the same operation key is safe."
        detail = (
            f"the MCP server may have run this tool call, but its answer was lost "
            f"({outcome.detail}). {advice}"
        )
        retry_helps = effect.safety is not SafetyClass.UNSAFE
    elif outcome.why is Unknowable.AWAITING_OPERATOR:
        detail = (
            f"whether this tool call happened is unknown ({outcome.detail}); it will "
            "not be sent again: do not call it under a new key before an operator "
            "has checked the server"
        )
        retry_helps = False
    else:
        detail = f"{outcome.detail}; it was not sent again"
        retry_helps = True
    return _error(
        OutcomeUnknown(detail),
        effect,
        request_id,
        OUTCOME_UNKNOWN,
        retry_after=outcome.retry_after,
        retry_helps=retry_helps,
    )


def _server_request_detail(outcome: Unknown) -> str:
    """Why a call cut at a server request is unknown, and what to change."""
    method = outcome.detail.removeprefix(SERVER_REQUEST_CUT)
    if outcome.effect.safety is SafetyClass.UNSAFE:
        advice = "It will not be sent again; an operator resolves it."
    else:
        advice = (
            "Calling again with the same operation key is safe, but the server "
            "will ask again."
        )
    return (
        f"the MCP server asked the client for input mid-call ({method}); effect-broker "
        "does not relay server requests on a recorded tool call, so it stopped "
        "reading there and the tool may or may not have acted before asking. "
        f"{advice} Tools that ask for input work through the proxy on the "
        "2026-07-28 revision, where the question comes back as an input_required "
        "result"
    )


def _operator(
    effect: Effect, receipt: StoredResponse, request_id: RequestId
) -> web.Response:
    verdict = read_operator_receipt(receipt)
    if verdict.happened:
        message = "this tool call happened, as an operator confirmed: do not call again"
    elif verdict.proven_absent:
        message = (
            "an operator proved this tool call did not happen; if it is still wanted, "
            "you may call it again under a new operation key"
        )
    else:
        message = (
            "an operator abandoned this tool call without finding out whether it "
            "happened: it may have happened. Calling it again under a new operation "
            "key risks doing it twice, so check first"
        )
    return _error(
        ResolvedByOperator(f"{message}. The operator's reason: {verdict.reason}"),
        effect,
        request_id,
        RESOLVED_BY_OPERATOR,
        message=message,
        extra={"resolution": verdict.resolution.value, "reason": verdict.reason},
    )


async def _stream_overflow(outcome: Answered, request: web.Request) -> web.StreamResponse:
    """A result longer than a receipt holds: this client gets all of it, live, as the
    server sent it (its receipt records the call without the body)."""
    attempt = outcome.attempt
    assert attempt.response is not None and attempt.overflow is not None
    out = web.StreamResponse(status=attempt.response.status)
    for name, value in attempt.response.headers:
        if name.lower() not in ("content-length", "transfer-encoding"):
            out.headers.add(name, value)
    out.headers.update(effect_headers(outcome.effect))
    try:
        await out.prepare(request)
        await out.write(attempt.response.body)
        async for chunk in attempt.overflow.content.iter_any():
            await out.write(chunk)
        await out.write_eof()
    finally:
        attempt.release()
    return out
