"""The proxy application: one catch-all handler in front of the request flow.

Built by a factory around a ``ProxyState`` (see ``runtime``); every error a request can
raise becomes problem+json here, in one place.
"""

from __future__ import annotations

import logging

from aiohttp import HttpVersion11, hdrs, web
from aiohttp.typedefs import Handler

from effect_broker.config.contracts import Route
from effect_broker.config.routing import is_mutating
from effect_broker.errors import (
    BodyTooLarge,
    EffectBrokerError,
    MalformedRequest,
    ProxyAuthenticationRequired,
    RouteNotFound,
    RouteRefused,
    StoreError,
    StoreUnavailable,
)
from effect_broker.problems import problem_response
from effect_broker.proxy.edge import EDGE_LIMITS, EdgeLimits
from effect_broker.proxy.edge_input import check_path, printable
from effect_broker.proxy.flow import EffectRequest, is_absolute_form
from effect_broker.proxy.intercept import tunnel_of
from effect_broker.proxy.passthrough import pass_through
from effect_broker.proxy.state import PROXY_STATE, ProxyState
from effect_broker.ratelimited_log import RateLimitedLog

log = logging.getLogger("effect_broker.proxy")
# A database outage fails every request the same way: one line per cause per interval.
store_log = RateLimitedLog(log)


async def handle(request: web.Request) -> web.StreamResponse:
    state = request.app[PROXY_STATE]
    check_path(request.path)
    forward = is_forward(request)
    tenant = state.tenant
    tunnel = tunnel_of(request)
    if tunnel is not None and tunnel.tenant is not None:
        tenant = tunnel.tenant  # a gateway tenant authenticated on the CONNECT
    elif state.gateway is not None:
        tenant = await state.gateway.tenant_for(
            request.headers.get("Proxy-Authorization")
        )
    route = match(request, state, forward=forward)
    if route is None:
        return await unmatched(request, state, forward=forward)
    return await EffectRequest(state, route, request, tenant).handle()


def is_forward(request: web.Request) -> bool:
    """Forward mode: absolute form, which every request in an intercepted tunnel has
    been rewritten to unless it named a host of its own (refused: fail closed)."""
    if tunnel_of(request) is not None and not is_absolute_form(request):
        raise MalformedRequest(
            "inside a CONNECT tunnel the request target must be a path (origin form), "
            f"not {printable(request.raw_path[:100])!r}"
        )
    return is_absolute_form(request)


def match(request: web.Request, state: ProxyState, *, forward: bool) -> Route | None:
    return state.config.table.match(
        method=request.method,
        host=authority(request) if forward else None,
        path=request.path,
    )


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
    route = match(request, state, forward=is_forward(request))
    limit = (
        state.max_request_bytes
        if route is not None
        else request.app[EDGE_LIMITS].max_passthrough_bytes
    )
    length = request.content_length
    if length is not None and length > limit:
        response = problem_response(
            BodyTooLarge(f"the body is {length} bytes; this proxy accepts {limit}")
        )
        response.force_close()
        return response
    if request.version == HttpVersion11:
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    return None


def authority(request: web.Request) -> str:
    """host:port of an absolute-form request; routing drops default ports itself."""
    url = request.url
    return f"{url.host}:{url.port}" if url.port is not None else str(url.host)


async def unmatched(
    request: web.Request, state: ProxyState, *, forward: bool
) -> web.StreamResponse:
    if state.config.proxy.unmatched == "reject-mutating" and is_mutating(request.method):
        return problem_response(
            RouteRefused(
                f"strict mode: no route records {request.method} {request.path}, and "
                "unmatched mutating requests are refused; add a route to routes.yaml"
            )
        )
    if not forward:
        return problem_response(
            RouteNotFound(
                f"no route matches {request.method} {request.path}; reverse-mode "
                "requests need a route prefix from routes.yaml"
            )
        )
    return await pass_through(request, state.session)


@web.middleware
async def problems_middleware(
    request: web.Request, handler: Handler
) -> web.StreamResponse:
    try:
        return await handler(request)
    except StoreUnavailable as exc:
        store_log.error("store-unavailable", "ledger unavailable: %s", exc)
        return problem_response(
            StoreUnavailable("the ledger database is unreachable; nothing was sent"),
        )
    except StoreError as exc:
        store_log.error("store-error", "the ledger refused an operation: %s", exc)
        return problem_response(
            StoreError("the ledger refused the operation; the error is in the log")
        )
    except ProxyAuthenticationRequired as exc:
        return problem_response(
            exc, headers={"Proxy-Authenticate": 'Basic realm="effect-broker"'}
        )
    except EffectBrokerError as exc:
        return problem_response(exc)
    except web.HTTPRequestEntityTooLarge:
        return problem_response(BodyTooLarge())
    except web.HTTPException:
        raise
    except Exception as exc:
        store_log.error(
            f"unexpected:{type(exc).__name__}",
            "unexpected error on %s %s",
            request.method,
            printable(request.path),
            exc_info=exc,
        )
        return problem_response(
            EffectBrokerError("the proxy failed unexpectedly; the error is in its log")
        )


def build_proxy_app(
    state: ProxyState, *, edge: EdgeLimits | None = None
) -> web.Application:
    app = web.Application(
        middlewares=[problems_middleware], client_max_size=state.max_request_bytes
    )
    app[PROXY_STATE] = state
    app[EDGE_LIMITS] = edge or EdgeLimits()
    app.router.add_route("*", "/{tail:.*}", handle, expect_handler=expect_continue)
    return app
