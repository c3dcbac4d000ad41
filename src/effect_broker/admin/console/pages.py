"""The console's handlers: log in, list what waits for an operator, inspect, resolve.

Pages are HTML rendered on the server; nothing is fetched from another origin (the
stylesheet is served here too), and no script is needed. Every change goes through the
same engine call and validation as ``POST /v1/effects/{id}/resolve``; a form shown for
one version of an effect is refused once the effect has changed (409), so an operator
never settles an effect on the strength of a page that no longer describes it.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from uuid import UUID

import jinja2
from aiohttp import web

from effect_broker.admin.auth import ADMIN_TOKEN
from effect_broker.admin.console.session import COOKIE, Session, SessionSigner
from effect_broker.admin.console.views import (
    AWAITING,
    attempts_view,
    choices,
    history_view,
    waiting_view,
)
from effect_broker.admin.redaction import shown_request
from effect_broker.admin.requests import MAX_LIMIT
from effect_broker.admin.state import ADMIN_STATE
from effect_broker.admin.validation import parse_resolution_body
from effect_broker.admin.views import GUARANTEES, trace_id_of
from effect_broker.crypto import Keyring
from effect_broker.engine.resolution import AWAITING_OPERATOR, permitted
from effect_broker.engine.sealed import open_receipt
from effect_broker.errors import (
    EffectBrokerError,
    EffectNotFound,
    InvalidResolution,
    StaleVersion,
)
from effect_broker.models import Effect, EffectFilter

PREFIX = "/console"
CSS = "console.css"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # Origin reaches us, never other sites
    "Cache-Control": "no-store",
}


# Console sessions are signed with a key derived under this name from the master key.
SESSION_KEY_NAME = "effect-broker console sessions"


@dataclass(slots=True)
class Console:
    templates: jinja2.Environment
    admin_token: str | None  # a sidecar's; part of what signs its sessions
    trace_url: str | None  # e.g. https://jaeger.internal/trace/{trace_id}
    _signer: SessionSigner | None = None

    def signer(self, keyring: Keyring) -> SessionSigner:
        """Derived once, on first use: every worker of the deployment derives the
        same one from the same master key."""
        if self._signer is None:
            self._signer = SessionSigner.derive(
                keyring.data_key(SESSION_KEY_NAME), self.admin_token
            )
        return self._signer


def _signer(request: web.Request) -> SessionSigner:
    return request.app[CONSOLE].signer(request.app[ADMIN_STATE].keyring)


CONSOLE = web.AppKey("console", Console)


def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("effect_broker.admin.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def _page(
    request: web.Request, name: str, *, status: int = 200, **context: Any
) -> web.Response:
    console = request.app[CONSOLE]
    text = console.templates.get_template(name).render(prefix=PREFIX, **context)
    return web.Response(
        text=text, status=status, content_type="text/html", headers=SECURITY_HEADERS
    )


def _session(request: web.Request) -> Session | None:
    return _signer(request).read(request.cookies.get(COOKIE), datetime.now(UTC))


def _signed_in(request: web.Request) -> tuple[Session, str]:
    """The session and its CSRF token, or a redirect to the login form."""
    session = _session(request)
    if session is None:
        raise web.HTTPSeeOther(f"{PREFIX}/login")
    return session, _signer(request).csrf_for(session)


# -- login --------------------------------------------------------------------------


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
    if _session(request) is not None:
        raise web.HTTPSeeOther(f"{PREFIX}/effects")
    return _page(
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
        return _forbidden(request)
    form = await request.post()
    token = str(form.get("token", "")).strip()
    tenant = await _tenant_for(request, token) if token else None
    if tenant is None:
        error = (
            "That is not the admin token."
            if token
            else "Enter the admin token (EFFECT_BROKER_ADMIN_TOKEN)."
        )
        return _page(
            request,
            "login.html",
            status=401,
            error=error,
            configured=_configured(request),
            session=None,
            csrf="",
        )
    cookie, _ = _signer(request).issue(tenant, datetime.now(UTC))
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
    session, _ = _signed_in(request)
    form = await request.post()
    if not _signer(request).csrf_ok(session, str(form.get("csrf", ""))):
        return _forbidden(request)
    answer = web.HTTPSeeOther(f"{PREFIX}/login")
    answer.del_cookie(COOKIE, path=PREFIX)
    raise answer


def _forbidden(request: web.Request) -> web.Response:
    return _page(
        request,
        "message.html",
        status=403,
        title="Form refused",
        message="This form did not come from this console session (its CSRF token "
        "is missing or wrong). Open the page again and resubmit.",
        link=f"{PREFIX}/effects",
        session=None,
        csrf="",
    )


# -- pages --------------------------------------------------------------------------


async def index(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther(f"{PREFIX}/effects")


async def stylesheet(request: web.Request) -> web.Response:
    css = resources.files("effect_broker.admin.console").joinpath(CSS).read_text()
    return web.Response(
        text=css, content_type="text/css", headers={"Cache-Control": "max-age=3600"}
    )


async def waiting(request: web.Request) -> web.Response:
    """Unknown and manual-review effects: counts by route and age, then each one."""
    session, csrf = _signed_in(request)
    oldest_first = request.query.get("order") == "oldest"
    store = request.app[ADMIN_STATE].store
    page = await store.list_effects(
        session.tenant, EffectFilter(statuses=AWAITING), limit=MAX_LIMIT
    )
    view = waiting_view(
        page.effects,
        datetime.now(UTC),
        oldest_first=oldest_first,
        truncated=page.next_cursor is not None,
    )
    return _page(
        request,
        "effects.html",
        session=session,
        csrf=csrf,
        view=view,
        oldest_first=oldest_first,
        limit=MAX_LIMIT,
    )


async def _effect_or_404(
    request: web.Request, session: Session, csrf: str
) -> Effect | web.Response:
    text = request.match_info["effect_id"]
    try:
        effect_id = UUID(text)
        return await request.app[ADMIN_STATE].store.get(session.tenant, effect_id)
    except (ValueError, EffectNotFound):
        return _page(
            request,
            "message.html",
            status=404,
            title="No such effect",
            message=f"There is no effect {text} for this tenant.",
            link=f"{PREFIX}/effects",
            session=session,
            csrf=csrf,
        )


async def effect_page(request: web.Request) -> web.Response:
    session, csrf = _signed_in(request)
    effect = await _effect_or_404(request, session, csrf)
    if isinstance(effect, web.Response):
        return effect
    return await _render_effect(request, session, csrf, effect)


async def _render_effect(
    request: web.Request,
    session: Session,
    csrf: str,
    effect: Effect,
    *,
    status: int = 200,
    error: str | None = None,
    form: dict[str, str] | None = None,
) -> web.Response:
    state = request.app[ADMIN_STATE]
    events = await state.store.events(session.tenant, effect.effect_id)
    attempts = await state.store.attempts(session.tenant, effect.effect_id)
    shown = shown_request(state, effect)
    receipt_text = None
    if effect.status not in AWAITING_OPERATOR:
        receipt = await state.store.receipt(session.tenant, effect.effect_id)
        if receipt is not None:
            answer = open_receipt(state.keyring, receipt, effect)
            body = answer.body.decode("utf-8", "replace")
            receipt_text = f"{answer.status} {answer.reason} ({receipt.source})\n{body}"
    trace_id = trace_id_of(effect)
    trace_url = request.app[CONSOLE].trace_url
    awaiting = effect.status in AWAITING_OPERATOR
    return _page(
        request,
        "effect.html",
        status=status,
        session=session,
        csrf=csrf,
        effect=effect,
        guarantee=GUARANTEES[effect.safety],
        request_shown=shown,
        attempts=attempts_view(attempts, events),
        history=history_view(events),
        receipt=receipt_text,
        trace_id=trace_id,
        trace_link=trace_url.replace("{trace_id}", trace_id)
        if trace_url and trace_id
        else None,
        choices=choices(permitted(effect)) if awaiting else [],
        awaiting=awaiting,
        error=error,
        form=form or {},
        resolved=request.query.get("resolved"),
    )


def _resolution_json(form: dict[str, str]) -> bytes:
    """The console's form as the admin API's resolve body, so both validate alike.

    The evidence box is free text: what you checked and what you saw, kept under
    ``finding`` (with ``via: console``) in the effect's history.
    """
    body: dict[str, Any] = {
        "resolution": form["resolution"],
        "reason": form["reason"],
        "evidence": {"finding": form["evidence"], "via": "console"}
        if form["evidence"].strip()
        else {},
    }
    if form["external_id"].strip():
        body["external_id"] = form["external_id"].strip()
    return json.dumps(body).encode()


async def resolve(request: web.Request) -> web.Response:
    session, csrf = _signed_in(request)
    posted = await request.post()
    if not _signer(request).csrf_ok(session, str(posted.get("csrf", ""))):
        return _forbidden(request)
    effect = await _effect_or_404(request, session, csrf)
    if isinstance(effect, web.Response):
        return effect
    form = {
        name: str(posted.get(name, ""))
        for name in ("resolution", "reason", "evidence", "external_id", "version")
    }
    if form["version"] != str(effect.version):
        return _stale(request, session, csrf, effect)
    words = [choice.value for choice in permitted(effect)]
    if form["resolution"] not in words:
        return await _render_effect(
            request,
            session,
            csrf,
            effect,
            status=400,
            error="Choose one of the resolutions offered.",
            form=form,
        )
    if not form["evidence"].strip():
        return await _render_effect(
            request,
            session,
            csrf,
            effect,
            status=400,
            error="Evidence is required: say where you checked and what you saw.",
            form=form,
        )
    try:
        resolution = parse_resolution_body(_resolution_json(form))
        await request.app[ADMIN_STATE].engine.resolve(
            effect, resolution, actor=f"operator:{session.tenant}"
        )
    except InvalidResolution as exc:
        return await _render_effect(
            request, session, csrf, effect, status=400, error=exc.message, form=form
        )
    except StaleVersion:
        return _stale(request, session, csrf, effect)
    except EffectBrokerError as exc:
        if exc.status >= 500:
            raise
        return await _render_effect(
            request,
            session,
            csrf,
            effect,
            status=exc.status,
            error=exc.message,
            form=form,
        )
    raise web.HTTPSeeOther(f"{PREFIX}/effects/{effect.effect_id}?resolved=1")


def _stale(
    request: web.Request, session: Session, csrf: str, effect: Effect
) -> web.Response:
    return _page(
        request,
        "message.html",
        status=409,
        title="This effect changed since the form was shown",
        message=(
            f"Effect {effect.effect_id} is now {effect.status} (version "
            f"{effect.version}). Nothing was changed: read the page as it is now, "
            "then decide again."
        ),
        link=f"{PREFIX}/effects/{effect.effect_id}",
        session=session,
        csrf=csrf,
    )


def add_console(
    app: web.Application, *, admin_token: str | None, trace_url: str | None
) -> None:
    """Serve the console under ``/console`` on the admin app."""
    app[CONSOLE] = Console(_templates(), admin_token, trace_url)
    app.router.add_get(PREFIX, index)
    app.router.add_get(f"{PREFIX}/", index)
    app.router.add_get(f"{PREFIX}/{CSS}", stylesheet)
    app.router.add_get(f"{PREFIX}/login", login_form)
    app.router.add_post(f"{PREFIX}/login", login)
    app.router.add_post(f"{PREFIX}/logout", logout)
    app.router.add_get(f"{PREFIX}/effects", waiting)
    app.router.add_get(f"{PREFIX}/effects/{{effect_id}}", effect_page)
    app.router.add_post(f"{PREFIX}/effects/{{effect_id}}/resolve", resolve)
