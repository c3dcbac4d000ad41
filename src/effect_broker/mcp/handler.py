"""The MCP route adapter: classify each message, record tool calls through the engine.

Only ``tools/call`` of a tool configured with a contract is an effect. Its operation key
comes from the tool's arguments (the schema the agent saw asked for it) or the
``Operation-Key`` header; the request stored and sent upstream is the POST with that
argument removed, and the engine treats it like any other intent. What the engine did
comes back as JSON-RPC (``render``). Everything else on the endpoint is forwarded
unrecorded (``forward``), except an unclassified tool in strict mode, which is refused,
and a cancellation of a call being recorded, which the proxy acknowledges itself
(``inflight``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol
from uuid import UUID

import aiohttp
from aiohttp import web

from effect_broker.answers import (
    Payload,
    ReceiptCache,
    as_jsonrpc,
    cached,
    failure_answer,
    fingerprint,
    intent,
    is_absolute_form,
    noted,
    read_body,
)
from effect_broker.config.contracts import Route
from effect_broker.config.paths import RequestPath
from effect_broker.engine import Engine, Intent, Outcome, upstream_url
from effect_broker.errors import (
    BodyTooLarge,
    EffectBrokerError,
    InvalidMcpMessage,
    RouteRefused,
    StoreError,
    StoreUnavailable,
)
from effect_broker.mcp import forward as passing
from effect_broker.mcp.calls import (
    fingerprint_body,
    forwarded_body,
    take_operation_key,
    tool_call,
)
from effect_broker.mcp.inflight import (
    CallScope,
    InFlightCalls,
    call_key,
    cancelled_call,
)
from effect_broker.mcp.jsonrpc import (
    BODY_TOO_LARGE,
    HEADER_MISMATCH,
    TOOL_REFUSED,
    Message,
    Refusal,
    RequestId,
    check_routing_headers,
    parse_message,
    revision_of,
)
from effect_broker.mcp.progress import ProgressRelay, current_relay, wants_progress
from effect_broker.mcp.render import render
from effect_broker.mcp.streams import OpenStreams

log = logging.getLogger("effect_broker.mcp")

# How long a call's row in the ledger's shared table counts, in the call's leases: a
# call sends once, after at most one probe or lookup of an earlier attempt, each
# bounded by the contract's timeout. Only a dead worker's rows ever run out.
SHARED_CALL_LEASES = 2


class RunningCallsTable(Protocol):
    """The ledger's table of recorded calls running on any worker (the store's)."""

    async def begin_mcp_call(self, call_key: bytes, *, expires_in: timedelta) -> UUID: ...

    async def end_mcp_call(self, running_id: UUID) -> None: ...

    async def mcp_call_running(self, call_key: bytes) -> bool: ...


class McpEndpoint:
    """Serves every MCP route of a proxy; one per process, built by the runtime."""

    def __init__(
        self,
        engine: Engine,
        *,
        running_calls: RunningCallsTable,
        receipts: ReceiptCache,
        max_request_bytes: int,
    ) -> None:
        self.engine = engine
        self.running_calls = running_calls
        # Shared with the HTTP proxy: a settled effect's retry is answered from memory
        # whichever adapter asks (the ledger keys effects by tenant and key alone).
        self.receipts = receipts
        self.session: aiohttp.ClientSession = engine.wiring.session
        self.injected: Mapping[str, Mapping[str, str]] = engine.wiring.injected
        self.max_request_bytes = max_request_bytes
        # A client that goes away does not cancel its call: the engine keeps reading
        # until the result or the contract's timeout. These hold the running calls.
        self._running: set[asyncio.Task[Outcome]] = set()
        # Nor does it cancel it by saying so: its cancellations are withheld.
        self.in_flight = InFlightCalls()
        self.streams = OpenStreams()  # GET streams, ended at shutdown

    async def __call__(
        self, request: web.Request, route: Route, tenant: str, path: RequestPath
    ) -> web.StreamResponse:
        assert route.mcp is not None
        origin = str(request.url.origin()) if is_absolute_form(request) else None
        url = upstream_url(
            route, origin=origin, path=path, raw_query=request.rel_url.raw_query_string
        )
        inject = self.injected.get(route.name, {})
        if request.method != "POST":
            return await passing.forward(
                self.session, request, route, url, inject, None, streams=self.streams
            )
        try:
            body = await read_body(request, self.max_request_bytes)
            message = parse_message(body)
            check_routing_headers(
                message,
                request.headers.get("Mcp-Method"),
                request.headers.get("Mcp-Name"),
                revision=revision_of(
                    message, request.headers.get("MCP-Protocol-Version")
                ),
            )
        except BodyTooLarge as exc:
            return _refused(exc, None, BODY_TOO_LARGE, status=413, close=True)
        except Refusal as refusal:
            return _refusal(refusal)
        if message.method == "tools/list":
            return await passing.list_tools(
                self.session, request, route, url, inject, body, message.id
            )
        cancelled = cancelled_call(message)
        if cancelled is not None and await self._recorded_call_running(
            _scope(request, route, tenant), cancelled
        ):
            return _withheld(route, cancelled)
        if message.method != "tools/call" or not message.is_request:
            return await passing.forward(
                self.session, request, route, url, inject, body, request_id=message.id
            )
        try:
            return await self._tool_call(request, route, tenant, path, url, message, body)
        except Refusal as refusal:
            return _refusal(refusal)

    async def _tool_call(
        self,
        request: web.Request,
        route: Route,
        tenant: str,
        path: RequestPath,
        url: str,
        message: Message,
        body: bytes,
    ) -> web.StreamResponse:
        mcp = route.mcp
        assert mcp is not None
        call = tool_call(message)
        contract = mcp.tools.get(call.name)
        if contract is None:
            if call.name in mcp.read_only or mcp.unclassified == "pass":
                inject = self.injected.get(route.name, {})
                return await passing.forward(
                    self.session, request, route, url, inject, body, request_id=call.id
                )
            return _refused(
                RouteRefused(
                    f"tool {call.name!r} is not classified on route {route.name!r}: "
                    "the proxy cannot tell whether it has side effects, so it is "
                    "refused. An operator lists it under mcp.tools (with a contract) "
                    "or mcp.read_only in routes.yaml"
                ),
                call.id,
                TOOL_REFUSED,
            )
        key, arguments = take_operation_key(
            call,
            mcp.operation_key_argument,
            request.headers.get(route.operation_key_header),
        )
        bound = route.bound(contract)
        payload = Payload(
            method="tools/call",
            query=b"",
            hashed=fingerprint_body(call, arguments),
            body=forwarded_body(message, arguments),
        )
        bound_to = fingerprint(bound, path, payload)
        relay: ProgressRelay | None = None
        outcome = cached(self.receipts, tenant, key, bound_to)
        if outcome is None:
            wanted = intent(
                request,
                tenant=tenant,
                key=key,
                route=bound,
                bound_to=bound_to,
                url=url,
                payload=payload,
                preview=_preview(path, call.name, body),
            )
            outcome, relay = await self._run(request, route, tenant, message, wanted)
        outcome = noted(self.receipts, self.engine.wiring.metrics, bound, outcome)
        version = request.headers.get("MCP-Protocol-Version")
        answer = await render(outcome, call.id, request, revision_of(message, version))
        return answer if relay is None else await relay.finish(answer)

    async def _run(
        self,
        request: web.Request,
        route: Route,
        tenant: str,
        message: Message,
        wanted: Intent,
    ) -> tuple[Outcome, ProgressRelay | None]:
        """The engine's work on a call, in a task of its own that outlives a client
        that goes away, with the call's cancellations withheld while it runs."""
        assert message.id is not None
        scope = _scope(request, route, tenant)
        token = self.in_flight.begin(scope, message.id)
        shared_for = self.engine.lease_for(wanted.route.contract) * SHARED_CALL_LEASES
        params = message.body.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        relay = ProgressRelay(request) if wants_progress(request, meta) else None
        relayed = current_relay.set(relay)  # the engine's task starts with a copy
        try:
            task = asyncio.ensure_future(
                self._submit_shared(wanted, call_key(scope, message.id), shared_for)
            )
        finally:
            current_relay.reset(relayed)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        task.add_done_callback(lambda _: self.in_flight.end(token))
        return await asyncio.shield(task), relay

    async def _submit_shared(
        self, intent: Intent, key: bytes, expires_in: timedelta
    ) -> Outcome:
        """The engine's work on a call, noted in the ledger's table of running calls
        first (committed before the request may leave), so every worker withholds
        its cancellations; the row goes when the work ends, whatever the client did."""
        running_id = await self.running_calls.begin_mcp_call(key, expires_in=expires_in)
        try:
            return await self.engine.submit(intent)
        finally:
            try:
                await self.running_calls.end_mcp_call(running_id)
            except (StoreUnavailable, StoreError) as exc:
                log.warning(
                    "a settled MCP call stays in the running-call table until it "
                    "expires (%s): its id's cancellations are withheld until then",
                    exc.message,
                )

    async def _recorded_call_running(
        self, scope: CallScope, request_id: RequestId
    ) -> bool:
        """Whether a cancellation names a recorded call running here or on any worker
        of this ledger. When the ledger cannot say, it is withheld: that only lets a
        call that was not recorded run to its end."""
        if self.in_flight.running(scope, request_id):
            return True
        try:
            return await self.running_calls.mcp_call_running(call_key(scope, request_id))
        except (StoreUnavailable, StoreError) as exc:
            log.warning(
                "withheld a cancellation the ledger could not check (%s)", exc.message
            )
            return True


