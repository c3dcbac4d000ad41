"""The proxy application: one catch-all handler in front of the request flow.

Built by a factory around a ``ProxyState`` (see ``runtime``); every error a request can
raise becomes problem+json here, in one place.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from effect_broker.config.routing import is_mutating
from effect_broker.errors import (
    BodyTooLarge,
    EffectBrokerError,
    ProxyAuthenticationRequired,
    RouteNotFound,
    RouteRefused,
    StoreUnavailable,
)
from effect_broker.problems import problem_response
from effect_broker.proxy.flow import EffectRequest, is_absolute_form
from effect_broker.proxy.passthrough import pass_through
from effect_broker.proxy.state import PROXY_STATE, ProxyState

log = logging.getLogger("effect_broker.proxy")


async def handle(request: web.Request) -> web.StreamResponse:
    state = request.app[PROXY_STATE]
    tenant = state.tenant
    if state.gateway is not None:
        tenant = await state.gateway.tenant_for(
            request.headers.get("Proxy-Authorization")
        )
    forward = is_absolute_form(request)
    route = state.config.table.match(
        method=request.method,
        host=authority(request) if forward else None,
        path=request.path,
    )
    if route is None:
        return await unmatched(request, state, forward=forward)
    return await EffectRequest(state, route, request, tenant).handle()


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
        log.error("ledger unavailable: %s", exc)
        return problem_response(
            StoreUnavailable("the ledger database is unreachable; nothing was sent"),
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
    except Exception:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return problem_response(
            EffectBrokerError("the proxy failed unexpectedly; the error is in its log")
        )


def build_proxy_app(state: ProxyState) -> web.Application:
    app = web.Application(
        middlewares=[problems_middleware], client_max_size=state.max_request_bytes
    )
    app[PROXY_STATE] = state
    app.router.add_route("*", "/{tail:.*}", handle)
    return app
