"""The request flow, steps 1-8 (docs/architecture.md), for one request on a matched route.

This module is the adapter between HTTP and the engine: it requires the operation key,
reads and hashes the exact payload, hands the intent to the engine, and renders what
the engine did as an answer. Every answer for a matched route carries ``Effect-Id`` and
``Effect-Status``. Decisions and ledger writes live in ``effect_broker.engine``.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from effect_broker.answers import (
    HTTP,
    Payload,
    Relay,
    answer_for,
    as_response,
    cached,
    fingerprint,
    intent,
    is_absolute_form,
    noted,
    operation_key,
    read_body,
    stream_overflow,
)
from effect_broker.canonical import canonical_body, canonical_query
from effect_broker.config.contracts import Contract, DuplicateGuard, Route
from effect_broker.config.paths import RequestPath
from effect_broker.engine import (
    STREAMED_HEADER,
    Answered,
    Intent,
    Outcome,
    StoredResponse,
    upstream_url,
)
from effect_broker.errors import SuspectedDuplicate
from effect_broker.headers import (
    REPEAT_HEADER,
    REPEAT_INTENTIONAL,
    REPLAYED_HEADER,
    preferred_wait,
)
from effect_broker.models import Effect
from effect_broker.problems import effect_headers, problem_response
from effect_broker.proxy.edge_input import printable
from effect_broker.proxy.live_answer import stream_recorded
from effect_broker.proxy.state import ProxyState
from effect_broker.ratelimited_log import RateLimitedLog
from effect_broker.tracing import (
    current_context_headers,
    incoming_context,
    key_digest,
    tracer,
    untraced,
)

log = logging.getLogger("effect_broker.proxy")
#: One line per route a minute at most: a client re-minting keys repeats itself.
duplicate_log = RateLimitedLog(log)


#: Never relayed from a stored answer: ours are set fresh, the length is the body's.
_NOT_RELAYED = frozenset({"effect-id", "effect-status", "content-length"})
_NOT_REPLAYED = _NOT_RELAYED | {REPLAYED_HEADER.lower()}


def stored_response_to_web(
    response: StoredResponse, effect: Effect, *, replayed: bool
) -> web.Response:
    """A stored answer; one that was streamed is framed as it was (chunked). Built in
    one pass: every retry answered from memory comes through here."""
    dropped = _NOT_REPLAYED if replayed else _NOT_RELAYED
    streamed = False
    headers: list[tuple[str, str]] = []
    for name, value in response.headers:
        if name == STREAMED_HEADER:
            streamed = True
        elif name.lower() not in dropped:
            headers.append((name, value))
    headers.extend(effect_headers(effect).items())
    if replayed:
        headers.append((REPLAYED_HEADER, "true"))
    out = web.Response(
        status=response.status,
        reason=response.reason or None,
        body=response.body,
        headers=headers,
    )
    if streamed:
        out.enable_chunked_encoding()
    return out


class EffectRequest:
    """One request on a matched route, carried through the engine."""

    def __init__(
        self,
        state: ProxyState,
        route: Route,
        request: web.Request,
        tenant: str,
        path: RequestPath,
    ) -> None:
        self.path = path  # normalised once: matched, hashed and forwarded the same
        self.state = state
        self.route = route
        self.contract: Contract = route.contract
        self.request = request
        self.tenant = tenant

    async def handle(self) -> web.StreamResponse:
        started = time.perf_counter()
        self.upstream_seconds = 0.0
        try:
            if untraced(self.request.headers):
                return await self._handle()
            return await self._handle_in_span()
        finally:
            self.state.metrics.of_route(self.route.name).overhead.observe(
                time.perf_counter() - started - self.upstream_seconds
            )

    async def _handle_in_span(self) -> web.StreamResponse:
        with tracer.start_as_current_span(
            f"effect {self.route.name}",
            context=incoming_context(self.request.headers),
            kind=SpanKind.SERVER,
            attributes={
                "effect_broker.route": self.route.name,
                "effect_broker.contract": self.contract.ref,
                "effect_broker.safety": self.contract.safety.value,
            },
        ) as span:
            response = await self._handle()
            span.set_attribute("http.response.status_code", response.status)
            for header, attribute in (
                ("Effect-Id", "effect_broker.effect_id"),
                ("Effect-Status", "effect_broker.status"),
            ):
                if header in response.headers:
                    span.set_attribute(attribute, response.headers[header])
            return response

    async def _handle(self) -> web.StreamResponse:
        key = operation_key(self.request, self.route.operation_key_header)
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute("effect_broker.operation_key_digest", key_digest(key))
        body = await read_body(self.request, self.state.max_request_bytes)
        payload = self._payload(body)
        bound_to = fingerprint(self.route, self.path, payload)
        state = self.state
        outcome = cached(state.receipts, self.tenant, key, bound_to)
        if outcome is None:
            wanted = self._intent(key, payload, bound_to)
            guard = self.contract.duplicate_guard
            if guard is not None and not declared_repeat(self.request):
                held = await self._suspected_duplicate(guard, key, wanted.request_hash)
                if held is not None:
                    return held
            outcome = await self.state.engine.submit(wanted)
            self.upstream_seconds += outcome.upstream_seconds
            if isinstance(outcome, Answered) and outcome.attempt.stream is not None:
                try:
                    return await stream_recorded(self.request, outcome)
                finally:  # the body's time at the target is not the proxy's overhead
                    self.upstream_seconds += outcome.attempt.stream.elapsed
            if isinstance(outcome, Answered) and outcome.attempt.overflow is not None:
                return await stream_overflow(outcome, self.request)
        return self._answer(noted(state.receipts, state.metrics, self.route, outcome))

    async def _suspected_duplicate(
        self, guard: DuplicateGuard, key: str, fingerprint: str
    ) -> web.Response | None:
        """Warn about, or hold, a new key whose request equals a recent effect's."""
        earlier = await self.state.store.recent_duplicate(
            self.tenant, self.route.name, fingerprint, key, guard.window
        )
        if earlier is None:
            return None
        self.state.metrics.suspected_duplicates.labels(
            self.route.name, guard.action
        ).inc()
        ago = max(0, int((datetime.now(UTC) - earlier.created_at).total_seconds()))
        duplicate_log.warning(
            f"suspected-duplicate:{self.route.name}",
            "route %s: a new operation key carries the same request as effect %s, "
            "%ss ago (duplicate_payload_window: %s)",
            self.route.name,
            earlier.effect_id,
            ago,
            guard.action,
        )
        if guard.action != "hold":
            return None
        return problem_response(
            SuspectedDuplicate(
                f"this request equals effect {earlier.effect_id}'s, sent {ago}s ago on "
                f"route {self.route.name} under another {self.route.operation_key_header}"
                ", so it was not sent. A retry of that intent must reuse its key "
                f"({earlier.operation_key!r}); a new intent that happens to look the "
                f"same goes through with '{REPEAT_HEADER}: {REPEAT_INTENTIONAL}'"
            ),
            extra={
                "earlier_effect_id": str(earlier.effect_id),
                "earlier_operation_key": earlier.operation_key,
                "earlier_created_at": earlier.created_at.isoformat(),
            },
        )

    def _answer(self, outcome: Outcome) -> web.Response:
        """What the engine did, as the shared table words it for HTTP: the target's
        answer as it came, or a problem+json document."""
        answer = answer_for(outcome, HTTP)
        if isinstance(answer, Relay):
            return stored_response_to_web(
                answer.response, answer.effect, replayed=answer.replayed
            )
        return as_response(answer)

    def _payload(self, body: bytes) -> Payload:
        """The exact payload, as hashed and as sent."""
        request = self.request
        return Payload(
            method=request.method,
            query=canonical_query(request.rel_url.raw_query_string),
            hashed=canonical_body(request.headers.get("Content-Type"), body),
            body=body,
        )

    def _intent(self, key: str, payload: Payload, bound_to: str) -> Intent:
        """The engine's intent: the request as the target must see it (before the
        derived key and secrets), bound to its fingerprint."""
        request = self.request
        origin = str(request.url.origin()) if is_absolute_form(request) else None
        url = upstream_url(
            self.route,
            origin=origin,
            path=self.path,
            raw_query=request.rel_url.raw_query_string,
        )
        return intent(
            request,
            tenant=self.tenant,
            key=key,
            route=self.route,
            bound_to=bound_to,
            url=url,
            payload=payload,
            preview=self._preview(payload.body),
            wait=self._preferred_wait(),
        )

    def _preferred_wait(self) -> timedelta | None:
        """``Prefer: wait=N``: how long a duplicate may wait for the request in flight
        (None: the contract's ``in_flight_wait``)."""
        seconds = preferred_wait(self.request.headers.getall("Prefer", []))
        return None if seconds is None else timedelta(seconds=seconds)

    def _preview(self, body: bytes) -> dict[str, Any]:
        """What an operator may see without decrypting: shape, never values."""
        content_type = self.request.headers.get("Content-Type")
        # jsonb refuses U+0000 and lone surrogates: the preview shows them escaped.
        return {
            "method": self.request.method,
            "path": printable(self.path.text),
            "content_type": None if content_type is None else printable(content_type),
            "body_bytes": len(body),
            # The request span's context: a reconciler that settles this effect later
            # links its own span to it, so the whole story is one click apart.
            "trace": current_context_headers(),
        }


def declared_repeat(request: web.Request) -> bool:
    """The client says this equal payload under a new key is meant (a second order)."""
    value = request.headers.get(REPEAT_HEADER, "")
    return value.strip().lower() == REPEAT_INTENTIONAL
