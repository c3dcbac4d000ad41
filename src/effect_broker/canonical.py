"""Canonical request identity: what makes two requests "the same payload".

An ``Operation-Key`` is bound to one payload. A retry must hash equal even if the client
re-serialized its body (key order, whitespace, ``4.50`` vs ``4.5``), and a different
payload must never hash equal. So bodies are canonicalized before hashing: RFC 8785 (JCS)
for JSON, sorted pairs for form data, raw bytes otherwise.

Parsing is strict on purpose. Input that servers read differently (duplicate keys, lone
surrogates, numbers a double cannot hold exactly) is refused rather than guessed at: a
guess could make two different payloads collide, and a retry with a changed payload would
then replay a receipt for something the client did not ask for. Pure code, no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
from decimal import Decimal
from typing import Any
from urllib.parse import quote_from_bytes, unquote_to_bytes

import rfc8785

from effect_broker.errors import CanonicalizationError

__all__ = [
    "canonical_body",
    "canonical_form",
    "canonical_json",
    "canonical_query",
    "downstream_key",
    "request_hash",
]

_UTF8_BOM = b"\xef\xbb\xbf"
# I-JSON (RFC 7493): integers outside this range cannot be held exactly by a double, so
# two different IDs could collapse into one value. rfc8785 uses the same bounds.
_MAX_SAFE_INT = 2**53 - 1
_MAX_SAFE_INT_DIGITS = len(str(_MAX_SAFE_INT))
# A fixed nesting limit keeps refusal independent of how deep the caller's stack is.
_MAX_DEPTH = 256
_BAD_PERCENT = re.compile(rb"%(?![0-9A-Fa-f]{2})")
_FORM_TYPE = "application/x-www-form-urlencoded"


def _show(text: str, limit: int = 40) -> str:
    """Quote a piece of input for an error message, short and with escapes visible."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


# --- JSON -------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise CanonicalizationError(f"{name} is not valid JSON")


def _parse_int(literal: str) -> int:
    if len(literal.lstrip("-")) <= _MAX_SAFE_INT_DIGITS:
        value = int(literal)
        if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            return value
    raise CanonicalizationError(
        f"integer {_show(literal)} is outside ±(2**53 - 1), the range JSON numbers hold "
        "exactly (I-JSON, RFC 7493); send it as a string"
    )


def _parse_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise CanonicalizationError(
            f"number {_show(literal)} is too large for an IEEE-754 double"
        )
    mantissa = literal.lower().partition("e")[0]
    if value == 0 and any(digit in mantissa for digit in "123456789"):
        raise CanonicalizationError(
            f"number {_show(literal)} is too small for an IEEE-754 double (it would be 0)"
        )
    if Decimal(literal) != Decimal(repr(value)):
        # The double nearest the literal is another number: two payloads that differ
        # here would hash equal (0.1 and 0.10000000000000000001, 2**53 + 1 and 2**53).
        raise CanonicalizationError(
            f"number {_show(literal)} cannot be held exactly by an IEEE-754 double (it "
            f"would become {value!r}), so it could not be told apart from that "
            "number; send it as a string, or with no more digits than a double holds"
        )
    return value


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)  # in C; only a short dict means a duplicate to find and name
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise CanonicalizationError(f"duplicate key {_show(key)} in JSON object")
            seen.add(key)
    return obj


_SURROGATE = re.compile("[\ud800-\udfff]")
# RFC 8785 for a tree without floats whose keys are all ASCII, in C: strings escape as
# JSON.stringify does (the two-letter escapes, other controls as lowercase \u00xx, the
# rest as is), integers within ±(2**53 - 1) print as a double would, and ASCII keys sort
# the same by code point as by UTF-16 code unit. Anything else goes to rfc8785.
_SIMPLE_JCS = json.JSONEncoder(
    ensure_ascii=False, check_circular=False, sort_keys=True, separators=(",", ":")
)
# ``JSONEncoder.encode`` builds its C encoder anew on every call (half its cost for a
# small body); CPython's is built once here with the same settings, else ``encode``.
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_SIMPLE_C = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(
        None, None, json.encoder.encode_basestring, None, ":", ",", True, False, True
    )
)


def _simple_jcs(value: Any) -> bytes:
    if _SIMPLE_C is None:
        return _SIMPLE_JCS.encode(value).encode("utf-8")
    return "".join(_SIMPLE_C(value, 0)).encode("utf-8")


def _check_tree(value: Any) -> bool:
    """Refuse lone surrogates (legal as ``\\ud800`` escapes, not as text), deep nests;
    say whether the tree is simple: no float and every key ASCII (see ``_SIMPLE_JCS``)."""
    simple = True
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise CanonicalizationError(
                f"JSON nesting is deeper than {_MAX_DEPTH} levels"
            )
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict):
            for key in item:
                if not key.isascii():
                    simple = False
                    _check_text(key)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, float):
            simple = False
    return simple


def _check_text(text: str) -> None:
    if not text.isascii() and (found := _SURROGATE.search(text)) is not None:
        raise CanonicalizationError(
            f"lone surrogate \\u{ord(found.group()):04x} in a JSON string"
        )


# Built once: ``json.loads`` with hooks builds a decoder (and its scanner) every call.
_DECODER = json.JSONDecoder(
    object_pairs_hook=_reject_duplicates,
    parse_constant=_refuse_constant,
    parse_int=_parse_int,
    parse_float=_parse_float,
)


