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
    IllegalTransition,
    NotReconcilable,
    NotResolvable,
    RequeueRefused,
)
from effect_broker.models import Effect, EffectStatus, ReceiptSource, SafetyClass
from effect_broker.state_machine import TERMINAL, check_transition, is_allowed

AWAITING_OPERATOR = frozenset({EffectStatus.OUTCOME_UNKNOWN, EffectStatus.MANUAL_REVIEW})


class Resolution(StrEnum):
    """What an operator found out. Two ways to settle as failed_final, never confused:
    ``did_not_happen`` is a claim backed by proof (the agent may send it again under a
    new key), ``abandoned`` is giving up without knowing (it may have happened, and the
    agent is told so). ``failed``, the old single word, is read as ``abandoned``: it
    never required proof, so it must not tell an agent that nothing happened."""

    SUCCEEDED = "succeeded"  # it happened: settle with an operator receipt
    NOT_COMMITTED = "not_committed"  # it did not happen: requeue where resending is safe
    DID_NOT_HAPPEN = "did_not_happen"  # proven absent: settle as failed_final
    ABANDONED = "abandoned"  # given up, outcome unknown: settle as failed_final


DEPRECATED_ALIASES: Mapping[str, Resolution] = {"failed": Resolution.ABANDONED}


def resolution_named(word: str) -> Resolution:
    """The resolution for an API or receipt word, deprecated aliases included."""
    return DEPRECATED_ALIASES.get(word) or Resolution(word)


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
                "effect-broker never resends it. If you can prove it did not happen, "
                "resolve it as did_not_happen with that proof (the agent may then send "
                "it again under a new Operation-Key); if you cannot tell, resolve it "
                "as abandoned"
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

    @property
    def proven_absent(self) -> bool:
        """The operator proved it did not happen; otherwise it may have."""
        return self.resolution is Resolution.DID_NOT_HAPPEN


def read_operator_receipt(response: StoredResponse) -> OperatorVerdict:
    """The resolution recorded in a receipt written by ``_operator_receipt``."""
    body = json.loads(response.body)
    return OperatorVerdict(
        resolution_named(str(body["resolution"])),
        str(body.get("reason", "")),
        body.get("evidence") or {},
        body.get("external_id"),
    )


# What each resolution does, in the words the CLI, the admin API's documentation and
# the console show an operator before they choose it.
CONSEQUENCES: Mapping[Resolution, str] = {
    Resolution.SUCCEEDED: (
        "It happened. The effect settles as succeeded; the agent's retry with the same "
        "Operation-Key will get this receipt (your external id and evidence) and is "
        "told not to issue it again. Nothing is sent to the target."
    ),
    Resolution.NOT_COMMITTED: (
        "It did not happen, and the target deduplicates: the effect is sent again "
        "with the same derived key on the agent's next retry or the reconciler's "
        "next pass."
    ),
    Resolution.DID_NOT_HAPPEN: (
        "It did not happen, and you have proof. The effect settles as failed_final; "
        "the agent will be told it did not happen: it may send it again under a new "
        "Operation-Key."
    ),
    Resolution.ABANDONED: (
        "Give up without knowing. The effect settles as failed_final; the agent will "
        "be told it may have happened, and that sending it again under a new "
        "Operation-Key risks doing it twice."
    ),
}


def permitted(effect: Effect) -> tuple[Resolution, ...]:
    """The resolutions this effect's status and contract allow, in the order offered.

    Decided by ``plan`` itself, so the choices an operator sees are exactly the ones a
    submission would accept.
    """
    allowed = []
    for choice in Resolution:
        try:
            plan(effect, ResolutionRequest(choice, "-", {"-": "-"}, None))
        except (AlreadySettled, NotResolvable, RequeueRefused, IllegalTransition):
            continue
        allowed.append(choice)
    return tuple(allowed)
