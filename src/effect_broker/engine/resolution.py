"""What an operator may do to an effect: ask the reconciler to look now, or resolve it.

Both go through the state machine like every other write, so an operator cannot do what
the contract forbids: nothing here resends an ``unsafe`` effect, and there is no "retry
anyway". A resolution is recorded with its reason and evidence in the effect's event
chain, so the history shows who decided what, and why, next to what the proxy saw.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from effect_broker.engine.messages import StoredResponse, encode_response
from effect_broker.errors import (
    AlreadySettled,
    InvalidResolution,
    NotReconcilable,
    NotResolvable,
    RequeueRefused,
)
from effect_broker.models import Effect, EffectStatus, ReceiptSource
from effect_broker.proxy.state import ProxyState
from effect_broker.state_machine import TERMINAL, check_transition, is_allowed

MAX_REASON = 1000
MAX_EXTERNAL_ID = 255
MAX_EVIDENCE_BYTES = 16 * 1024
RESOLUTION_FIELDS = frozenset({"resolution", "reason", "evidence", "external_id"})
AWAITING_OPERATOR = frozenset({EffectStatus.OUTCOME_UNKNOWN, EffectStatus.MANUAL_REVIEW})


class Resolution(StrEnum):
    SUCCEEDED = "succeeded"  # it happened: settle with an operator receipt
    NOT_COMMITTED = "not_committed"  # it did not happen: requeue where resending is safe
    FAILED = "failed"  # give up for good: settle as failed_final


@dataclass(frozen=True, slots=True)
class ResolutionRequest:
    resolution: Resolution
    reason: str
    evidence: Mapping[str, Any]
    external_id: str | None


def parse_resolution(body: object) -> ResolutionRequest:
    """Validate ``POST .../resolve``; unknown fields are refused so typos are not lost."""
    if not isinstance(body, dict):
        raise InvalidResolution("body", "must be a JSON object")
    unknown = sorted(set(body) - RESOLUTION_FIELDS)
    if unknown:
        raise InvalidResolution(
            unknown[0], f"is not known; use {', '.join(sorted(RESOLUTION_FIELDS))}"
        )
    try:
        resolution = Resolution(str(body.get("resolution")))
    except ValueError:
        raise InvalidResolution(
            "resolution", f"must be one of {', '.join(r.value for r in Resolution)}"
        ) from None
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidResolution(
            "reason", "is required: say why, for whoever reads this history next"
        )
    if len(reason) > MAX_REASON:
        raise InvalidResolution("reason", f"is longer than {MAX_REASON} characters")
    evidence = body.get("evidence", {})
    if not isinstance(evidence, dict):
        raise InvalidResolution("evidence", "must be a JSON object")
    if resolution is Resolution.SUCCEEDED and not evidence:
        raise InvalidResolution(
            "evidence",
            "is required to resolve as succeeded: say where you saw the effect, e.g. "
            '{"external_id": "ch_1", "checked_in": "stripe dashboard"}',
        )
    if len(json.dumps(evidence).encode()) > MAX_EVIDENCE_BYTES:
        raise InvalidResolution("evidence", f"is larger than {MAX_EVIDENCE_BYTES} bytes")
    external_id = body.get("external_id")
    if external_id is not None and (
        not isinstance(external_id, str)
        or not external_id.strip()
        or len(external_id) > MAX_EXTERNAL_ID
    ):
        raise InvalidResolution(
            "external_id", f"must be a non-blank string of at most {MAX_EXTERNAL_ID}"
        )
    return ResolutionRequest(resolution, reason.strip(), evidence, external_id)


def _refuse_settled(effect: Effect) -> None:
    if effect.status in TERMINAL:
        raise AlreadySettled(
            f"effect {effect.effect_id} is already {effect.status}; its receipt is "
            "immutable and nothing can change how it settled"
        )


async def reconcile_now(state: ProxyState, effect: Effect, *, actor: str) -> Effect:
    """Make the reconciler look at an effect at its next pass instead of after backoff.

    Only where the reconciler can act by itself: a retryable effect (provably not
    committed), or an unknown one whose contract lets it resend (idempotent) or look it
    up (reconcilable). Everything else is refused with what to do instead.
    """
    _refuse_settled(effect)
    status = effect.status
    if status is EffectStatus.OUTCOME_UNKNOWN:
        acts = is_allowed(status, EffectStatus.DISPATCHING, effect.safety) or is_allowed(
            status, EffectStatus.RECONCILING, effect.safety
        )
        if not acts:
            raise NotReconcilable(
                f"effect {effect.effect_id} is {effect.safety}: the target can neither "
                "deduplicate a resend nor be asked what happened, so nothing automatic "
                "can settle it. Check the target's own records, then resolve it with "
                f"POST /v1/effects/{effect.effect_id}/resolve"
            )
    elif status is EffectStatus.MANUAL_REVIEW:
        raise NotReconcilable(
            f"effect {effect.effect_id} is in manual_review: the reconciler already "
            "gave up on it. Check the target's own records, then resolve it with "
            f"POST /v1/effects/{effect.effect_id}/resolve"
        )
    elif status is not EffectStatus.RETRYABLE:
        raise NotReconcilable(
            f"effect {effect.effect_id} is {status}: it is being handled right now, "
            "there is nothing to reconcile"
        )
    return await state.store.reschedule(effect, delay=timedelta(0), actor=actor)


def _require_awaiting_operator(effect: Effect) -> None:
    _refuse_settled(effect)
    if effect.status not in AWAITING_OPERATOR:
        raise NotResolvable(
            f"effect {effect.effect_id} is {effect.status}; only effects in "
            "outcome_unknown or manual_review await an operator's resolution"
        )


async def resolve(
    state: ProxyState, effect: Effect, request: ResolutionRequest, *, actor: str
) -> Effect:
    """Apply an operator's resolution, recording reason and evidence in the history."""
    _require_awaiting_operator(effect)
    details: dict[str, Any] = {
        "resolution": request.resolution.value,
        "reason": request.reason,
        "evidence": dict(request.evidence),
    }
    if request.resolution is Resolution.NOT_COMMITTED:
        if not is_allowed(effect.status, EffectStatus.PREPARED, effect.safety):
            raise RequeueRefused(
                f"effect {effect.effect_id} is {effect.safety}: its target cannot "
                "deduplicate or be asked, so sending it again could do it twice, and "
                "effect-broker never resends it. If you are sure it did not happen, "
                "resolve it as failed and send the intent again under a new "
                "Operation-Key"
            )
        if request.external_id is not None:
            details["external_id"] = request.external_id
        return await state.store.transition(
            effect,
            EffectStatus.PREPARED,
            kind="operator_not_committed",
            actor=actor,
            details=details,
            due_in=timedelta(0),
        )
    settled = (
        EffectStatus.SUCCEEDED
        if request.resolution is Resolution.SUCCEEDED
        else EffectStatus.FAILED_FINAL
    )
    check_transition(effect.status, settled, effect.safety)
    return await _settle(state, effect, settled, request, details, actor=actor)


