"""The request flow, steps 1-8 (docs/architecture.md), for one request on a matched route.

This module is the adapter between HTTP and the engine: it requires the operation key,
reads and hashes the exact payload, hands the intent to the engine, and renders what
the engine did as an answer. Every answer for a matched route carries ``Effect-Id`` and
``Effect-Status``. Decisions and ledger writes live in ``effect_broker.engine``.
"""

from __future__ import annotations

import logging
import time
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from effect_broker.canonical import canonical_body, canonical_query, request_hash
from effect_broker.config.contracts import Contract, DuplicateGuard, Route
from effect_broker.config.paths import RequestPath
from effect_broker.engine import (
    STREAMED_HEADER,
    Answered,
    Busy,
    Conflict,
    Intent,
    NotSent,
    Outcome,
    Replayed,
    StoredRequest,
    StoredResponse,
    Unknowable,
    Unknown,
    read_operator_receipt,
    upstream_url,
)
from effect_broker.errors import (
    BodyTooLarge,
    EffectBrokerError,
    InFlight,
    InvalidOperationKey,
    MissingOperationKey,
    OutcomeUnknown,
    PayloadMismatch,
    ResolvedByOperator,
    SendWithheld,
    SuspectedDuplicate,
    UpstreamBusy,
    UpstreamTLS,
    UpstreamUnreachable,
)
from effect_broker.headers import (
    REPEAT_HEADER,
    REPEAT_INTENTIONAL,
    preferred_wait,
    upstream_request_headers,
)
from effect_broker.models import Effect, ReceiptSource, SafetyClass
from effect_broker.problems import effect_headers, problem_response
from effect_broker.proxy.edge_input import printable
from effect_broker.proxy.live_answer import stream_recorded
from effect_broker.proxy.receipt_cache import SettledReplay, prunable_at
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

MAX_OPERATION_KEY = 255
PAYLOAD_MISMATCH = (
    "this Operation-Key was first used with a different payload; use a new key for a "
    "new intent, or resend the original payload"
)
REPLAYED_HEADER = "Idempotent-Replayed"


def operation_key(request: web.Request, header: str) -> str:
    """The caller's name for this business intent, validated (step 2 of the flow)."""
    values = request.headers.getall(header, [])
    if not values or not values[0]:
        raise MissingOperationKey(
            f"route requires a {header} header naming this intent, e.g. "
            f"'{header}: order-42:charge'; it must stay the same on every retry"
        )
    if len(values) > 1:
        raise InvalidOperationKey(f"send exactly one {header} header")
    key = values[0]
    if len(key) > MAX_OPERATION_KEY:
        raise InvalidOperationKey(
            f"{header} is {len(key)} characters long; the limit is {MAX_OPERATION_KEY}"
        )
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        # aiohttp keeps undecodable header bytes as lone surrogates; nothing downstream
        # (digest, ledger, logs) can carry them, so the key is refused here, by name.
        raise InvalidOperationKey(
            f"{header} must be valid UTF-8 text; it contains undecodable bytes"
        ) from None
    # Category Cc is C0, DEL and the C1 range (U+0080-U+009F, U+0085 included): a
    # control character in a key is never intent, only a framing or copy-paste accident.
    if any(unicodedata.category(ch) == "Cc" for ch in key):
        raise InvalidOperationKey(
            f"{header} must not contain control characters (tabs, line breaks, "
            "U+0000-U+001F, U+007F-U+009F); use printable text such as 'order-42:charge'"
        )
    return key


async def read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(
            f"the body is {request.content_length} bytes; this proxy accepts {limit}"
        )
    body = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"the body is larger than the {limit} bytes accepted")
    return bytes(body)


