"""The proxy application: one catch-all handler in front of the request flow.

Built by a factory around a ``ProxyState`` (see ``runtime``); every error a request can
raise becomes problem+json here, in one place (``handle``).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from types import MappingProxyType

from aiohttp import HttpVersion11, hdrs, web
from aiohttp.typedefs import Handler
from yarl import URL

from effect_broker.answers import (
    as_response,
    check_length,
    failure_answer,
    is_absolute_form,
)
from effect_broker.config.contracts import Route
from effect_broker.config.paths import RequestPath, normalize_path, split_target
from effect_broker.config.routing import REMEMBERED_LENGTH, is_mutating
from effect_broker.dialects import translate
from effect_broker.engine import upstream_url
from effect_broker.errors import (
    EffectBrokerError,
    MalformedRequest,
    MisdirectedRequest,
    RouteNotFound,
    RouteRefused,
    StoreError,
    StoreUnavailable,
)
from effect_broker.problems import PROBLEM_DOCUMENT, problem_response
from effect_broker.proxy.body_deadline import body_deadline
from effect_broker.proxy.edge import EDGE_LIMITS, EdgeLimits
from effect_broker.proxy.edge_input import check_path, printable
from effect_broker.proxy.flow import EffectRequest
from effect_broker.proxy.intercept import tunnel_of
from effect_broker.proxy.passthrough import pass_through
from effect_broker.proxy.prefixes import (
    forward_refusal,
    passthrough_route,
    reverse_prefixes,
    routes_under,
)
from effect_broker.proxy.state import PROXY_STATE, ProxyState
from effect_broker.proxy.upgrade import http_url, relay_upgrade, relays, upgrade_offer
from effect_broker.ratelimited_log import RateLimitedLog, lazy

log = logging.getLogger("effect_broker.proxy")
#: Absolute-form targets of a WebSocket handshake.
WS_TARGETS = ("ws://", "wss://")
#: The route whose contract's error dialect shapes the proxy's own refusals: the one
#: a request matched, or the one whose prefix an unrecorded request is under (None:
#: no route, the problem stays problem+json).
DIALECT_ROUTE = web.RequestKey[Route | None]("dialect_route")
#: What a pass-through answer says when its request carried an operation key.
UNRECORDED = MappingProxyType({"Effect-Status": "unrecorded"})
# A database outage fails every request the same way: one line per cause per interval.
store_log = RateLimitedLog(log)
# A misconfiguration, not an incident: once an hour (with a count) is enough to be seen.
unrecorded_log = RateLimitedLog(log, interval=3600.0)


async def handle(request: web.Request) -> web.StreamResponse:
    """Every request's answer, or the problem its error becomes, in the dialect of the
    route it concerns. Not a middleware: aiohttp runs each middleware through two
    coroutines of its own per request, paid by every pass-through."""
    request[DIALECT_ROUTE] = None  # until a route is found: read without a miss
    return in_client_dialect(request, await answer_or_problem(request, _within_deadline))


async def _within_deadline(request: web.Request) -> web.StreamResponse:
    with body_deadline(request, request.app[EDGE_LIMITS].body_timeout):
        return await _handle(request)


async def _handle(request: web.Request) -> web.StreamResponse:
    state = request.app[PROXY_STATE]
    check_path(request.path)
    path = request_path(request)
    forward = is_forward(request)
    tenant = state.tenant
    tunnel = tunnel_of(request)
    if not forward and tunnel is None:
        check_host(request, state)
    if tunnel is not None and tunnel.tenant is not None:
        tenant = tunnel.tenant  # a gateway tenant authenticated on the CONNECT
    elif state.gateway is not None:
        tenant = await state.gateway.tenant_for(
            request.headers.get("Proxy-Authorization"), request.remote
        )
    if relays(upgrade_offer(request)) and not request.body_exists:
        # An offer on a request with a body (never a WebSocket handshake) is ignored:
        # the request is served as the HTTP/1.1 request it also is.
        return await upgrade(request, state, path)
    if request.raw_path.startswith(WS_TARGETS):
        raise MalformedRequest(
            "a ws:// or wss:// target is only for a WebSocket handshake "
            "(Connection: Upgrade, Upgrade: websocket)"
        )
    host = authority(request) if forward else None
    route = match(request, state, path, host=host)
    if route is None:
        return await unmatched(request, state, host=host)
    request[DIALECT_ROUTE] = route
    if route.mcp is not None:
        if state.mcp is None:  # a wiring error, never a reason to record blindly
            raise RouteRefused(f"route {route.name} is an MCP route; MCP is not wired")
        return await state.mcp(request, route, tenant, path)
    return await EffectRequest(state, route, request, tenant, path).handle()


def check_host(request: web.Request, state: ProxyState) -> None:
    """A request addressed to the proxy itself must name it in ``Host``
    (``proxy.host_check``): refused before anything is routed or sent."""
    if state.host_check is None or request.raw_path.startswith(WS_TARGETS):
        return
    refusal = state.host_check.refusal(request.headers.get("Host"))
    if refusal is not None:
        raise MisdirectedRequest(refusal)


def request_path(request: web.Request) -> RequestPath:
    """The one normalised path this request is matched, stripped and forwarded by."""
    raw = split_target(request.raw_path)[0]
    return _normalized(raw) if len(raw) <= REMEMBERED_LENGTH else normalize_path(raw)


@functools.lru_cache(maxsize=2048)
def _normalized(raw: str) -> RequestPath:
    """``normalize_path``, remembered: agents call the same few paths again and again.
    Refused paths raise every time (an exception is never remembered)."""
    return normalize_path(raw)


def is_forward(request: web.Request) -> bool:
    """Forward mode: absolute form. Inside an intercepted tunnel every request has been
    rewritten to it on the tunnel's own origin; one left naming another origin, or in
    no form the tunnel can serve, is refused (fail closed: nothing is sent)."""
    tunnel = tunnel_of(request)
    if tunnel is not None:
        if not is_absolute_form(request):
            raise MalformedRequest(
                "inside a CONNECT tunnel the request target must be a path (origin "
                f"form), not {printable(request.raw_path[:100])!r}"
            )
        if not tunnel.owns(request.raw_path):
            raise MisdirectedRequest(
                f"this tunnel goes to {tunnel.authority}; a request inside it cannot "
                f"name {printable(request.raw_path[:100])!r}. Send it through a "
                "CONNECT to its own host, or as a plain request to the proxy"
            )
    return is_absolute_form(request)


def match(
    request: web.Request, state: ProxyState, path: RequestPath, *, host: str | None
) -> Route | None:
    """The route recording this request; ``host``: its authority in forward mode,
    None in reverse mode."""
    return state.config.table.match(method=request.method, host=host, path=path.text)


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: refuse a body over the limit before inviting it.

    aiohttp's default handler sends ``100 Continue`` unconditionally, so a client would
    upload a body only to get a 413 after it; here the 413 comes first.
    """
    state = request.app[PROXY_STATE]
    expect = request.headers.get(hdrs.EXPECT, "").strip().lower()
    if expect != "100-continue":
        return problem_response(
            MalformedRequest(f"Expect: {expect!r} is not supported; use 100-continue"),
            status=417,
        )
    try:
        host = authority(request) if is_forward(request) else None
        route = match(request, state, request_path(request), host=host)
        limit = (
            state.max_request_bytes
            if route is not None
            else request.app[EDGE_LIMITS].max_passthrough_bytes
        )
        check_length(request.content_length, limit)
    except EffectBrokerError as exc:
        answer = failure_answer(exc)
        assert answer is not None  # an EffectBrokerError is always a failure
        return as_response(replace(answer, close=True))  # never invite the body
    if request.version == HttpVersion11:
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    return None