def _scope(request: web.Request, route: Route, tenant: str) -> CallScope:
    return CallScope(tenant, route.name, request.headers.get("Mcp-Session-Id"))


def _withheld(route: Route, request_id: RequestId) -> web.Response:
    """A cancellation of a call being recorded, acknowledged as the transport
    acknowledges any notification (202, no body) and never forwarded: the server
    finishes the call, so the effect settles and a retry is given its receipt."""
    log.info(
        "withheld a cancellation of a recorded MCP call on route %s (id %.80r)",
        route.name,
        request_id,
    )
    return web.Response(status=202)


def _preview(path: RequestPath, tool: str, body: bytes) -> dict[str, Any]:
    """What an operator may see without decrypting: the tool, never its arguments."""
    return {
        "method": "POST",
        "path": path.text,
        "mcp_tool": tool,
        "content_type": "application/json",
        "body_bytes": len(body),
    }


def _refusal(refusal: Refusal) -> web.Response:
    """A message refused before anything was forwarded: a header that disagrees with
    the body is a 400 whatever the message (the revision that defines -32020 requires
    it); other refusals of a request with an id go back as 200, the transport's way."""
    readable = refusal.request_id is not None and refusal.code != HEADER_MISMATCH
    status = 200 if readable else 400
    return _refused(
        InvalidMcpMessage(refusal.message),
        refusal.request_id,
        refusal.code,
        status=status,
    )


def _refused(
    error: EffectBrokerError,
    request_id: RequestId | None,
    code: int,
    *,
    status: int = 200,
    close: bool = False,
) -> web.Response:
    """A refusal as a JSON-RPC error: the problem the shared mapping gives ``error``
    (``answers.failures``), framed under ``code`` at the transport's ``status``."""
    answer = failure_answer(error)
    assert answer is not None  # an EffectBrokerError is always a failure
    response = as_jsonrpc(answer, request_id, code, status=status)
    if close:
        response.force_close()
    return response
