"""What an operator may do to an effect, decided without I/O; the engine writes it.

Both actions (look again now, resolve) go through the state machine like every other
write, so an operator cannot do what the contract forbids: nothing here resends an
``unsafe`` effect, and there is no "retry anyway". A resolution is recorded with its
reason and evidence in the effect's event chain, so the history shows who decided what,
and why, next to what the proxy saw.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from effect_broker.engine.messages import StoredResponse
from effect_broker.errors import (
    AlreadySettled,
    NotReconcilable,
    NotResolvable,
    RequeueRefused,
)
from effect_broker.models import Effect, EffectStatus, ReceiptSource, SafetyClass
from effect_broker.state_machine import TERMINAL, check_transition, is_allowed

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


def _refuse_settled(effect: Effect) -> None:
    if effect.status in TERMINAL:
        raise AlreadySettled(
            f"effect {effect.effect_id} is already {effect.status}; its receipt is "
            "immutable and nothing can change how it settled"
        )


def check_reconcilable(effect: Effect) -> None:
    """Refuse "look now" unless the reconciler can act on the effect by itself.

    It can for a retryable effect (provably not committed), or an unknown one whose
    contract lets it resend (idempotent) or look it up (reconcilable, transactional).
    Everything else is refused with what to do instead.
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


@dataclass(frozen=True, slots=True)
class ResolutionPlan:
    """The write an operator's resolution makes: a requeue, or a settling receipt."""

    status: EffectStatus
    kind: str
    details: Mapping[str, Any]
    receipt: StoredResponse | None = None
    source: ReceiptSource = ReceiptSource.OPERATOR


def plan(effect: Effect, request: ResolutionRequest) -> ResolutionPlan:
    """What resolving ``effect`` this way writes, or why it may not."""
    _refuse_settled(effect)
    if effect.status not in AWAITING_OPERATOR:
        raise NotResolvable(
            f"effect {effect.effect_id} is {effect.status}; only effects in "
            "outcome_unknown or manual_review await an operator's resolution"
        )
    details: dict[str, Any] = {
        "resolution": request.resolution.value,
        "reason": request.reason,
        "evidence": dict(request.evidence),
    }
    kind = f"operator_{request.resolution.value}"
    if request.resolution is Resolution.NOT_COMMITTED:
        if effect.safety is SafetyClass.TRANSACTIONAL:
            raise RequeueRefused(
                f"effect {effect.effect_id} is transactional: only the target's "
                "tombstone proves its lost attempt will never commit, and a requeue "
                "without one could let both attempts commit. Reconcile it instead "
                f"(POST /v1/effects/{effect.effect_id}/reconcile): the proxy looks the "
                "attempt up and tombstones it, then sends it again by itself"
            )
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
        return ResolutionPlan(EffectStatus.PREPARED, kind, details)
    succeeded = request.resolution is Resolution.SUCCEEDED
    status = EffectStatus.SUCCEEDED if succeeded else EffectStatus.FAILED_FINAL
    check_transition(effect.status, status, effect.safety)
    return ResolutionPlan(status, kind, details, _operator_receipt(request, details))


def _operator_receipt(
    request: ResolutionRequest, details: Mapping[str, Any]
) -> StoredResponse:
    """What a client retry with the same key gets back after the resolution."""
    succeeded = request.resolution is Resolution.SUCCEEDED
    body = {"resolved_by": "operator", **details}
    if request.external_id is not None:
        body["external_id"] = request.external_id
    return StoredResponse(
        200 if succeeded else 422,
        "OK" if succeeded else "Unprocessable Content",
        [("Content-Type", "application/json"), ("Effect-Resolved-By", "operator")],
        json.dumps(body).encode(),
    )


@dataclass(frozen=True, slots=True)
class OperatorVerdict:
    """What an operator's receipt says, for the answer to a client's retry."""

    resolution: Resolution
    reason: str
    evidence: Mapping[str, Any]
    external_id: str | None

    @property
    def happened(self) -> bool:
        return self.resolution is Resolution.SUCCEEDED


def read_operator_receipt(response: StoredResponse) -> OperatorVerdict:
    """The resolution recorded in a receipt written by ``_operator_receipt``."""
    body = json.loads(response.body)
    return OperatorVerdict(
        Resolution(body["resolution"]),
        str(body.get("reason", "")),
        body.get("evidence") or {},
        body.get("external_id"),
    )
