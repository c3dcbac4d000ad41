"""Which headers cross the proxy, in each direction (pure, no I/O).

The target must see exactly one idempotency or correlation key, the derived one: whatever
the client sent under that name is replaced, never merged. Proxy plumbing (hop-by-hop
headers, ``Proxy-Authorization``, the operation key) never leaves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# RFC 9110 section 7.6.1, plus the de facto proxy headers that are hop-by-hop in practice.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

Headers = list[tuple[str, str]]

# RFC 9110 section 11: credentials are a token68 (letters, digits, -._~+/ and trailing =)
# or auth-params; either way visible ASCII.
_VISIBLE_ASCII = frozenset(chr(code) for code in range(0x21, 0x7F))


def credentials(value: str | None, scheme: str) -> str | None:
    """The credentials of an ``Authorization``-style header using ``scheme``, else None.

    Credentials are visible ASCII, so a value with anything else is no credential: the
    caller answers 401/407 as for a missing one. Checked here, before any decoding or
    hashing, because aiohttp hands undecodable header bytes over as lone surrogates and
    every later ``encode`` or base64 step would raise on them.
    """
    if not value:
        return None
    written, _, rest = value.partition(" ")
    rest = rest.strip()
    if written.lower() != scheme.lower() or not rest:
        return None
    return rest if _VISIBLE_ASCII.issuperset(rest) else None


def end_to_end(headers: Iterable[tuple[str, str]]) -> Headers:
    """The headers minus everything that belongs to one connection only."""
    return _kept(headers, HOP_BY_HOP)


def _kept(headers: Iterable[tuple[str, str]], drop: frozenset[str]) -> Headers:
    """The headers whose names are not in ``drop`` nor named by ``Connection``; every
    request and answer passes through here, so it takes one pass, and a second only
    when a ``Connection`` header names more to drop (``drop`` always holds it)."""
    kept: Headers = []
    named: set[str] = set()
    for name, value in headers:
        lowered = name.lower()
        if lowered not in drop:
            kept.append((name, value))
        elif lowered == "connection":
            named.update(t.strip().lower() for t in value.split(",") if t.strip())
    if named - drop:
        return [(name, value) for name, value in kept if name.lower() not in named]
    return kept


#: A client's declaration that a request repeating a recent payload under a new
#: operation key is meant (a second, equal order): the duplicate guard lets it through.
#: The proxy's own header: never forwarded.
#: Set on an answer given back from a receipt instead of a new send.
REPLAYED_HEADER = "Idempotent-Replayed"
REPEAT_HEADER = "Effect-Repeat"
REPEAT_INTENTIONAL = "intentional"


def upstream_request_headers(
    incoming: Iterable[tuple[str, str]],
    *,
    operation_key_header: str,
    downstream_header: str | None,
    downstream_key: str | None,
    inject: Mapping[str, str],
) -> Headers:
    """Headers for the upstream request of a recorded effect.

    ``Host`` and ``Content-Length`` are left to the HTTP client, which derives them from
    the upstream URL and the unchanged body bytes.
    """
    replaced = {
        operation_key_header.lower(),
        REPEAT_HEADER.lower(),
        "host",
        "content-length",
    }
    replaced.update(name.lower() for name in inject)
    if downstream_header is not None:
        replaced.add(downstream_header.lower())
    headers = [
        (name, value)
        for name, value in end_to_end(incoming)
        if name.lower() not in replaced
    ]
    headers.extend(inject.items())
    if downstream_header is not None and downstream_key is not None:
        headers.append((downstream_header, downstream_key))
    return headers


_PASSTHROUGH_DROP = HOP_BY_HOP | {"host", "content-length"}
_RESPONSE_DROP = HOP_BY_HOP | {"content-length"}


def passthrough_request_headers(incoming: Iterable[tuple[str, str]]) -> Headers:
    """Headers for an unmatched request: untouched apart from connection plumbing."""
    return _kept(incoming, _PASSTHROUGH_DROP)


def response_headers(incoming: Iterable[tuple[str, str]]) -> Headers:
    """Response headers worth keeping in a receipt and giving back to the client.

    ``Content-Length`` is recomputed from the stored body; the body is kept exactly as the
    target encoded it, so ``Content-Encoding`` stays true.
    """
    return _kept(incoming, _RESPONSE_DROP)


MAX_PREFERRED_WAIT = 60.0  # seconds a client may ask a duplicate to wait


def preferred_wait(prefer_values: Iterable[str]) -> float | None:
    """The ``wait`` preference of RFC 7240 (``Prefer: wait=10``, possibly among others,
    in one or more ``Prefer`` headers), in seconds, capped at ``MAX_PREFERRED_WAIT``.

    None when absent or unreadable: a preference the server cannot read is ignored
    (RFC 7240 section 2), never an error.
    """
    for value in prefer_values:
        for preference in value.split(","):
            name, _, rest = preference.strip().partition("=")
            if name.strip().lower() != "wait":
                continue
            number = rest.partition(";")[0].strip().strip('"')
            # ASCII digits only (RFC 9110 DIGIT): str.isdigit() also takes "²",
            # which float() refuses.
            if number.isascii() and number.isdigit():
                return min(float(number), MAX_PREFERRED_WAIT)
            return None
    return None
