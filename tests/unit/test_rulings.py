"""engine.rulings.rule, evidence by evidence: the one turn from what happened to the
next state, for attempts, probes, kit lookups, the policy's own moves and operators."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from random import Random

import pytest

from effect_broker.config.contracts import Contract
from effect_broker.engine import Answered, NotSent, Unknowable, Unknown, refused_for_good
from effect_broker.engine.evidence import (
    Asking,
    Attempted,
    Evidence,
    LeaseLapsed,
    LookedUp,
    PastAutomation,
    Probed,
    Resolved,
    RetriesSpent,
)
from effect_broker.engine.lookup import Finding, KitAnswer, current_attempt_key
from effect_broker.engine.messages import StoredRequest, StoredResponse
from effect_broker.engine.next_state import Ruling, Then, outcome_of
from effect_broker.engine.policy import INSIDE_THE_PROXY, failed_inside_the_proxy
from effect_broker.engine.probe import ProbeResult, ProbeVerdict
from effect_broker.engine.resolution import Resolution, ResolutionRequest
from effect_broker.engine.rulings import (
    EARLIER_UNKNOWN,
    FENCED_RETRY,
    INCONCLUSIVE_RETRY,
    rule,
)
from effect_broker.engine.upstream import AttemptResult, Delivery
from effect_broker.errors import RequeueRefused
from effect_broker.models import Effect, ReceiptSource
from effect_broker.models import EffectStatus as S
from effect_broker.models import SafetyClass as C
from effect_broker.state_machine import TERMINAL, is_allowed
from tests.unit.engine_support import CONTRACTS, effect_at

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=15)


def effect(safety: C, status: S, **changes: object) -> Effect:
    return effect_at(NOW, NOW + timedelta(hours=24), safety, status, **changes)


def answer(status: int, body: bytes = b"{}") -> StoredResponse:
    return StoredResponse(status, "", [("Content-Type", "application/json")], body)


def answered(status: int, *, body_omitted: bool = False) -> AttemptResult:
    return AttemptResult(
        Delivery.ANSWERED, answer(status), elapsed=0.25, body_omitted=body_omitted
    )


NOT_SENT = AttemptResult(Delivery.NOT_SENT, detail="could not connect: refused")


def ruled(
    safety: C, evidence: Evidence, status: S = S.DISPATCHING, **changes: object
) -> Ruling:
    return rule(
        effect(safety, status, **changes), CONTRACTS[safety], evidence, rng=Random(7)
    )


# -- the shared status rule -------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "final"),
    [(400, True), (401, True), (404, True), (409, True), (422, True), (499, True),
     (408, False), (429, False), (200, False), (302, False), (500, False),
     (503, False)],
)  # fmt: skip
def test_only_client_errors_but_408_and_429_refuse_for_good(
    code: int, final: bool
) -> None:
    assert refused_for_good(code) is final


# -- an attempt -------------------------------------------------------------------------


@pytest.mark.parametrize("safety", list(CONTRACTS))
def test_an_attempt_that_never_connected_is_retryable_and_counts(safety: C) -> None:
    ruling = ruled(safety, Attempted(NOT_SENT))
    assert (ruling.status, ruling.kind, ruling.then) == (
        S.RETRYABLE,
        "not_sent",
        Then.NOT_SENT,
    )
    assert ruling.details == {
        "reason": NOT_SENT.detail,
        "cause": "target_unreachable",
        "counts_against_retry_limit": True,
    }
    assert ruling.retry_after == FENCED_RETRY
    assert ruling.due_in is not None and ruling.due_in <= timedelta(seconds=1)


@pytest.mark.parametrize(
    ("flag", "cause"),
    [("tls", "upstream_tls"), ("saturated", "pool_exhausted"),
     ("withheld", "send_withheld")],
)  # fmt: skip
def test_a_failure_inside_the_proxy_is_written_as_policy_reads_it(
    flag: str, cause: str
) -> None:
    """The prefix the ruling writes is the one ``policy`` reads back to resend the
    effect without spending its retry limit."""
    attempt = replace(AttemptResult(Delivery.NOT_SENT, detail="no"), **{flag: True})  # type: ignore[arg-type]
    ruling = ruled(C.IDEMPOTENT, Attempted(attempt))
    assert ruling.details is not None
    assert (ruling.details["cause"], ruling.details["counts_against_retry_limit"]) == (
        cause,
        False,
    )
    assert ruling.error == INSIDE_THE_PROXY + "no"
    written = effect(C.IDEMPOTENT, S.RETRYABLE, last_error=ruling.error)
    assert failed_inside_the_proxy(written)
    outcome = outcome_of(ruling, written, attempt)
    assert isinstance(outcome, NotSent) and getattr(outcome, flag) is True


def test_nothing_sent_after_an_unknown_outcome_stays_unknown() -> None:
    ruling = ruled(C.IDEMPOTENT, Attempted(NOT_SENT, after_unknown=True))
    assert (ruling.status, ruling.then) == (S.OUTCOME_UNKNOWN, Then.UNKNOWN)
    assert ruling.error == f"{NOT_SENT.detail}; {EARLIER_UNKNOWN}"
    assert ruling.why is Unknowable.LOST


@pytest.mark.parametrize(
    ("safety", "due"),
    [(C.UNSAFE, None), (C.TRANSACTIONAL, timedelta(0)),
     (C.RECONCILABLE, timedelta(seconds=2))],
)  # fmt: skip
def test_a_lost_answer_is_unknown_and_looked_at_when_the_class_allows(
    safety: C, due: timedelta | None
) -> None:
    lost = AttemptResult(Delivery.UNKNOWN, detail="no answer in 10s", timed_out=True)
    ruling = ruled(safety, Attempted(lost))
    assert (ruling.status, ruling.kind) == (S.OUTCOME_UNKNOWN, "outcome_unknown")
    assert ruling.due_in == due
    assert ruling.settle_within == CONTRACTS[safety].settlement_bound
    assert ruling.details == {"reason": "no answer in 10s"}
    outcome = outcome_of(ruling, effect(safety, S.OUTCOME_UNKNOWN), lost)
    assert isinstance(outcome, Unknown)
    assert (outcome.why, outcome.detail) == (Unknowable.TIMED_OUT, "no answer in 10s")


@pytest.mark.parametrize("safety", list(CONTRACTS))
def test_a_2xx_settles_with_the_answer_as_receipt(safety: C) -> None:
    attempt = answered(201)
    ruling = ruled(safety, Attempted(attempt))
    assert (ruling.status, ruling.kind, ruling.then) == (
        S.SUCCEEDED,
        "settled",
        Then.ANSWERED,
    )
    assert ruling.receipt is not None
    assert ruling.receipt.response == attempt.response
    assert (ruling.receipt.source, ruling.receipt.omit_body) == (
        ReceiptSource.RESPONSE,
        False,
    )
    outcome = outcome_of(ruling, effect(safety, S.SUCCEEDED), attempt)
    assert isinstance(outcome, Answered) and outcome.upstream_seconds == 0.25


def test_a_body_longer_than_a_receipt_is_left_out_of_it() -> None:
    ruling = ruled(C.IDEMPOTENT, Attempted(answered(200, body_omitted=True)))
    assert ruling.receipt is not None and ruling.receipt.omit_body


def test_429_is_retryable_until_the_limit_then_final_as_answered() -> None:
    under = ruled(C.RECONCILABLE, Attempted(answered(429)), attempts=2)
    assert (under.status, under.kind, under.receipt) == (S.RETRYABLE, "refused", None)
    assert under.error == "target answered 429"
    spent = ruled(C.RECONCILABLE, Attempted(answered(429)), attempts=3)
    assert (spent.status, spent.then) == (S.FAILED_FINAL, Then.ANSWERED)
    assert spent.receipt is not None


def test_a_refusal_after_an_unknown_outcome_proves_nothing() -> None:
    ruling = ruled(C.IDEMPOTENT, Attempted(answered(429), after_unknown=True))
    assert ruling.status is S.OUTCOME_UNKNOWN
    assert ruling.error == f"target answered 429; {EARLIER_UNKNOWN}"


@pytest.mark.parametrize(
    ("safety", "code", "status"),
    [(C.IDEMPOTENT, 503, S.RETRYABLE), (C.UNSAFE, 503, S.OUTCOME_UNKNOWN),
     (C.UNSAFE, 404, S.FAILED_FINAL), (C.UNSAFE, 408, S.OUTCOME_UNKNOWN),
     (C.TRANSACTIONAL, 429, S.OUTCOME_UNKNOWN), (C.TRANSACTIONAL, 500, S.OUTCOME_UNKNOWN),
     (C.RECONCILABLE, 303, S.SUCCEEDED), (C.RECONCILABLE, 302, S.FAILED_FINAL)],
)  # fmt: skip
def test_what_a_status_proves_depends_on_the_class(
    safety: C, code: int, status: S
) -> None:
    assert ruled(safety, Attempted(answered(code))).status is status


def test_a_route_protocol_reads_the_answer_instead_of_http() -> None:
    class RefusesEverything:
        def judge(
            self, response: StoredResponse, effect: Effect, contract: Contract
        ) -> S:
            return S.FAILED_FINAL

        def with_key(
            self, request: StoredRequest, contract: Contract, downstream_key: str
        ) -> StoredRequest:
            return request

    ruling = ruled(C.IDEMPOTENT, Attempted(answered(200), protocol=RefusesEverything()))
    assert ruling.status is S.FAILED_FINAL


# -- asking the target ------------------------------------------------------------------


def test_asking_holds_a_lookup_one_timeout_longer_than_a_probe() -> None:
    probe = ruled(C.RECONCILABLE, Asking(LEASE), S.OUTCOME_UNKNOWN)
    assert (probe.status, probe.kind, probe.lease) == (S.RECONCILING, "probe", LEASE)
    lookup = ruled(C.TRANSACTIONAL, Asking(LEASE), S.OUTCOME_UNKNOWN, attempts=2)
    assert (lookup.status, lookup.kind) == (S.RECONCILING, "lookup")
    assert lookup.lease == LEASE + CONTRACTS[C.TRANSACTIONAL].timeout
    assert lookup.details == {
        "attempt": 2,
        "attempt_key": current_attempt_key(
            effect(C.TRANSACTIONAL, S.RECONCILING, attempts=2)
        ),
    }


def test_a_probe_found_settles_absent_requeues_else_unknown() -> None:
    found = ruled(
        C.RECONCILABLE,
        Probed(ProbeResult(ProbeVerdict.FOUND, answer(200), external_id="t-1")),
        S.RECONCILING,
    )
    assert (found.status, found.then) == (S.SUCCEEDED, Then.DECIDE)
    assert found.receipt is not None
    assert (found.receipt.source, found.receipt.external_id) == (
        ReceiptSource.PROBE,
        "t-1",
    )
    absent = ruled(
        C.RECONCILABLE, Probed(ProbeResult(ProbeVerdict.ABSENT)), S.RECONCILING
    )
    assert (absent.status, absent.kind, absent.then) == (
        S.PREPARED,
        "probe_absent",
        Then.DECIDE,
    )
    unknown = ruled(
        C.RECONCILABLE,
        Probed(ProbeResult(ProbeVerdict.UNKNOWN, detail="probe answered 500")),
        S.RECONCILING,
    )
    assert (unknown.status, unknown.error) == (S.OUTCOME_UNKNOWN, "probe answered 500")
    outcome = outcome_of(unknown, effect(C.RECONCILABLE, S.OUTCOME_UNKNOWN))
    assert isinstance(outcome, Unknown)
    assert (outcome.why, outcome.retry_after) == (
        Unknowable.LOOKUP_INCONCLUSIVE,
        INCONCLUSIVE_RETRY,
    )


def test_a_found_probe_without_its_answer_proves_nothing() -> None:
    ruling = ruled(C.RECONCILABLE, Probed(ProbeResult(ProbeVerdict.FOUND)), S.RECONCILING)
    assert ruling.status is S.OUTCOME_UNKNOWN


@pytest.mark.parametrize(("code", "status"), [(201, S.SUCCEEDED), (422, S.FAILED_FINAL)])
def test_a_committed_attempt_settles_with_what_it_committed(code: int, status: S) -> None:
    kit = KitAnswer(Finding.COMMITTED, at="2026-12-01T12:00:00Z", response=answer(code))
    ruling = ruled(C.TRANSACTIONAL, LookedUp(kit, oversized=True), S.RECONCILING)
    assert ruling.status is status
    assert ruling.receipt is not None
    assert (ruling.receipt.source, ruling.receipt.omit_body) == (
        ReceiptSource.LOOKUP,
        True,
    )
    assert ruling.details is not None
    assert ruling.details["committed_at"] == "2026-12-01T12:00:00Z"


@pytest.mark.parametrize("written", [True, False])
def test_a_tombstone_proves_absence_and_frees_the_next_attempt(written: bool) -> None:
    kit = KitAnswer(Finding.TOMBSTONED, at="then", written=written)
    ruling = ruled(C.TRANSACTIONAL, LookedUp(kit), S.RECONCILING)
    assert (ruling.status, ruling.kind, ruling.due_in, ruling.then) == (
        S.RETRYABLE,
        "absence_proven",
        timedelta(0),
        Then.DECIDE,
    )
    assert ruling.details is not None
    assert ruling.details["tombstone"] == ("written" if written else "found")


def test_a_kit_that_proves_nothing_leaves_the_attempt_unknown() -> None:
    kit = KitAnswer(Finding.UNKNOWN, detail="lookup answered 503 without the kit")
    ruling = ruled(C.TRANSACTIONAL, LookedUp(kit), S.RECONCILING, attempts=2)
    assert (ruling.status, ruling.kind) == (S.OUTCOME_UNKNOWN, "lookup_unknown")
    assert ruling.detail == (
        "the target's kit could not say whether attempt 2 committed "
        "(lookup answered 503 without the kit)"
    )


# -- the policy's own moves -------------------------------------------------------------


def test_a_lapsed_lease_leaves_the_outcome_unknown_and_the_effect_held() -> None:
    ruling = ruled(C.RECONCILABLE, LeaseLapsed(LEASE))
    assert (ruling.status, ruling.kind, ruling.lease, ruling.then) == (
        S.OUTCOME_UNKNOWN,
        "lease_expired",
        LEASE,
        Then.DECIDE,
    )
    assert ruling.settle_within == timedelta(seconds=2)
    assert ruling.error == "the worker holding it stopped while it was dispatching"


@pytest.mark.parametrize("safety", [C.IDEMPOTENT, C.TRANSACTIONAL])
def test_a_spent_retry_limit_settles_with_the_proxys_own_receipt(safety: C) -> None:
    ruling = ruled(safety, RetriesSpent(), S.RETRYABLE)
    assert ruling.status is S.FAILED_FINAL and ruling.receipt is not None
    assert (ruling.receipt.response.status, ruling.receipt.source) == (
        502,
        ReceiptSource.PROXY,
    )
    said = json.loads(ruling.receipt.response.body)["error"]
    assert ("tombstone" in said) is (safety is C.TRANSACTIONAL)


def test_past_automation_goes_to_a_person() -> None:
    ruling = ruled(
        C.IDEMPOTENT, PastAutomation("past the key retention"), S.OUTCOME_UNKNOWN
    )
    assert (ruling.status, ruling.error) == (S.MANUAL_REVIEW, "past the key retention")
    outcome = outcome_of(ruling, effect(C.IDEMPOTENT, S.MANUAL_REVIEW))
    assert isinstance(outcome, Unknown) and outcome.why is Unknowable.AWAITING_OPERATOR


# -- an operator ------------------------------------------------------------------------


def resolving(resolution: Resolution, external_id: str | None = None) -> Resolved:
    return Resolved(
        ResolutionRequest(resolution, "checked", {"ticket": "1"}, external_id)
    )


def test_an_operators_requeue_is_due_at_once_without_a_contract() -> None:
    ruling = rule(
        effect(C.IDEMPOTENT, S.MANUAL_REVIEW),
        None,
        resolving(Resolution.NOT_COMMITTED),
        rng=Random(1),
    )
    assert (ruling.status, ruling.kind, ruling.due_in, ruling.receipt) == (
        S.PREPARED,
        "operator_not_committed",
        timedelta(0),
        None,
    )


def test_an_operators_success_settles_with_an_operator_receipt() -> None:
    ruling = rule(
        effect(C.UNSAFE, S.OUTCOME_UNKNOWN),
        None,
        resolving(Resolution.SUCCEEDED, external_id="ch_1"),
        rng=Random(1),
    )
    assert ruling.status is S.SUCCEEDED and ruling.receipt is not None
    assert (ruling.receipt.source, ruling.receipt.external_id) == (
        ReceiptSource.OPERATOR,
        "ch_1",
    )


def test_an_operator_cannot_requeue_an_unsafe_effect() -> None:
    with pytest.raises(RequeueRefused):
        rule(
            effect(C.UNSAFE, S.OUTCOME_UNKNOWN),
            None,
            resolving(Resolution.NOT_COMMITTED),
            rng=Random(1),
        )


def test_evidence_about_the_target_needs_the_pinned_contract() -> None:
    with pytest.raises(ValueError, match="pinned contract"):
        rule(
            effect(C.IDEMPOTENT, S.DISPATCHING), None, Attempted(NOT_SENT), rng=Random(1)
        )


# -- every ruling is a legal move -------------------------------------------------------


CASES: list[tuple[C, S, Evidence]] = [
    *[(c, S.DISPATCHING, Attempted(a)) for c in CONTRACTS for a in (
        NOT_SENT, answered(200), answered(404), answered(429), answered(503),
        AttemptResult(Delivery.UNKNOWN, detail="reset"),
    )],
    *[(c, S.DISPATCHING, Attempted(NOT_SENT, after_unknown=True)) for c in CONTRACTS],
    (C.RECONCILABLE, S.OUTCOME_UNKNOWN, Asking(LEASE)),
    (C.TRANSACTIONAL, S.OUTCOME_UNKNOWN, Asking(LEASE)),
    *[(C.RECONCILABLE, S.RECONCILING, Probed(ProbeResult(v, answer(200))))
      for v in ProbeVerdict],
    *[(C.TRANSACTIONAL, S.RECONCILING, LookedUp(KitAnswer(f, response=answer(200))))
      for f in (Finding.COMMITTED, Finding.TOMBSTONED, Finding.UNKNOWN)],
    *[(c, s, LeaseLapsed(LEASE)) for c in CONTRACTS for s in (S.DISPATCHING,
      S.RECONCILING) if s is S.DISPATCHING or c in (C.RECONCILABLE, C.TRANSACTIONAL)],
    *[(c, S.RETRYABLE, RetriesSpent()) for c in CONTRACTS],
    *[(c, S.OUTCOME_UNKNOWN, PastAutomation("x")) for c in CONTRACTS],
]  # fmt: skip


@pytest.mark.parametrize(("safety", "status", "evidence"), CASES)
def test_every_ruling_is_a_move_the_state_machine_allows(
    safety: C, status: S, evidence: Evidence
) -> None:
    ruling = ruled(safety, evidence, status, attempts=3 if status is S.RETRYABLE else 1)
    assert is_allowed(status, ruling.status, safety), (status, ruling)
    assert (ruling.receipt is not None) is (ruling.status in TERMINAL)


def test_the_same_evidence_and_seed_give_the_same_ruling() -> None:
    """Pure: nothing but the arguments (the seed's jitter included) decides."""
    lost = Attempted(AttemptResult(Delivery.NOT_SENT, detail="refused"))
    assert ruled(C.IDEMPOTENT, lost) == ruled(C.IDEMPOTENT, lost)
