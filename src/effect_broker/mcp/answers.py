"""What an MCP target's answer proves about a tool call (pure; the engine's hook).

A JSON-RPC server answers ``200 OK`` whether the tool ran or the call was refused, so
the HTTP status alone proves little. The rules, most conservative first:

* no JSON-RPC response in a complete answer (a stream that ended early): unknown;
* a JSON-RPC error the spec defines as "refused before running" (parse, invalid
  request, unknown method, invalid params): final on the first attempt, unknown on a
  later one (the earlier attempt may have run); any other error code: unknown;
* ``resultType: input_required``: the server is still asking, never a final answer;
* a result, ``isError: true`` included: the tool's final answer, stored and replayed;
* an HTTP 4xx before any JSON-RPC (a dead session, a refused header): nothing ran,
  so the same key may be sent again; on a later attempt: unknown;
* a request from the server to the client on the call's stream (elicitation,
  sampling, roots; the revisions before 2026-07-28 send them mid-call): the read stops
  there (``watch``), since a recorded call cannot relay it and the server would wait
  until the timeout; with no response in it, the answer is unknown like any cut
  stream: the tool may have acted before it asked. Progress notifications on it go to
  the client's relay, if it asked for one (``progress``).
"""

from __future__ import annotations

import json
from dataclasses import replace

import aiohttp

from effect_broker.answers import SERVER_REQUEST_CUT  # the cut's detail; worded there
from effect_broker.config.contracts import Contract
from effect_broker.engine import (
    COMPLETE,
    AnswerWatch,
    StoredRequest,
    StoredResponse,
    refused_for_good,
    status_after_answer,
)
from effect_broker.mcp.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RequestId,
    ServerRequestWatch,
    find_response,
)
from effect_broker.mcp.progress import current_relay
from effect_broker.mcp.resume import follow_resumed
from effect_broker.models import Effect, EffectStatus

REFUSED_BEFORE_RUNNING = frozenset(
    {PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS}
)


def content_type(response: StoredResponse) -> str | None:
    for name, value in response.headers:
        if name.lower() == "content-type":
            return value
    return None


def is_input_required(result: object) -> bool:
    return isinstance(result, dict) and result.get("resultType") == "input_required"


class McpProtocol:
    """The engine's ``TargetProtocol`` for an MCP route."""

    def judge(
        self, response: StoredResponse, effect: Effect, contract: Contract
    ) -> EffectStatus:
        first = effect.attempts <= 1
        if not 200 <= response.status < 300:
            if refused_for_good(response.status):
                return self._not_run(effect, contract, first)
            return status_after_answer(response.status, effect.safety)
        answer = find_response(content_type(response), response.body)
        if answer is None:
            return EffectStatus.OUTCOME_UNKNOWN
        error = answer.get("error")
        if error is not None:
            code = error.get("code") if isinstance(error, dict) else None
            if code in REFUSED_BEFORE_RUNNING and first:
                return EffectStatus.FAILED_FINAL
            return EffectStatus.OUTCOME_UNKNOWN
        result = answer.get("result")
        if is_input_required(result):
            return self._not_run(effect, contract, True)
        if isinstance(result, dict) and result.get("isError") is True:
            return EffectStatus.FAILED_FINAL
        return EffectStatus.SUCCEEDED

    @staticmethod
    def _not_run(effect: Effect, contract: Contract, first: bool) -> EffectStatus:
        """Provably not run: the same key may go again, but such an answer is never
        stored as final (past the retry limit the effect waits as unknown)."""
        if first and effect.attempts < contract.retry_limit:
            return EffectStatus.RETRYABLE
        return EffectStatus.OUTCOME_UNKNOWN

    def watch(self, request: StoredRequest) -> AnswerWatch:
        """Stop reading at a server-to-client request, or at the response for the
        call's id, whether or not the stream goes on (``engine.protocol.CutsShort``)."""
        relay = current_relay.get()
        found = ServerRequestWatch(
            _call_id(request), relay.offer if relay is not None else None
        )

        def watch(content_type: str | None, chunk: bytes) -> str | None:
            method = found(content_type, chunk)
            if method is not None:
                return SERVER_REQUEST_CUT + method[:80]
            return COMPLETE if found.answered else None

        return watch

    async def follow(
        self,
        session: aiohttp.ClientSession,
        request: StoredRequest,
        response: StoredResponse,
        *,
        within: float,
        max_body: int,
    ) -> tuple[StoredResponse, str] | None:
        """A result the server delivers on a resumed stream (``resume``), read and
        joined to the call's answer so it is judged and recorded."""
        relay = current_relay.get()
        return await follow_resumed(
            session,
            request,
            response,
            _call_id(request),
            within=within,
            max_body=max_body,
            server_request=SERVER_REQUEST_CUT,
            on_progress=relay.offer if relay is not None else None,
        )

    def with_key(
        self, request: StoredRequest, contract: Contract, downstream_key: str
    ) -> StoredRequest:
        """``idempotency_argument``: the derived key joins the tool's arguments."""
        argument = contract.idempotency_argument
        if argument is None:
            return request
        message = json.loads(request.body)
        params = dict(message["params"])
        params["arguments"] = {**params.get("arguments", {}), argument: downstream_key}
        body = json.dumps({**message, "params": params}).encode()
        return replace(request, body=body)


def _call_id(request: StoredRequest) -> RequestId | None:
    """The JSON-RPC id of the ``tools/call`` sent (the proxy built its body, so it
    parses; None, answered by any response, if it somehow does not)."""
    try:
        message = json.loads(request.body)
    except (ValueError, RecursionError):
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    return request_id
