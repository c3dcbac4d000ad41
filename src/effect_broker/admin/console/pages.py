"""The console's handlers: log in, list what waits for an operator, inspect, resolve.

Pages are HTML rendered on the server; nothing is fetched from another origin (the
stylesheet is served here too), and no script is needed. Every change goes through the
same engine call and validation as ``POST /v1/effects/{id}/resolve``; a form shown for
one version of an effect is refused once the effect has changed (409), so an operator
never settles an effect on the strength of a page that no longer describes it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from uuid import UUID

from aiohttp import web

from effect_broker.admin.console.frame import (
    CONSOLE,
    CSS,
    PREFIX,
    Console,
    forbidden,
    render_page,
    signed_in,
    signer_of,
    templates,
)
from effect_broker.admin.console.login import login, login_form, logout
from effect_broker.admin.console.session import Session
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
from effect_broker.engine import AWAITING_OPERATOR, open_receipt, permitted
from effect_broker.errors import (
    EffectBrokerError,
    EffectNotFound,
    InvalidResolution,
    StaleVersion,
)
from effect_broker.models import Effect, EffectFilter

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
    session, csrf = signed_in(request)
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
    return render_page(
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
        return render_page(
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
    session, csrf = signed_in(request)
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
    return render_page(
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
    session, csrf = signed_in(request)
    posted = await request.post()
    if not signer_of(request).csrf_ok(session, str(posted.get("csrf", ""))):
        return forbidden(request)
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
    return render_page(
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
    app[CONSOLE] = Console(templates(), admin_token, trace_url)
    app.router.add_get(PREFIX, index)
    app.router.add_get(f"{PREFIX}/", index)
    app.router.add_get(f"{PREFIX}/{CSS}", stylesheet)
    app.router.add_get(f"{PREFIX}/login", login_form)
    app.router.add_post(f"{PREFIX}/login", login)
    app.router.add_post(f"{PREFIX}/logout", logout)
    app.router.add_get(f"{PREFIX}/effects", waiting)
    app.router.add_get(f"{PREFIX}/effects/{{effect_id}}", effect_page)
    app.router.add_post(f"{PREFIX}/effects/{{effect_id}}/resolve", resolve)