async def _settle(
    state: ProxyState,
    effect: Effect,
    status: EffectStatus,
    request: ResolutionRequest,
    details: Mapping[str, Any],
    *,
    actor: str,
) -> Effect:
    """Store the operator's receipt: what a client retry with the same key gets back.

    The store is written directly rather than through ``Dispatcher.record_receipt``
    because only the store call carries the event's actor and details, which is where
    the reason and evidence must live.
    """
    succeeded = status is EffectStatus.SUCCEEDED
    body = {"resolved_by": "operator", **details}
    if request.external_id is not None:
        body["external_id"] = request.external_id
    response = StoredResponse(
        200 if succeeded else 422,
        "OK" if succeeded else "Unprocessable Content",
        [("Content-Type", "application/json"), ("Effect-Resolved-By", "operator")],
        json.dumps(body).encode(),
    )
    sealed = state.keyring.encrypt(
        tenant_id=effect.tenant_id,
        effect_id=str(effect.effect_id),
        kind="response",
        plaintext=encode_response(response),
    )
    done, _ = await state.store.record_receipt(
        effect,
        status=status,
        status_code=response.status,
        response_ciphertext=sealed,
        source=ReceiptSource.OPERATOR,
        actor=actor,
        external_id=request.external_id,
        kind=f"operator_{request.resolution.value}",
        details=details,
    )
    state.metrics.effects.labels(done.route, done.status.value).inc()
    return done