def authority(request: web.Request) -> str:
    """host:port of an absolute-form request (an IPv6 host in brackets); routing
    canonicalises the host and drops default ports itself."""
    url = request.url
    host = f"[{url.host}]" if url.host and ":" in url.host else str(url.host)
    return f"{host}:{url.port}" if url.port is not None else host


async def unmatched(
    request: web.Request, state: ProxyState, *, host: str | None
) -> web.StreamResponse:
    """A request no route records; ``host``: its authority in forward mode, None in
    reverse mode."""
    if state.config.proxy.unmatched == "reject-mutating" and is_mutating(request.method):
        return problem_response(
            RouteRefused(
                f"strict mode: no route records {request.method} {request.path}, and "
                "unmatched mutating requests are refused; add a route to routes.yaml"
            )
        )
    if host is None:
        return await unmatched_reverse(request, state)
    forward_refusal(state.config.table, host, request.method, request.path)
    key_header = state.config.proxy.operation_key_header
    if key_header not in request.headers:
        return await pass_through(request, state.session, state.egress)
    # The client meant this to be recorded; say plainly that it was not. One cause for
    # all hosts: the host is the client's to vary, and each would be a line and an entry.
    unrecorded_log.warning(
        "unrecorded",
        "%s %s carries %s but no route records it: passed through unrecorded. Add a "
        "route for it to routes.yaml if it has side effects",
        request.method,
        lazy(lambda: request.url.with_query(None)),
        key_header,
    )
    return await pass_through(request, state.session, state.egress, headers=UNRECORDED)


