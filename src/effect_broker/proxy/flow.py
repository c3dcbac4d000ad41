"""The request flow of DESIGN.md, steps 1-8, for one request on the proxy port.

Match, require the operation key, hash the exact payload, reserve, decide, and only
then dispatch. The ledger row is committed before the first byte goes upstream; every
answer for a matched route carries ``Effect-Id`` and ``Effect-Status``.
"""

from __future__ import annotations

import time
import unicodedata
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from effect_broker import failpoints
from effect_broker.canonical import (
    canonical_body,
    canonical_query,
    downstream_key,
    request_hash,
)
from effect_broker.config.contracts import Contract, Route
from effect_broker.engine.dispatch import Dispatched, Probed, outgoing_request
from effect_broker.engine.messages import (
    StoredRequest,
    StoredResponse,
    decode_response,
    encode_request,
)
from effect_broker.engine.policy import Verdict, decide
from effect_broker.engine.targets import upstream_url
from effect_broker.errors import (
    BodyTooLarge,
    InFlight,
    InvalidOperationKey,
    MissingOperationKey,
    OutcomeUnknown,
    PayloadMismatch,
    StaleVersion,
    UpstreamUnreachable,
)
from effect_broker.headers import upstream_request_headers
from effect_broker.models import Effect, EffectStatus, Reservation, SafetyClass
from effect_broker.models import ReservationOutcome as Outcome
from effect_broker.problems import effect_headers, problem_response
from effect_broker.proxy.edge_input import printable
from effect_broker.proxy.receipt_cache import SettledReplay
from effect_broker.proxy.state import ProxyState
from effect_broker.store import AttemptTerms
from effect_broker.tracing import incoming_context, key_digest, tracer

MAX_OPERATION_KEY = 255
PAYLOAD_MISMATCH = (
    "this Operation-Key was first used with a different payload; use a new key for a "
    "new intent, or resend the original payload"
)
REPLAYED_HEADER = "Idempotent-Replayed"


def operation_key(request: web.Request, header: str) -> str:
    """The caller's name for this business intent, validated (DESIGN.md step 2)."""
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
    headers: list[tuple[str, str]] = [
        (name, value)
        for name, value in response.headers
        if name.lower() not in ("effect-id", "effect-status", "content-length")
    ]
    out = web.Response(status=response.status, reason=response.reason or None)
    for name, value in headers:
        out.headers.add(name, value)
    out.headers.update(effect_headers(effect))
    if replayed:
        out.headers[REPLAYED_HEADER] = "true"
    out.body = response.body
    return out


