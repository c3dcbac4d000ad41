"""The one intake: from a request on a recorded route to the engine's ``Intent``.

The HTTP proxy and the MCP endpoint read a body under the same limit, check an
operation key by the same rules, bind it to the same canonical fingerprint and hand
the target the same headers; only what is hashed differs (the HTTP method, query and
canonical body, or the tool and its arguments), and that each adapter says in a
``Payload``. Two copies of this would let one adapter accept a key, or forward a
header, that the other refuses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aiohttp import web

from effect_broker.canonical import request_hash
from effect_broker.config.contracts import Route
from effect_broker.config.paths import RequestPath
from effect_broker.engine import Intent, StoredRequest
from effect_broker.errors import BodyTooLarge, InvalidOperationKey, MissingOperationKey
from effect_broker.headers import upstream_request_headers

MAX_OPERATION_KEY = 255
CHUNK = 64 * 1024
#: Unicode category Cc, exactly: C0, DEL and C1 (U+0085 included).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_length(length: int | None, limit: int) -> None:
    """Refuse a body whose declared length is over ``limit`` before reading it (also
    before inviting it with ``100 Continue``)."""
    if length is not None and length > limit:
        raise BodyTooLarge(f"the body is {length} bytes; this proxy accepts {limit}")


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, refused as soon as it is known to be over ``limit`` bytes."""
    check_length(request.content_length, limit)
    body = bytearray()
    async for chunk in request.content.iter_chunked(CHUNK):
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"the body is larger than the {limit} bytes accepted")
    return bytes(body)


def key_problem(key: str, name: str) -> str | None:
    """What is wrong with an operation key sent as ``name`` (a header or a tool
    argument), or None: the same rules whichever adapter it came through."""
    if len(key) > MAX_OPERATION_KEY:
        return f"{name} is {len(key)} characters long; the limit is {MAX_OPERATION_KEY}"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        # aiohttp keeps undecodable header bytes as lone surrogates; nothing downstream
        # (digest, ledger, logs) can carry them, so the key is refused here, by name.
        return f"{name} must be valid UTF-8 text; it contains undecodable bytes"
    # Category Cc is C0, DEL and the C1 range (U+0080-U+009F, U+0085 included): a
    # control character in a key is never intent, only a framing or copy-paste accident.
    if _CONTROL.search(key):
        return (
            f"{name} must not contain control characters (tabs, line breaks, "
            "U+0000-U+001F, U+007F-U+009F); use printable text such as 'order-42:charge'"
        )
    return None


def operation_key(request: web.Request, header: str) -> str:
    """The caller's name for this business intent, from its header, validated."""
    values = request.headers.getall(header, [])
    if not values or not values[0]:
        raise MissingOperationKey(
            f"route requires a {header} header naming this intent, e.g. "
            f"'{header}: order-42:charge'; it must stay the same on every retry"
        )
    if len(values) > 1:
        raise InvalidOperationKey(f"send exactly one {header} header")
    problem = key_problem(values[0], header)
    if problem is not None:
        raise InvalidOperationKey(problem)
    return values[0]


@dataclass(frozen=True, slots=True)
class Payload:
    """What binds an operation key to its intent (hashed) and what the target gets.

    ``method``, ``query`` and ``hashed`` go into the fingerprint: for HTTP the method,
    the canonical query and body; for MCP ``tools/call``, no query, and the tool with
    its arguments. ``body`` is sent (for MCP, without the operation key argument).
    """

    method: str
    query: bytes
    hashed: bytes
    body: bytes


def fingerprint(route: Route, path: RequestPath, payload: Payload) -> str:
    """What binds an operation key on ``route`` (bound to its contract): computed
    before anything else, since a retry answered from memory needs nothing more."""
    contract = route.contract
    return request_hash(
        method=payload.method,
        route=route.name,
        path=path.text,
        query=payload.query,
        body=payload.hashed,
        contract_name=contract.name,
        contract_version=contract.version,
    )


def intent(
    request: web.Request,
    *,
    tenant: str,
    key: str,
    route: Route,
    bound_to: str,
    url: str,
    payload: Payload,
    preview: Mapping[str, Any],
    wait: timedelta | None = None,
) -> Intent:
    """The engine's intent for ``request`` on ``route`` (bound to its contract): the
    ``fingerprint`` that binds ``key`` (``bound_to``), and the request the target must
    see, before the derived key and injected secrets are added."""
    contract = route.contract
    headers = upstream_request_headers(
        request.headers.items(),
        operation_key_header=route.operation_key_header,
        downstream_header=contract.downstream_header,
        downstream_key=None,
        inject={},
    )
    return Intent(
        tenant=tenant,
        operation_key=key,
        request_hash=bound_to,
        route=route,
        request=StoredRequest(request.method, url, headers, payload.body),
        preview=preview,
        wait=wait,
    )


def is_absolute_form(request: web.Request) -> bool:
    """Forward mode: the client (via HTTP_PROXY) sent ``POST http://host/path``."""
    return request.raw_path.startswith(("http://", "https://"))
