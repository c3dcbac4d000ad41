"""engine.policy.decide, branch by branch: the one decision for client and reconciler."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from effect_broker.engine.policy import (
    DEFAULT_RETRY_AFTER,
    INSIDE_THE_PROXY,
    Verdict,
    decide,
)
from effect_broker.models import Effect
from effect_broker.models import EffectStatus as S
from effect_broker.models import SafetyClass as C
from tests.unit.engine_support import CONTRACTS, effect_at

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=30)
EARLIER = NOW - timedelta(seconds=30)


def effect(safety: C, status: S, **changes: object) -> Effect:
    return effect_at(EARLIER, LATER, safety, status, **changes)


def verdict(safety: C, status: S, *, owned: bool = False, **changes: object) -> Verdict:
    return decide(
        effect(safety, status, **changes), CONTRACTS[safety], NOW, owned=owned
    ).verdict


@pytest.mark.parametrize("safety", list(CONTRACTS))
@pytest.mark.parametrize("status", [S.SUCCEEDED, S.FAILED_FINAL])
@pytest.mark.parametrize("owned", [False, True])
def test_settled_effects_replay_whoever_asks(safety: C, status: S, owned: bool) -> None:
    assert verdict(safety, status, owned=owned) is Verdict.REPLAY


@pytest.mark.parametrize("safety", list(CONTRACTS))
@pytest.mark.parametrize("status", [S.PREPARED, S.DISPATCHING, S.RECONCILING])
def test_a_live_lease_of_someone_else_means_in_flight(safety: C, status: S) -> None:
    decision = decide(
        effect(safety, status, lease_owner="other", lease_expires_at=LATER),
        CONTRACTS[safety],
        NOW,
    )
    assert decision.verdict is Verdict.IN_FLIGHT
    assert decision.retry_after == LATER - NOW


@pytest.mark.parametrize("safety", list(CONTRACTS))
@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (S.PREPARED, Verdict.DISPATCH),
        (S.DISPATCHING, Verdict.EXPIRE_LEASE),
        (S.RECONCILING, Verdict.EXPIRE_LEASE),
    ],
)
def test_the_owner_of_a_live_lease_acts_on_it(
    safety: C, status: S, expected: Verdict
) -> None:
    """The reconciler's claim leases the row to itself: that lease is not a rival."""
    live = {"lease_owner": "me", "lease_expires_at": LATER}
    assert verdict(safety, status, owned=True, **live) is expected


@pytest.mark.parametrize("safety", list(CONTRACTS))
@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (S.PREPARED, Verdict.DISPATCH),
        (S.DISPATCHING, Verdict.EXPIRE_LEASE),
        (S.RECONCILING, Verdict.EXPIRE_LEASE),
    ],
)
def test_an_expired_lease_is_taken_over(safety: C, status: S, expected: Verdict) -> None:
    dead = {"lease_owner": "dead", "lease_expires_at": EARLIER}
    assert verdict(safety, status, **dead) is expected


@pytest.mark.parametrize("safety", list(CONTRACTS))
@pytest.mark.parametrize("owned", [False, True])
def test_retryable_sends_again_until_the_limit_then_gives_up(
    safety: C, owned: bool
) -> None:
    assert verdict(safety, S.RETRYABLE, owned=owned, attempts=2) is Verdict.DISPATCH
    assert verdict(safety, S.RETRYABLE, owned=owned, attempts=3) is Verdict.GIVE_UP


@pytest.mark.parametrize("safety", list(CONTRACTS))
def test_manual_review_waits_for_a_person(safety: C) -> None:
    assert verdict(safety, S.MANUAL_REVIEW) is Verdict.AWAIT_OPERATOR


@pytest.mark.parametrize("owned", [False, True])
def test_unknown_idempotent_resends_within_retention_and_limit(owned: bool) -> None:
    assert verdict(C.IDEMPOTENT, S.OUTCOME_UNKNOWN, owned=owned) is Verdict.DISPATCH


@pytest.mark.parametrize("owned", [False, True])
@pytest.mark.parametrize(
    "changes",
    [
        {"retention_deadline": NOW},
        {"retention_deadline": EARLIER},
        {"retention_deadline": None},
        {"attempts": 3},
    ],
)
def test_unknown_idempotent_goes_to_review_past_retention_or_limit(
    owned: bool, changes: dict[str, object]
) -> None:
    """A client retry and the reconciler refuse the same resend: one policy."""
    assert verdict(C.IDEMPOTENT, S.OUTCOME_UNKNOWN, owned=owned, **changes) is (
        Verdict.REVIEW
    )


def test_unknown_reconcilable_waits_for_its_settlement_bound() -> None:
    decision = decide(
        effect(C.RECONCILABLE, S.OUTCOME_UNKNOWN, settlement_deadline=LATER),
        CONTRACTS[C.RECONCILABLE],
        NOW,
    )
    assert decision.verdict is Verdict.WAIT_SETTLEMENT
    assert decision.retry_after == LATER - NOW


@pytest.mark.parametrize("deadline", [EARLIER, NOW, None])
def test_unknown_reconcilable_is_looked_up_once_settled(
    deadline: datetime | None,
) -> None:
    assert (
        verdict(C.RECONCILABLE, S.OUTCOME_UNKNOWN, settlement_deadline=deadline)
        is Verdict.PROBE
    )