class EffectRequest:
    """One request on a matched route, carried through the ledger."""

    def __init__(
        self, state: ProxyState, route: Route, request: web.Request, tenant: str
    ) -> None:
        self.state = state
        self.route = route
        self.contract: Contract = route.contract
        self.request = request
        self.tenant = tenant

    async def handle(self) -> web.StreamResponse:
        started = time.perf_counter()
        self.upstream_seconds = 0.0
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
            try:
                response = await self._handle()
                span.set_attribute("http.response.status_code", response.status)
                for header, attribute in (
                    ("Effect-Id", "effect_broker.effect_id"),
                    ("Effect-Status", "effect_broker.status"),
                ):
                    if header in response.headers:
                        span.set_attribute(attribute, response.headers[header])
                return response
            finally:
                self.state.metrics.overhead.labels(self.route.name).observe(
                    time.perf_counter() - started - self.upstream_seconds
                )

    async def _handle(self) -> web.StreamResponse:
        key = operation_key(self.request, self.route.operation_key_header)
        trace.get_current_span().set_attribute(
            "effect_broker.operation_key_digest", key_digest(key)
        )
        body = await read_body(self.request, self.state.max_request_bytes)
        fingerprint = self._fingerprint(body)
        cached = self.state.receipts.get(self.tenant, key)
        if cached is not None:
            return self._answer_from_cache(cached, fingerprint)
        stored = self._stored_request(body)
        effect_id = uuid.uuid4()
        sealed = self.state.keyring.encrypt(
            tenant_id=self.tenant,
            effect_id=str(effect_id),
            kind="request",
            plaintext=encode_request(stored),
        )
        failpoints.hit(failpoints.BEFORE_RESERVE_COMMIT)
        reservation = await self.state.store.reserve(
            tenant_id=self.tenant,
            operation_key=key,
            request_hash=fingerprint,
            route=self.route.name,
            contract_name=self.contract.name,
            contract_version=self.contract.version,
            safety=self.contract.safety,
            downstream_key=downstream_key(
                self.state.keyring.tenant_hmac_key(self.tenant), self.tenant, key
            ),
            request_ciphertext=sealed,
            request_preview=self._preview(body),
            owner=self.state.owner,
            lease=self.state.dispatcher.lease_for(self.contract),
            effect_id=effect_id,
            start=self._start_terms(),
        )
        failpoints.hit(failpoints.AFTER_RESERVE)
        return await self._act(reservation, stored)

    async def _act(
        self, reservation: Reservation, stored: StoredRequest
    ) -> web.StreamResponse:
        while True:
            effect = reservation.effect
            decision = decide(reservation, self.contract, datetime.now(UTC))
            verdict = decision.verdict
            if verdict is Verdict.CONFLICT:
                self.state.metrics.conflicts.labels(self.route.name).inc()
                raise EffectProblem(PayloadMismatch(PAYLOAD_MISMATCH), effect)
            if verdict is Verdict.REPLAY:
                self.state.metrics.replays.labels(self.route.name).inc()
                return await self._replay(reservation)
            if verdict in (Verdict.IN_FLIGHT, Verdict.WAIT_SETTLEMENT):
                error = (
                    InFlight(f"this operation is {decision.reason}")
                    if verdict is Verdict.IN_FLIGHT
                    else OutcomeUnknown(decision.reason)
                )
                raise EffectProblem(error, effect, retry_after=decision.retry_after)
            if verdict is Verdict.UNKNOWN:
                raise EffectProblem(
                    OutcomeUnknown(
                        f"the outcome of this effect is unknown ({decision.reason}); "
                        "it was not sent again. An operator resolves it through the "
                        "admin API"
                    ),
                    effect,
                )
            if verdict is Verdict.EXPIRE_LEASE:
                effect = await self._fenced(
                    self.state.store.transition(
                        effect,
                        EffectStatus.OUTCOME_UNKNOWN,
                        kind="lease_expired",
                        actor=self.state.owner,
                        error="the worker holding this effect stopped mid-flight",
                        # Keep it claimed: if this process dies next, the reconciler
                        # still finds it once the lease runs out.
                        lease_owner=self.state.owner,
                        lease=self.state.dispatcher.lease_for(self.contract),
                        settle_within=self.contract.settlement_bound,
                    ),
                    effect,
                )
            elif verdict is Verdict.PROBE:
                probed = await self._probe(effect)
                if probed.status is EffectStatus.SUCCEEDED:
                    return await self._replay(Reservation(Outcome.REPLAY, probed, None))
                if probed.status is not EffectStatus.PREPARED:
                    raise EffectProblem(
                        OutcomeUnknown(
                            "the target's lookup could not say whether this effect "
                            "happened; it was not sent again"
                        ),
                        probed,
                        retry_after=timedelta(seconds=5),
                    )
                effect = probed
            else:
                started = (
                    reservation.outcome is Outcome.CREATED
                    and effect.status is EffectStatus.DISPATCHING
                )
                return await self._dispatch(effect, stored, started=started)
            reservation = Reservation(Outcome.REPLAY, effect, None)

    def _start_terms(self) -> AttemptTerms | None:
        """Reserve and start a new effect in one commit where a resend is safe anyway.

        For an unsafe target the two commits stay apart: if this process dies between
        them, PREPARED proves nothing was sent, so the retry may still send it.
        """
        if self.contract.safety not in (SafetyClass.IDEMPOTENT, SafetyClass.RECONCILABLE):
            return None
        return AttemptTerms(self.contract.key_retention, self.contract.settlement_bound)

    async def _dispatch(
        self, effect: Effect, stored: StoredRequest, *, started: bool
    ) -> web.StreamResponse:
        outgoing = outgoing_request(
            self.route, stored, effect.downstream_key, self.state.injected
        )
        dispatcher = self.state.dispatcher
        send = dispatcher.send_started if started else dispatcher.dispatch
        dispatched = await self._fenced(send(effect, self.contract, outgoing), effect)
        self.upstream_seconds += dispatched.attempt.elapsed
        return await self._answer(dispatched)

    async def _answer(self, dispatched: Dispatched) -> web.StreamResponse:
        effect, attempt = dispatched.effect, dispatched.attempt
        status = effect.status
        if status is EffectStatus.RETRYABLE and attempt.response is None:
            raise EffectProblem(
                UpstreamUnreachable(
                    f"could not reach the target ({attempt.detail}); nothing was sent, "
                    "so retrying with the same Operation-Key is safe"
                ),
                effect,
                retry_after=timedelta(seconds=1),
            )
        if status is EffectStatus.OUTCOME_UNKNOWN:
            timed_out = "within" in attempt.detail
            raise EffectProblem(
                OutcomeUnknown(
                    f"the target may have applied this effect, but its answer was lost "
                    f"({attempt.detail}). {self._unknown_advice(effect)}"
                ),
                effect,
                status=504 if timed_out else 502,
            )
        assert attempt.response is not None
        if attempt.overflow is None:
            return stored_response_to_web(attempt.response, effect, replayed=False)
        return await self._stream_overflow(dispatched)

    async def _stream_overflow(self, dispatched: Dispatched) -> web.StreamResponse:
        """A body longer than a receipt holds: give this client all of it, live."""
        attempt = dispatched.attempt
        assert attempt.response is not None and attempt.overflow is not None
        out = web.StreamResponse(
            status=attempt.response.status, reason=attempt.response.reason or None
        )
        for name, value in attempt.response.headers:
            out.headers.add(name, value)
        out.headers.update(effect_headers(dispatched.effect))
        try:
            await out.prepare(self.request)
            await out.write(attempt.response.body)
            async for chunk in attempt.overflow.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
        finally:
            attempt.release()
        return out

    def _unknown_advice(self, effect: Effect) -> str:
        if effect.safety is SafetyClass.IDEMPOTENT:
            return (
                "Retrying with the same Operation-Key is safe: the target deduplicates."
            )
        if effect.safety is SafetyClass.RECONCILABLE:
            return "A retry with the same Operation-Key looks the effect up first."
        return "It will not be sent again; an operator resolves it through the admin API."

    async def _replay(self, reservation: Reservation) -> web.Response:
        effect = reservation.effect
        receipt = reservation.receipt or await self.state.store.receipt(
            self.tenant, effect.effect_id
        )
        if receipt is None:  # settled rows always have one; be loud if not
            raise RuntimeError(f"settled effect {effect.effect_id} has no receipt")
        plaintext = self.state.keyring.decrypt(
            tenant_id=self.tenant,
            effect_id=str(effect.effect_id),
            kind="response",
            blob=receipt.response_ciphertext,
        )
        response = decode_response(plaintext)
        self.state.receipts.put(SettledReplay(effect, response))
        return stored_response_to_web(response, effect, replayed=True)

    def _answer_from_cache(self, cached: SettledReplay, fingerprint: str) -> web.Response:
        """The same decision as a ledger round trip would make for a settled effect."""
        if cached.effect.request_hash != fingerprint:
            self.state.metrics.conflicts.labels(self.route.name).inc()
            raise EffectProblem(PayloadMismatch(PAYLOAD_MISMATCH), cached.effect)
        self.state.metrics.replays.labels(self.route.name).inc()
        return stored_response_to_web(cached.response, cached.effect, replayed=True)

    async def _probe(self, effect: Effect) -> Effect:
        """Reconcilable and unknown: look it up before anything is sent again."""
        probed: Probed = await self._fenced(
            self.state.dispatcher.probe(
                effect,
                self.route,
                stored_url=self._stored_request(b"").url,
                injected=self.state.injected,
            ),
            effect,
        )
        self.upstream_seconds += probed.elapsed
        return probed.effect

    async def _fenced(self, write: Any, effect: Effect) -> Any:
        try:
            return await write
        except StaleVersion as exc:
            raise EffectProblem(
                InFlight(
                    "another request or worker is handling this operation right now"
                ),
                effect,
                retry_after=timedelta(seconds=1),
            ) from exc

    def _fingerprint(self, body: bytes) -> str:
        rel = self.request.rel_url
        return request_hash(
            method=self.request.method,
            route=self.route.name,
            path=rel.path,
            query=canonical_query(rel.raw_query_string),
            body=canonical_body(self.request.headers.get("Content-Type"), body),
            contract_name=self.contract.name,
            contract_version=self.contract.version,
        )

    def _stored_request(self, body: bytes) -> StoredRequest:
        """The request as the target must see it, before the derived key and secrets."""
        rel = self.request.rel_url
        origin = (
            str(self.request.url.origin()) if is_absolute_form(self.request) else None
        )
        url = upstream_url(
            self.route,
            origin=origin,
            raw_path=rel.raw_path,
            raw_query=rel.raw_query_string,
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
            "path": printable(self.request.rel_url.path),
            "content_type": None if content_type is None else printable(content_type),
            "body_bytes": len(body),
        }


def is_absolute_form(request: web.Request) -> bool:
    """Forward mode: the client (via HTTP_PROXY) sent ``POST http://host/path``."""
    return request.raw_path.startswith(("http://", "https://"))


class EffectProblem(Exception):
    """A problem answer tied to an effect; the app turns it into problem+json."""

    def __init__(
        self,
        error: Any,
        effect: Effect,
        *,
        retry_after: timedelta | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.effect = effect
        self.retry_after = retry_after
        self.status = status

    def response(self) -> web.Response:
        return problem_response(
            self.error,
            status=self.status,
            effect=self.effect,
            retry_after=self.retry_after,
        )
