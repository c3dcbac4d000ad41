"""Who is asking the admin API, and for which tenant.

The admin API can settle effects by hand, so every ``/v1`` route needs a bearer token,
and the token alone decides the tenant: a sidecar's one admin token means the sidecar's
tenant; in gateway mode the token is one of the tenant's API keys. The caller never
names a tenant, so it cannot ask for another one's effects. Probes (``/healthz``,
``/readyz``), ``/metrics`` (no tenant data) and ``/openapi.json`` stay open.
"""

from __future__ import annotations

import hmac

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import SecretStr

from effect_broker.admin.state import ADMIN_STATE
from effect_broker.errors import (
    AdminTokenNotConfigured,
    EffectBrokerError,
    Unauthorized,
)
from effect_broker.headers import credentials
from effect_broker.problems import problem_response

PROTECTED_PREFIX = "/v1/"
REALM = 'Bearer realm="effect-broker-admin"'

TENANT = web.RequestKey("tenant", str)
ADMIN_TOKEN = web.AppKey("admin_token", str)  # absent: no token configured


def configured_token(token: SecretStr | str | None) -> str | None:
    """The token as text, or None when unset or blank (a blank token would open all)."""
    text = token.get_secret_value() if isinstance(token, SecretStr) else token
    return text if text and text.strip() else None


def bearer(request: web.Request) -> str | None:
    """The bearer token, or None when there is none a token could be (see
    ``credentials``: undecodable bytes are refused before anything encodes them)."""
    return credentials(request.headers.get("Authorization"), "Bearer")


def _refuse(error: EffectBrokerError, *, invalid: bool) -> web.Response:
    challenge = REALM + (', error="invalid_token"' if invalid else "")
    return problem_response(error, headers={"WWW-Authenticate": challenge})


async def _tenant(request: web.Request) -> str | web.Response:
    """The caller's tenant, or the 401 answer explaining what is missing."""
    state = request.app[ADMIN_STATE]
    token = bearer(request)
    if state.gateway is None:
        expected = request.app.get(ADMIN_TOKEN)
        if expected is None:
            return _refuse(
                AdminTokenNotConfigured(
                    "this sidecar has no admin token, so the admin API answers nobody; "
                    "set EFFECT_BROKER_ADMIN_TOKEN to a long random secret (e.g. the "
                    "output of `openssl rand -hex 32`), restart, and send "
                    "`Authorization: Bearer <token>`"
                ),
                invalid=False,
            )
        if token is None:
            return _refuse(
                Unauthorized("send `Authorization: Bearer <EFFECT_BROKER_ADMIN_TOKEN>`"),
                invalid=False,
            )
        if not hmac.compare_digest(token.encode(), expected.encode()):
            return _refuse(
                Unauthorized("the bearer token is not the admin token"), invalid=True
            )
        return state.tenant
    if token is None:
        return _refuse(
            Unauthorized(
                "send `Authorization: Bearer <API key>` with one of your tenant's keys "
                "(make one with `effect-broker tenants add TENANT`)"
            ),
            invalid=False,
        )
    # Too many failed keys raises TooManyFailedCredentials: the admin API's problems
    # middleware answers it as every front does (429 with Retry-After).
    tenant = await state.gateway.tenant_for_api_key(token, request.remote)
    if tenant is None:
        return _refuse(
            Unauthorized("the bearer token is not a live API key of any tenant"),
            invalid=True,
        )
    return tenant


@web.middleware
async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Resolve the tenant for every ``/v1`` request before its handler runs."""
    if not request.path.startswith(PROTECTED_PREFIX):
        return await handler(request)
    tenant = await _tenant(request)
    if isinstance(tenant, web.Response):
        return tenant
    request[TENANT] = tenant
    return await handler(request)