def test_a_reconcilable_effect_is_looked_up_even_past_its_retry_limit() -> None:
    """A lookup sends nothing, so no limit applies to it."""
    assert verdict(C.RECONCILABLE, S.OUTCOME_UNKNOWN, attempts=9) is Verdict.PROBE


@pytest.mark.parametrize("owned", [False, True])
def test_unknown_unsafe_is_never_sent_again(owned: bool) -> None:
    assert verdict(C.UNSAFE, S.OUTCOME_UNKNOWN, owned=owned) is Verdict.AWAIT_OPERATOR
    assert (
        verdict(
            C.UNSAFE, S.OUTCOME_UNKNOWN, owned=owned, attempts=0, retention_deadline=LATER
        )
        is Verdict.AWAIT_OPERATOR
    )


def test_a_reconcilable_effect_whose_contract_lost_its_probe_waits_for_a_person() -> None:
    without_probe = replace(CONTRACTS[C.RECONCILABLE], probe=None)
    decision = decide(effect(C.RECONCILABLE, S.OUTCOME_UNKNOWN), without_probe, NOW)
    assert decision.verdict is Verdict.AWAIT_OPERATOR


def test_a_deadline_already_past_gives_the_default_retry_after() -> None:
    decision = decide(
        effect(C.UNSAFE, S.PREPARED, lease_owner="x", lease_expires_at=LATER),
        CONTRACTS[C.UNSAFE],
        LATER - timedelta(microseconds=1),
    )
    assert decision.retry_after == timedelta(microseconds=1)
    assert timedelta(seconds=1) == DEFAULT_RETRY_AFTER


@pytest.mark.parametrize("safety", list(CONTRACTS))
@pytest.mark.parametrize("status", list(S))
@pytest.mark.parametrize("owned", [False, True])
def test_only_idempotent_unknown_or_proven_unsent_effects_are_dispatched(
    safety: C, status: S, owned: bool
) -> None:
    """The safety property, over every status: DISPATCH only where nothing may have
    committed (PREPARED, RETRYABLE) or the target deduplicates (idempotent unknown).
    A transactional effect is never resent straight from unknown: its lookup first."""
    if verdict(safety, status, owned=owned) is Verdict.DISPATCH:
        assert status in (S.PREPARED, S.RETRYABLE) or (
            safety is C.IDEMPOTENT and status is S.OUTCOME_UNKNOWN
        )


@pytest.mark.parametrize("owned", [False, True])
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"attempts": 3},  # past the retry limit: a lookup sends nothing
        {"attempts": 9},
        {"settlement_deadline": LATER},  # no settlement bound applies to the kit
        {"settlement_deadline": None},
        {"retention_deadline": None},
        {"retention_deadline": EARLIER},
    ],
)
def test_unknown_transactional_is_looked_up_at_once(
    owned: bool, changes: dict[str, object]
) -> None:
    """Client retry and reconciler alike: the lookup is conclusive when it answers."""
    decision = decide(
        effect(C.TRANSACTIONAL, S.OUTCOME_UNKNOWN, **changes),
        CONTRACTS[C.TRANSACTIONAL],
        NOW,
        owned=owned,
    )
    assert decision.verdict is Verdict.LOOKUP
    assert decision.retry_after is None


def test_an_unknown_transactional_effect_never_started_has_nothing_to_look_up() -> None:
    assert verdict(C.TRANSACTIONAL, S.OUTCOME_UNKNOWN, attempts=0) is (
        Verdict.AWAIT_OPERATOR
    )


@pytest.mark.parametrize(
    ("status", "attempts", "expected"),
    [
        # A tombstone proved the attempt absent: the retry limit decides.
        (S.RETRYABLE, 1, Verdict.DISPATCH),
        (S.RETRYABLE, 2, Verdict.DISPATCH),
        (S.RETRYABLE, 3, Verdict.GIVE_UP),
        (S.RETRYABLE, 4, Verdict.GIVE_UP),
        (S.OUTCOME_UNKNOWN, 3, Verdict.LOOKUP),
        (S.MANUAL_REVIEW, 1, Verdict.AWAIT_OPERATOR),
        (S.SUCCEEDED, 2, Verdict.REPLAY),
        (S.FAILED_FINAL, 3, Verdict.REPLAY),
    ],
)
def test_transactional_after_a_lookup(
    status: S, attempts: int, expected: Verdict
) -> None:
    assert verdict(C.TRANSACTIONAL, status, owned=True, attempts=attempts) is expected


@pytest.mark.parametrize("safety", [C.IDEMPOTENT, C.RECONCILABLE, C.UNSAFE])
@pytest.mark.parametrize("status", list(S))
def test_only_transactional_effects_are_looked_up_by_attempt_key(
    safety: C, status: S
) -> None:
    assert verdict(safety, status) is not Verdict.LOOKUP


@pytest.mark.parametrize("safety", list(C))
def test_a_failure_inside_the_proxy_does_not_spend_the_retry_limit(safety: C) -> None:
    """The reconciler and a client retry ask ``decide``: neither gives up on an effect
    whose last attempt failed on the proxy's own TLS trust, pool or send fence."""
    spent = CONTRACTS[safety].retry_limit
    inside = f"{INSIDE_THE_PROXY}the certificate of 127.0.0.1 did not verify"

    assert (
        verdict(safety, S.RETRYABLE, attempts=spent, last_error=inside)
        is Verdict.DISPATCH
    )
    assert (
        verdict(safety, S.RETRYABLE, attempts=spent, last_error="could not connect")
        is Verdict.GIVE_UP
    )
