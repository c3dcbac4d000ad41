"""What every console handler shares: the app key, the page with its security headers,
and the signed-in check.

Its own module so that the login handlers and the effect pages use one way to render
and one way to read a session, and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jinja2
from aiohttp import web

from effect_broker.admin.console.session import COOKIE, Session, SessionSigner
from effect_broker.admin.state import ADMIN_STATE
from effect_broker.crypto import Keyring

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


def signer_of(request: web.Request) -> SessionSigner:
    return request.app[CONSOLE].signer(request.app[ADMIN_STATE].keyring)


CONSOLE = web.AppKey("console", Console)


def templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("effect_broker.admin.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def render_page(
    request: web.Request, name: str, *, status: int = 200, **context: Any
) -> web.Response:
    console = request.app[CONSOLE]
    text = console.templates.get_template(name).render(prefix=PREFIX, **context)
    return web.Response(
        text=text, status=status, content_type="text/html", headers=SECURITY_HEADERS
    )


def session_of(request: web.Request) -> Session | None:
    return signer_of(request).read(request.cookies.get(COOKIE), datetime.now(UTC))


def signed_in(request: web.Request) -> tuple[Session, str]:
    """The session and its CSRF token, or a redirect to the login form."""
    session = session_of(request)
    if session is None:
        raise web.HTTPSeeOther(f"{PREFIX}/login")
    return session, signer_of(request).csrf_for(session)


def forbidden(request: web.Request) -> web.Response:
    return render_page(
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
