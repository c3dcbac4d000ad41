"""The console's pure parts: signed sessions and CSRF tokens, and the redaction of the
stored request an operator is shown."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from effect_broker.admin.console.session import LIFETIME, SessionSigner
from effect_broker.admin.redaction import REDACTED, redact_request
from effect_broker.engine.messages import StoredRequest

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
KEY = b"k" * 32


def test_a_session_reads_back_until_it_expires() -> None:
    signer = SessionSigner.derive(KEY, "token-1")
    cookie, session = signer.issue("acme", NOW)

    read = signer.read(cookie, NOW + timedelta(minutes=5))

    assert read is not None and read.tenant == "acme"
    assert read.nonce == session.nonce
    assert signer.read(cookie, NOW + LIFETIME + timedelta(seconds=1)) is None


def test_a_session_is_bound_to_the_admin_token_and_cannot_be_edited() -> None:
    signer = SessionSigner.derive(KEY, "token-1")
    cookie, _ = signer.issue("acme", NOW)
    body, _, mac = cookie.rpartition(".")
    expires, nonce, _ = body.split(".")
    other_tenant = f"{expires}.{nonce}.Z2xvYmV4.{mac}"  # "globex", same signature

    assert SessionSigner.derive(KEY, "token-2").read(cookie, NOW) is None
    assert SessionSigner.derive(b"x" * 32, "token-1").read(cookie, NOW) is None
    assert signer.read(other_tenant, NOW) is None
    for junk in ("", "a.b", "....", cookie + "x"):
        assert signer.read(junk, NOW) is None


def test_the_csrf_token_belongs_to_one_session() -> None:
    signer = SessionSigner.derive(KEY, "token-1")
    _, mine = signer.issue("acme", NOW)
    _, theirs = signer.issue("acme", NOW)

    assert signer.csrf_ok(mine, signer.csrf_for(mine))
    assert not signer.csrf_ok(mine, signer.csrf_for(theirs))
    assert not signer.csrf_ok(mine, "")
    assert not signer.csrf_ok(mine, None)


def test_credentials_and_injected_headers_are_hidden_the_payload_is_not() -> None:
    body = {
        "to": "ada@example.com",
        "amount": 1200,
        "card": {"number": "4242", "cvc": "123"},
        "auth": [{"access_token": "abc"}],
        "password": "pw",
    }
    request = StoredRequest(
        "POST",
        "http://mail.internal/send",
        [
            ("Authorization", "Bearer s3cret"),
            ("X-Api-Key", "k"),
            ("Idempotency-Key", "derived"),
            ("X-Tenant", "from-the-route"),
            ("Content-Type", "application/json"),
        ],
        json.dumps(body).encode(),
    )

    shown = redact_request(request, injected=["x-tenant"])

    headers = dict(shown.headers)
    assert headers["Authorization"] == headers["X-Api-Key"] == REDACTED
    assert headers["X-Tenant"] == REDACTED  # injected by the route, whatever its name
    assert headers["Idempotency-Key"] == "derived"  # evidence to search the target for
    document = json.loads(shown.body)
    assert document["to"] == "ada@example.com" and document["amount"] == 1200
    assert document["card"]["cvc"] == REDACTED
    assert document["auth"][0]["access_token"] == REDACTED
    assert document["password"] == REDACTED
    for secret in ("s3cret", "abc", "pw", "123"):
        assert f'"{secret}"' not in shown.body and secret not in headers.values()
    assert "body /card/cvc" in shown.redacted and "header X-Tenant" in shown.redacted


def test_bodies_that_are_not_json_are_shown_or_described() -> None:
    def body_of(data: bytes) -> str:
        return redact_request(StoredRequest("POST", "http://t/", [], data)).body

    assert body_of(b"") == "(no body)"
    assert body_of(b"plain words") == "plain words"
    assert body_of(b"\xff\xfe") == "(2 bytes of binary data)"
    assert "larger than" in body_of(b"x" * (64 * 1024 + 1))
