"""Every exception a front can meet, as the problem answer a client is given.

The proxy's middleware, the admin API's, the MCP endpoint's refusals, the raw CONNECT
front and the edge's handler for malformed HTTP all ask ``failure_answer`` and keep
only their framing (an aiohttp response, a JSON-RPC error, bytes on a socket) and
their logging. So a ledger outage reads the same on every port, a 407 always carries
its challenge, a 429 its Retry-After, and a timed-out body always closes the
connection, whichever front met it; and no exception's text (which may quote a
database host or a client's bytes) reaches a client unless it was written for one.
"""

from __future__ import annotations

from aiohttp import web

from effect_broker.answers.table import Answer
from effect_broker.errors import (
    BodyTooLarge,
    EffectBrokerError,
    MalformedRequest,
    ProxyAuthenticationRequired,
    RequestTimeout,
    StoreError,
    StoreUnavailable,
    TooManyFailedCredentials,
)

UNEXPECTED = "the proxy failed unexpectedly; the error is in its log"
PROXY_CHALLENGE = 'Basic realm="effect-broker"'


def failure_answer(
    exc: BaseException | None,
    *,
    status: int | None = None,
    unexpected: str = UNEXPECTED,
) -> Answer | None:
    """The answer for ``exc``, or None for an aiohttp HTTP exception that is not a
    failure (a redirect or another status the caller lets aiohttp send).

    ``status``: the status aiohttp chose for a request it could not parse (the edge);
    below 500 that is a malformed request whatever the parser's exception.
    ``unexpected``: the detail of the answer for an error nobody meant (a bug).
    """
    if isinstance(exc, EffectBrokerError):
        return _ours(exc)
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return Answer(BodyTooLarge())
    if isinstance(exc, web.HTTPException):
        return None
    if status is not None and status < 500:
        # aiohttp's messages for a malformed request quote the offending bytes, which
        # may be a credential: only the kind of error is named.
        kind = type(exc).__name__ if exc is not None else "error"
        return Answer(
            MalformedRequest(
                f"the request is not valid HTTP/1.1 ({kind}); nothing was forwarded or "
                "recorded. Check the request line, header names and values, and framing"
            ),
            status=status,
            close=True,
        )
    return Answer(EffectBrokerError(unexpected), status=status, close=status is not None)


def _ours(exc: EffectBrokerError) -> Answer:
    """An error raised on purpose: its own problem, with what its kind requires."""
    if isinstance(exc, StoreUnavailable):
        return Answer(
            StoreUnavailable("the ledger database is unreachable; nothing was sent")
        )
    if isinstance(exc, StoreError):
        return Answer(
            StoreError("the ledger refused the operation; the error is in the log")
        )
    if isinstance(exc, ProxyAuthenticationRequired):
        return Answer(exc, headers={"Proxy-Authenticate": PROXY_CHALLENGE})
    if isinstance(exc, TooManyFailedCredentials):
        return Answer(exc, retry_after=exc.retry_after)
    if isinstance(exc, RequestTimeout):
        return Answer(exc, close=True)  # the rest of the body may still be on its way
    return Answer(exc)