def canonical_json(body: bytes) -> bytes:
    """Parse ``body`` as strict JSON (RFC 8259 + I-JSON) and return its RFC 8785 form.

    An empty body is not JSON and is refused here; ``canonical_body`` handles it.
    """
    if body.startswith(_UTF8_BOM):
        raise CanonicalizationError("JSON must not start with a UTF-8 byte order mark")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CanonicalizationError(f"invalid UTF-8 at byte {exc.start}") from None
    if not text.strip(" \t\r\n"):
        raise CanonicalizationError("the body is empty or whitespace, which is not JSON")
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        at_byte = len(text[: exc.pos].encode("utf-8"))
        if exc.msg == "Extra data":
            message = f"unexpected data after the JSON value at byte {at_byte}"
        else:
            message = f"invalid JSON: {exc.msg} at byte {at_byte}"
        raise CanonicalizationError(message) from None
    except RecursionError:
        raise CanonicalizationError(
            f"JSON nesting is deeper than {_MAX_DEPTH} levels"
        ) from None
    if _check_tree(value):
        return _simple_jcs(value)
    try:
        return bytes(rfc8785.dumps(value))
    except rfc8785.CanonicalizationError as exc:  # not expected after the checks above
        raise CanonicalizationError(f"JSON cannot be canonicalized: {exc}") from None


# --- form data and query strings --------------------------------------------------------


def _form_component(raw: bytes, what: str) -> bytes:
    """Percent-decode one name or value (``+`` is a space); refuse what is ambiguous."""
    bad = _BAD_PERCENT.search(raw)
    if bad is not None:
        snippet = raw[bad.start() : bad.start() + 3].decode("ascii", "replace")
        raise CanonicalizationError(f"malformed percent-escape {snippet!r} in {what}")
    decoded = unquote_to_bytes(raw.replace(b"+", b" "))
    try:
        decoded.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CanonicalizationError(
            f"invalid UTF-8 at byte {exc.start} of a {what} after percent-decoding"
        ) from None
    return decoded


def _canonical_pairs(data: bytes, what: str) -> bytes:
    """Decode ``name=value`` pairs and re-encode them sorted by name.

    Empty segments (``a=1&&b=2``, a trailing ``&``) carry nothing and are dropped. A name
    without ``=`` stays distinct from ``name=``. The sort is by name only and stable, so
    repeated names keep their order: ``a=1&a=2`` is a list that differs from ``a=2&a=1``.
    """
    pairs: list[tuple[bytes, bytes | None]] = []
    for segment in data.split(b"&"):
        if not segment:
            continue
        name, equals, value = segment.partition(b"=")
        pairs.append(
            (
                _form_component(name, f"{what} field name"),
                _form_component(value, f"{what} field value") if equals else None,
            )
        )
    pairs.sort(key=lambda pair: pair[0])
    encoded = (
        quote_from_bytes(name, safe="")
        + ("" if value is None else "=" + quote_from_bytes(value, safe=""))
        for name, value in pairs
    )
    return "&".join(encoded).encode("ascii")


def canonical_form(body: bytes) -> bytes:
    """Canonicalize an ``application/x-www-form-urlencoded`` body."""
    return _canonical_pairs(body, "form")


def canonical_query(query: str) -> bytes:
    """Canonicalize a URL query string (without the leading ``?``) like form data."""
    try:
        data = query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalizationError(
            f"query string is not valid text at character {exc.start}"
        ) from None
    return _canonical_pairs(data, "query")


def canonical_body(content_type: str | None, body: bytes) -> bytes:
    """Pick the canonical form by media type; parameters such as charset are ignored.

    An empty body is ``b""`` whatever the type: a bodiless POST is a legitimate request.
    """
    if not body:
        return b""
    media_type = (content_type or "").partition(";")[0].strip().lower()
    kind, _, subtype = media_type.partition("/")
    if media_type == "application/json" or (
        kind == "application" and subtype.endswith("+json")
    ):
        return canonical_json(body)
    if media_type == _FORM_TYPE:
        return canonical_form(body)
    return body


# --- identity ---------------------------------------------------------------------------


def _length_prefixed(field: bytes) -> bytes:
    return len(field).to_bytes(8, "big") + field


def request_hash(
    *,
    method: str,
    route: str,
    path: str,
    query: bytes,
    body: bytes,
    contract_name: str,
    contract_version: str,
) -> str:
    """Hex SHA-256 identifying a request's payload, bound to its route and contract.

    Each field is written as an 8-byte big-endian length followed by its bytes (strings as
    UTF-8). Plain concatenation would let ``path="ab", query="c"`` and ``path="a",
    query="bc"`` hash equal; with a length before every field, the byte stream decodes to
    exactly one tuple of fields, so different splits never collide. The method is
    upper-cased because HTTP methods are case-insensitive in practice.
    """
    fields = (
        method.upper().encode("utf-8"),
        route.encode("utf-8"),
        path.encode("utf-8"),
        query,
        body,
        contract_name.encode("utf-8"),
        contract_version.encode("utf-8"),
    )
    digest = hashlib.sha256()
    for field in fields:
        digest.update(_length_prefixed(field))
    return digest.hexdigest()


def downstream_key(tenant_key: bytes, tenant_id: str, operation_key: str) -> str:
    """The idempotency/correlation key sent upstream in place of the client's.

    Keyed per tenant so two tenants using the same ``Operation-Key`` never share a key at
    the target, and the client's raw key never leaves the proxy. The NUL separator is
    unambiguous because tenant ids are fixed per tenant key. base64url without padding
    fits any header value.
    """
    message = tenant_id.encode("utf-8") + b"\x00" + operation_key.encode("utf-8")
    mac = hmac.new(tenant_key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")
