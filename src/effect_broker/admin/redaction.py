"""The stored request as an operator may see it: secrets replaced, shape kept.

The operator needs the payload to know what to look for in the target's records, but
not the credentials that travelled with it. Header values are hidden when the name
says credential (``Authorization``, ``Cookie``, anything with token, secret, password
or key in it, except the idempotency and correlation keys the proxy itself derives) or
when the route injects that header. In a JSON body, the values of fields with such
names are hidden at any depth. What was hidden is listed, so nobody mistakes a
redaction for an empty value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from effect_broker.admin.state import AdminState
from effect_broker.engine.messages import StoredRequest
from effect_broker.engine.sealed import open_request
from effect_broker.errors import DecryptionError
from effect_broker.models import Effect

REDACTED = "[redacted]"
MAX_SHOWN_BYTES = 64 * 1024

_SECRET_NAME = re.compile(
    r"(authorization|cookie|token|secret|passw(or)?d|api[-_]?key|private|"
    r"credential|session|signature|card[-_]?number|cvc|cvv|ssn)",
    re.IGNORECASE,
)
# Keys the proxy derives or the client must repeat: evidence, not credentials.
_KEEP = frozenset({"idempotency-key", "operation-key", "x-correlation-id"})


@dataclass(frozen=True, slots=True)
class ShownRequest:
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: str  # pretty JSON, text, or a sentence saying what could not be shown
    redacted: list[str]  # header names and JSON paths whose values were hidden


def secret_name(name: str) -> bool:
    return name.lower() not in _KEEP and bool(_SECRET_NAME.search(name))


def _headers(
    headers: Iterable[tuple[str, str]], injected: Iterable[str], hidden: list[str]
) -> list[tuple[str, str]]:
    injected_names = {name.lower() for name in injected}
    shown = []
    for name, value in headers:
        if name.lower() in injected_names or secret_name(name):
            hidden.append(f"header {name}")
            shown.append((name, REDACTED))
        else:
            shown.append((name, value))
    return shown


def _json_value(value: Any, path: str, hidden: list[str]) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            where = f"{path}/{key}"
            if secret_name(str(key)):
                hidden.append(f"body {where}")
                out[key] = REDACTED
            else:
                out[key] = _json_value(item, where, hidden)
        return out
    if isinstance(value, list):
        return [_json_value(item, f"{path}/{n}", hidden) for n, item in enumerate(value)]
    return value


def _body(body: bytes, hidden: list[str]) -> str:
    if not body:
        return "(no body)"
    if len(body) > MAX_SHOWN_BYTES:
        return f"({len(body)} bytes, larger than the {MAX_SHOWN_BYTES} shown here)"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"({len(body)} bytes of binary data)"
    try:
        document = json.loads(text)
    except ValueError:
        return text
    return json.dumps(_json_value(document, "", hidden), indent=2, ensure_ascii=False)


def redact_request(request: StoredRequest, injected: Iterable[str] = ()) -> ShownRequest:
    """``request`` with every credential hidden; ``injected`` names the route's
    injected headers (hidden whatever they are called)."""
    hidden: list[str] = []
    headers = _headers(request.headers, injected, hidden)
    body = _body(request.body, hidden)
    return ShownRequest(request.method, request.url, headers, body, hidden)


def shown_request(state: AdminState, effect: Effect) -> ShownRequest | None:
    """The effect's stored request with credentials hidden; None if it cannot be
    opened (no stored request, or sealed under a key this process does not hold)."""
    try:
        stored = open_request(state.keyring, effect)
    except DecryptionError:
        return None
    return redact_request(stored, state.engine.wiring.injected.get(effect.route, {}))
