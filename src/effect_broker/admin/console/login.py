"""The console's login and logout: a token in, a signed session cookie out.

A token opens the console exactly when it opens the admin API (the same tenant, by the
same comparison), so the console never grants what the API would refuse.
"""

from __future__ import annotations

import hmac
from datetime import UTC, datetime

from aiohttp import web

from effect_broker.admin.auth import ADMIN_TOKEN
from effect_broker.admin.console.frame import (
    PREFIX,
    forbidden,
    render_page,
    session_of,
    signed_in,
    signer_of,
)
from effect_broker.admin.console.session import COOKIE
from effect_broker.admin.state import ADMIN_STATE


async def _tenant_for(request: web.Request, token: str) -> str | None:
    """The tenant a token opens, exactly as the admin API's bearer check decides."""
    state = request.app[ADMIN_STATE]
    if state.gateway is not None:
        return await state.gateway.tenant_for_api_key(token)
    expected = request.app.get(ADMIN_TOKEN)
    if expected is None or not hmac.compare_digest(token.encode(), expected.encode()):
        return None
    return state.tenant


async def login_form(request: web.Request) -> web.Response:
    if session_of(request) is not None:
        raise web.HTTPSeeOther(f"{PREFIX}/effects")
    return render_page(
        request,
        "login.html",
        error=None,
        configured=_configured(request),
        session=None,
        csrf="",
    )


def _configured(request: web.Request) -> bool:
    return request.app[ADMIN_STATE].gateway is not None or ADMIN_TOKEN in request.app


def _cross_site(request: web.Request) -> bool:
    """A form posted from another origin (browsers send ``Origin`` on every POST).

    The login form has no session to bind a CSRF token to yet, so another site could
    otherwise log a browser in under a token of its choosing.
    """
    origin = request.headers.get("Origin")
    return origin is not None and origin != f"{request.scheme}://{request.host}"


async def login(request: web.Request) -> web.Response:
    if _cross_site(request):
        return forbidden(request)
    form = await request.post()
    token = str(form.get("token", "")).strip()
    tenant = await _tenant_for(request, token) if token else None
    if tenant is None:
        error = (
            "That is not the admin token."
            if token
            else "Enter the admin token (EFFECT_BROKER_ADMIN_TOKEN)."
        )
        return render_page(
            request,
            "login.html",
            status=401,
            error=error,
            configured=_configured(request),
            session=None,
            csrf="",
        )
    cookie, _ = signer_of(request).issue(tenant, datetime.now(UTC))
    answer = web.HTTPSeeOther(f"{PREFIX}/effects")
    answer.set_cookie(
        COOKIE,
        cookie,
        path=PREFIX,
        httponly=True,
        samesite="Strict",
        secure=request.secure,
    )
    raise answer


async def logout(request: web.Request) -> web.Response:
    session, _ = signed_in(request)
    form = await request.post()
    if not signer_of(request).csrf_ok(session, str(form.get("csrf", ""))):
        return forbidden(request)
    answer = web.HTTPSeeOther(f"{PREFIX}/login")
    answer.del_cookie(COOKIE, path=PREFIX)
    raise answer
