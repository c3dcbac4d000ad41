"""Console sessions and CSRF tokens: signed values, no server-side table (pure, no I/O).

A browser proves the admin token once, on the login form; it then carries a signed
session cookie (HttpOnly, SameSite=Strict) naming its tenant and when it expires. The
signing secret is derived from the master key, so every worker of one deployment
accepts the same cookie, and, for a sidecar, from the admin token too: a new admin token
ends every console session made with the old one. Each form carries a CSRF token bound
to the session, so a page on another site cannot post a resolution with the cookie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

COOKIE = "effect_broker_console"
LIFETIME = timedelta(hours=8)


@dataclass(frozen=True, slots=True)
class Session:
    tenant: str
    expires_at: datetime
    nonce: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionSigner:
    """Makes and checks session cookies and the CSRF tokens bound to them."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def derive(cls, base_key: bytes, admin_token: str | None) -> SessionSigner:
        """The signer for a deployment: its master-key-derived key, and for a sidecar
        its admin token, so a rotated token signs nothing the old one signed."""
        material = b"effect-broker console session v1|" + (admin_token or "").encode()
        return cls(hmac.new(base_key, material, hashlib.sha256).digest())

    def _mac(self, purpose: str, text: str) -> str:
        digest = hmac.new(self._secret, f"{purpose}|{text}".encode(), hashlib.sha256)
        return _b64(digest.digest())

    def issue(self, tenant: str, now: datetime) -> tuple[str, Session]:
        """A new session for ``tenant``: the cookie value and what it stands for."""
        session = Session(tenant, now + LIFETIME, secrets.token_urlsafe(16))
        body = ".".join(
            (
                str(int(session.expires_at.timestamp())),
                session.nonce,
                _b64(tenant.encode()),
            )
        )
        return f"{body}.{self._mac('session', body)}", session

    def read(self, cookie: str | None, now: datetime) -> Session | None:
        """The session a cookie stands for, or None if forged, malformed or expired."""
        if not cookie:
            return None
        body, _, mac = cookie.rpartition(".")
        if not body or not hmac.compare_digest(mac, self._mac("session", body)):
            return None
        try:
            expires, nonce, tenant = body.split(".")
            expires_at = datetime.fromtimestamp(int(expires), tz=now.tzinfo)
            name = _unb64(tenant).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        if expires_at <= now:
            return None
        return Session(name, expires_at, nonce)

    def csrf_for(self, session: Session) -> str:
        """The token every form of this session carries."""
        return self._mac("csrf", session.nonce)

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self.csrf_for(session))