async def upgrade(
    request: web.Request, state: ProxyState, path: RequestPath
) -> web.StreamResponse:
    """A protocol upgrade, relayed unrecorded (see ``proxy.upgrade``): to the origin of
    an absolute-form or tunnelled request, or in reverse mode to the upstream of the
    route whose prefix the path is under. No route records it; a route with
    ``passthrough: false`` refuses it like any unrecorded request."""
    routes = state.config.routes
    if is_absolute_form(request) or request.raw_path.startswith(WS_TARGETS):
        url = http_url(URL(request.raw_path, encoded=True).with_user(None))
        host = f"[{url.host}]" if url.host and ":" in url.host else str(url.host)
        written = f"{host}:{url.port}" if url.explicit_port else host
        forward_refusal(state.config.table, written, request.method, request.path)
    else:
        owner = passthrough_route(routes, request.method, path)
        if owner is None:
            raise RouteNotFound(
                f"no route prefix covers {request.path}, so this upgrade has nowhere "
                "to go; reverse-mode requests need a route prefix from routes.yaml"
            )
        raw_query = split_target(request.raw_path)[1]
        target = upstream_url(owner, origin=None, path=path, raw_query=raw_query)
        url = URL(target, encoded=True)
    return await relay_upgrade(request, state.session, state.egress, url)


async def unmatched_reverse(
    request: web.Request, state: ProxyState
) -> web.StreamResponse:
    """A reverse-mode request no route records: passed through to the upstream of the
    route whose prefix it is under (see ``proxy.prefixes``), else a 404 naming the
    prefixes that exist."""
    routes = state.config.routes
    path = request_path(request)
    under = routes_under(routes, path)
    if under:
        # The SDK pointed at this prefix reads refusals in its own dialect here too.
        request[DIALECT_ROUTE] = under[0]
    owner = passthrough_route(routes, request.method, path)
    if owner is None:
        prefixes = reverse_prefixes(routes)
        known = (
            f"; the prefixes here are {', '.join(prefixes)}"
            if prefixes
            else "; no route here has a strip_prefix to pass through under"
        )
        return problem_response(
            RouteNotFound(
                f"no route matches {request.method} {request.path}; reverse-mode "
                f"requests need a route prefix from routes.yaml{known}"
            )
        )
    raw_query = split_target(request.raw_path)[1]
    target = upstream_url(owner, origin=None, path=path, raw_query=raw_query)
    extra: dict[str, str] = {}
    if owner.operation_key_header in request.headers:
        extra["Effect-Status"] = "unrecorded"
        unrecorded_log.warning(
            f"unrecorded:{owner.name}",
            "%s %s carries %s but no route records it: passed through unrecorded to "
            "route %s's upstream. Add a route for it if it has side effects",
            request.method,
            printable(request.path),
            owner.operation_key_header,
            owner.name,
        )
    return await pass_through(
        request,
        state.session,
        state.egress,
        headers=extra,
        url=URL(target, encoded=True),
        inject=state.injected.get(owner.name, {}),
    )


def in_client_dialect(
    request: web.Request, response: web.StreamResponse
) -> web.StreamResponse:
    """A proxy-made problem on a route whose contract names an error dialect, in
    that dialect (see ``dialects``); every other answer unchanged."""
    route = request[DIALECT_ROUTE]
    if route is None or route.mcp is not None:
        return response
    dialect = route.contract.error_dialect
    document = response.get(PROBLEM_DOCUMENT)
    if dialect == "problem" or document is None or not isinstance(response, web.Response):
        return response
    status, body = translate(dialect, response.status, document)
    out = web.Response(
        status=status, body=json.dumps(body).encode(), content_type="application/json"
    )
    for name, value in response.headers.items():
        if name.lower() not in ("content-type", "content-length"):
            out.headers.add(name, value)
    if response.keep_alive is False:
        out.force_close()
    return out


async def answer_or_problem(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The handler's answer, or the problem every error it raises becomes
    (``answers.failure_answer``); only what is logged and counted is decided here."""
    try:
        return await handler(request)
    except Exception as exc:
        answer = failure_answer(exc)
        if answer is None:
            raise
        if isinstance(exc, StoreUnavailable):
            store_log.error("store-unavailable", "ledger unavailable: %s", exc)
            request.app[PROXY_STATE].metrics.store_unavailable.labels("proxy").inc()
        elif isinstance(exc, StoreError):
            store_log.error("store-error", "the ledger refused an operation: %s", exc)
        elif not isinstance(exc, EffectBrokerError | web.HTTPException):
            store_log.error(
                f"unexpected:{type(exc).__name__}",
                "unexpected error on %s %s",
                request.method,
                printable(request.path),
                exc_info=exc,
            )
        return as_response(answer)


def build_proxy_app(
    state: ProxyState, *, edge: EdgeLimits | None = None
) -> web.Application:
    app = web.Application(client_max_size=state.max_request_bytes)
    app[PROXY_STATE] = state
    app[EDGE_LIMITS] = edge or EdgeLimits()
    app.router.add_route("*", "/{tail:.*}", handle, expect_handler=expect_continue)
    for hook in state.on_shutdown:
        app.on_shutdown.append(partial(_on_shutdown, hook))
    return app


async def _on_shutdown(hook: Callable[[], Awaitable[None]], _: web.Application) -> None:
    await hook()
