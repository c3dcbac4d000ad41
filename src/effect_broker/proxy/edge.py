"""The proxy's edge: how long connections may idle, how many may be open, and what a
client that is not speaking HTTP properly gets back.

aiohttp's defaults suit an application server behind a load balancer, not a sidecar any
local process can open thousands of sockets to: an idle connection is kept for an hour,
nothing caps how many are open, a malformed request is answered in text/plain and logged
at ERROR with its raw bytes (an ``Authorization`` header included). Here:

- ``keepalive_timeout`` (aiohttp's own option) closes a connection that sits idle, and
  also one whose request head never completes: aiohttp's timer runs until a whole head
  has arrived.
- ``header_timeout`` bounds the wait for the first bytes in the CONNECT front, before
  aiohttp sees the connection (see ``connect``).
- ``ConnectionGate`` caps open client connections; beyond the cap a connection gets a 503
  problem+json on the raw transport and is closed.
- ``EdgeRequestHandler`` answers malformed requests with problem+json and logs only the
  kind of error, never the bytes.
- ``quiet_accept_errors`` turns asyncio's traceback per failed ``accept()`` (EMFILE when
  file descriptors run out) into one rate-limited line.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from effect_broker.answers import as_response, failure_answer
from effect_broker.config.settings import Settings
from effect_broker.errors import RequestTimeout
from effect_broker.ratelimited_log import RateLimitedLog

log = logging.getLogger("effect_broker.edge")
quiet = RateLimitedLog(log)

ACCEPT_FAILED = "socket.accept() out of system resource"
UNEXPECTED = "the proxy failed unexpectedly; see its log"


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """Connection and pass-through limits of the proxy port (see ``Settings``)."""

    keepalive_timeout: float = 15.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 1024
    max_passthrough_bytes: int = 10 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> EdgeLimits:
        return cls(
            keepalive_timeout=settings.keepalive_timeout.total_seconds(),
            header_timeout=settings.header_timeout.total_seconds(),
            body_timeout=settings.body_timeout.total_seconds(),
            max_connections=settings.max_connections,
            max_passthrough_bytes=settings.max_passthrough_bytes,
        )


EDGE_LIMITS = web.AppKey("edge_limits", EdgeLimits)


class ConnectionGate:
    """Counts open client connections of one port and says whether one more may open.

    A connection is counted from ``admit`` until ``release``: the CONNECT front admits
    it, and whichever protocol owns the transport when it closes releases it.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def admit(self) -> bool:
        if self.open >= self.limit:
            quiet.warning(
                "connection-cap",
                "refusing client connections: %d are open, the limit "
                "(EFFECT_BROKER_MAX_CONNECTIONS) is %d",
                self.open,
                self.limit,
            )
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1


class EdgeRequestHandler(RequestHandler):
    """aiohttp's request handler, with problem+json errors and logs free of raw bytes."""

    def __init__(
        self, manager: web.Server, *, gate: ConnectionGate | None = None, **kwargs: Any
    ) -> None:
        super().__init__(manager, **kwargs)
        self._gate = gate

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._gate is not None:
            self._gate.release()
            self._gate = None
        super().connection_lost(exc)

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        # After a body deadline's 408 has been sent, aiohttp drains what is left of the
        # body ("lingering close"), meets the deadline's error again and logs it as
        # unhandled before closing the connection, which is exactly what is wanted.
        if isinstance(kwargs.get("exc_info"), RequestTimeout):
            return
        super().log_exception(*args, **kwargs)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # aiohttp's messages for a malformed request quote the offending bytes, which
        # may be a credential: log the kind of error only (so does the answer).
        kind = type(exc).__name__ if exc is not None else "error"
        if status >= 500:
            quiet.error("request-error", "failed to handle a request: %s", kind)
        else:
            quiet.warning(
                "malformed-request",
                "refused a malformed request from %s: %s (%d)",
                request.remote,
                kind,
                status,
            )
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was already started; cannot send another")
        answer = failure_answer(exc, status=status, unexpected=UNEXPECTED)
        assert answer is not None  # a parser's error is never an HTTP exception
        return as_response(replace(answer, close=True))  # the framing is lost


def handler_factory(
    http: web.Server,
    *,
    keepalive_timeout: float,
    gate: ConnectionGate | None = None,
) -> Any:
    """A protocol factory building ``EdgeRequestHandler`` for aiohttp's ``Server``."""
    loop = asyncio.get_running_loop()

    def build() -> EdgeRequestHandler:
        return EdgeRequestHandler(
            http,
            gate=gate,
            loop=loop,
            access_log=None,
            keepalive_timeout=keepalive_timeout,
        )

    return build


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Log a failed ``accept()`` (EMFILE and kin) as one rate-limited line.

    asyncio already pauses accepting for a second after such a failure; its default
    report is a full traceback each time, which under a flood is a log storm. Every
    other exception context goes to the handler that was installed before.
    """
    previous = loop.get_exception_handler()
    if getattr(previous, "quiet_accept", False):
        return

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == ACCEPT_FAILED:
            exc = context.get("exception")
            quiet.error(
                "accept",
                "cannot accept connections: %s; retrying every second. Keep "
                "EFFECT_BROKER_MAX_CONNECTIONS well below the file limit (ulimit -n)",
                exc.strerror if isinstance(exc, OSError) else exc,
            )
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler.quiet_accept = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)