def stored_response_to_web(
    response: StoredResponse, effect: Effect, *, replayed: bool
) -> web.Response:
    """A stored answer; one that was streamed is framed as it was (chunked)."""
    headers: list[tuple[str, str]] = [
        (name, value)
        for name, value in response.headers
        if name.lower() not in ("effect-id", "effect-status", "content-length")
        and name != STREAMED_HEADER
    ]
    out = web.Response(status=response.status, reason=response.reason or None)
    if any(name == STREAMED_HEADER for name, _ in response.headers):
        out.enable_chunked_encoding()
    for name, value in headers:
        out.headers.add(name, value)
    out.headers.update(effect_headers(effect))
    if replayed:
        out.headers[REPLAYED_HEADER] = "true"
    out.body = response.body
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
            self.state.metrics.overhead.labels(self.route.name).observe(
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
        fingerprint = self._fingerprint(body)
        cached = self.state.receipts.get(self.tenant, key, now=datetime.now(UTC))
        if cached is not None:
            if cached.effect.request_hash != fingerprint:
                return self._answer(Conflict(cached.effect))
            return self._answer(Replayed(cached.effect, cached.response, cached.source))
        guard = self.contract.duplicate_guard
        if guard is not None and not declared_repeat(self.request):
            held = await self._suspected_duplicate(guard, key, fingerprint)
            if held is not None:
                return held
        outcome = await self.state.engine.submit(
            Intent(
                tenant=self.tenant,
                operation_key=key,
                request_hash=fingerprint,
                route=self.route,
                request=self._stored_request(body),
                preview=self._preview(body),
                wait=self._preferred_wait(),
            )
        )
        self.upstream_seconds += outcome.upstream_seconds
        if isinstance(outcome, Answered) and outcome.attempt.stream is not None:
            try:
                return await stream_recorded(self.request, outcome)
            finally:  # the body's time at the target is not the proxy's overhead
                self.upstream_seconds += outcome.attempt.stream.elapsed
        if isinstance(outcome, Answered) and outcome.attempt.overflow is not None:
            return await self._stream_overflow(outcome)
        return self._answer(outcome)

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
        """Render what the engine did: the target's answer, a receipt, or a problem."""
        effect, metrics = outcome.effect, self.state.metrics
        match outcome:
            case Answered(attempt=attempt):
                assert attempt.response is not None
                return stored_response_to_web(attempt.response, effect, replayed=False)
            case Replayed(response=response, source=source):
                metrics.replays.labels(self.route.name).inc()
                retention = self.route.contract.ledger_retention
                self.state.receipts.put(
                    SettledReplay(
                        effect, response, source, prunable_at(effect, retention)
                    )
                )
                if source is ReceiptSource.OPERATOR:
                    return _resolved_by_operator(effect, response)
                return stored_response_to_web(response, effect, replayed=True)
            case Conflict():
                metrics.conflicts.labels(self.route.name).inc()
                return _problem(PayloadMismatch(PAYLOAD_MISMATCH), effect)
            case Busy(reason=reason, retry_after=retry_after):
                return _problem(
                    InFlight(f"this operation is {reason}"),
                    effect,
                    retry_after=retry_after,
                )
            case NotSent(detail=detail, retry_after=retry_after, saturated=True):
                return _problem(
                    UpstreamBusy(
                        f"{detail}; nothing was sent, so retrying with the same "
                        "Operation-Key is safe"
                    ),
                    effect,
                    retry_after=retry_after,
                )
            case NotSent(detail=detail, retry_after=retry_after, withheld=True):
                return _problem(
                    SendWithheld(
                        f"{detail}; retrying with the same Operation-Key is safe"
                    ),
                    effect,
                    retry_after=retry_after,
                )
            case NotSent(detail=detail, tls=True):
                return _problem(
                    UpstreamTLS(
                        f"{detail}; nothing was sent. The proxy always verifies the "
                        "target's certificate (trust a private CA with "
                        "EFFECT_BROKER_UPSTREAM_CA_FILE). This failure is the proxy's "
                        "and does not use up the effect's retries: once the proxy "
                        "trusts the target, retrying with the same Operation-Key "
                        "sends it"
                    ),
                    effect,
                )
            case NotSent(detail=detail, retry_after=retry_after):
                return _problem(
                    UpstreamUnreachable(
                        f"could not reach the target ({detail}); nothing was sent, so "
                        "retrying with the same Operation-Key is safe"
                    ),
                    effect,
                    retry_after=retry_after,
                )
            case Unknown():
                return self._unknown(outcome)
        raise AssertionError(f"unhandled outcome {outcome!r}")

    def _unknown(self, outcome: Unknown) -> web.Response:
        effect, why = outcome.effect, outcome.why
        if why in (Unknowable.TIMED_OUT, Unknowable.LOST):
            return _problem(
                OutcomeUnknown(
                    f"the target may have applied this effect, but its answer was lost "
                    f"({outcome.detail}). {_unknown_advice(effect)}"
                ),
                effect,
                status=504 if why is Unknowable.TIMED_OUT else 502,
                # The same key again is safe and useful where the target deduplicates
                # or can be asked; for an unsafe target it can only be refused.
                retry_helps=effect.safety is not SafetyClass.UNSAFE,
            )
        if why is Unknowable.AWAITING_OPERATOR:
            return _problem(
                OutcomeUnknown(
                    f"the outcome of this effect is unknown ({outcome.detail}); it was "
                    "not sent again. An operator resolves it through the admin API"
                ),
                effect,
                message="whether this effect happened is unknown, and it will not be "
                "sent again: do not retry it under a new key before an operator has "
                "checked the target",
            )
        return _problem(
            OutcomeUnknown(f"{outcome.detail}; it was not sent again"),
            effect,
            retry_after=outcome.retry_after,
            retry_helps=True,  # a lookup can settle it once the bound has passed
        )

    async def _stream_overflow(self, outcome: Answered) -> web.StreamResponse:
        """A body longer than a receipt holds: give this client all of it, live."""
        attempt = outcome.attempt
        assert attempt.response is not None and attempt.overflow is not None
        out = web.StreamResponse(
            status=attempt.response.status, reason=attempt.response.reason or None
        )
        for name, value in attempt.response.headers:
            out.headers.add(name, value)
        out.headers.update(effect_headers(outcome.effect))
        try:
            await out.prepare(self.request)
            await out.write(attempt.response.body)
            async for chunk in attempt.overflow.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
        finally:
            attempt.release()
        return out

    def _fingerprint(self, body: bytes) -> str:
        rel = self.request.rel_url
        return request_hash(
            method=self.request.method,
            route=self.route.name,
            path=self.path.text,
            query=canonical_query(rel.raw_query_string),
            body=canonical_body(self.request.headers.get("Content-Type"), body),
            contract_name=self.contract.name,
            contract_version=self.contract.version,
        )

    def _preferred_wait(self) -> timedelta | None:
        """``Prefer: wait=N``: how long a duplicate may wait for the request in flight
        (None: the contract's ``in_flight_wait``)."""
        seconds = preferred_wait(self.request.headers.getall("Prefer", []))
        return None if seconds is None else timedelta(seconds=seconds)

    def _stored_request(self, body: bytes) -> StoredRequest:
        """The request as the target must see it, before the derived key and secrets."""
        origin = (
            str(self.request.url.origin()) if is_absolute_form(self.request) else None
        )
        url = upstream_url(
            self.route,
            origin=origin,
            path=self.path,
            raw_query=self.request.rel_url.raw_query_string,
        )
        headers = upstream_request_headers(
            self.request.headers.items(),
            operation_key_header=self.route.operation_key_header,
            downstream_header=self.contract.downstream_header,
            downstream_key=None,
            inject={},
        )
        return StoredRequest(self.request.method, url, headers, body)

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


def _unknown_advice(effect: Effect) -> str:
    if effect.safety is SafetyClass.IDEMPOTENT:
        return "Retrying with the same Operation-Key is safe: the target deduplicates."
    if effect.safety is SafetyClass.RECONCILABLE:
        return "A retry with the same Operation-Key looks the effect up first."
    if effect.safety is SafetyClass.TRANSACTIONAL:
        return (
            "A retry with the same Operation-Key looks the attempt up at the target "
            "first, and sends it again only once the target proved it never committed."
        )
    return "It will not be sent again; an operator resolves it through the admin API."


def _problem(error: EffectBrokerError, effect: Effect, **options: Any) -> web.Response:
    return problem_response(error, effect=effect, **options)


def _resolved_by_operator(effect: Effect, receipt: StoredResponse) -> web.Response:
    """A retry of an effect an operator settled: never the operator's note dressed up
    as the target's answer, and a message that says plainly whether it happened."""
    verdict = read_operator_receipt(receipt)
    if verdict.happened:
        made = f" ({verdict.external_id})" if verdict.external_id else ""
        message = (
            f"this effect happened{made}, as an operator confirmed: do not issue it "
            "again, under this key or any other"
        )
    elif verdict.proven_absent:
        message = (
            "an operator proved this effect did not happen; it will not be sent under "
            "this key. If it is still wanted, you may send it again under a new "
            "Operation-Key"
        )
    else:
        message = (
            "an operator abandoned this effect without finding out whether it "
            "happened: it may have happened. It will not be sent under this key; "
            "sending it again under a new Operation-Key risks doing it twice, so "
            "check with the target first"
        )
    return _problem(
        ResolvedByOperator(f"{message}. The operator's reason: {verdict.reason}"),
        effect,
        message=message,
        extra={
            "resolution": verdict.resolution.value,
            "reason": verdict.reason,
            "evidence": dict(verdict.evidence),
            "external_id": verdict.external_id,
        },
    )


def declared_repeat(request: web.Request) -> bool:
    """The client says this equal payload under a new key is meant (a second order)."""
    value = request.headers.get(REPEAT_HEADER, "")
    return value.strip().lower() == REPEAT_INTENTIONAL


def is_absolute_form(request: web.Request) -> bool:
    """Forward mode: the client (via HTTP_PROXY) sent ``POST http://host/path``."""
    return request.raw_path.startswith(("http://", "https://"))
