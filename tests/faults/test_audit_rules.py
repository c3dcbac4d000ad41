"""The audit's rules on made-up evidence: red where a fault scenario must turn red.

The scenarios pass when the proxy behaves; these cases show that the same audit fails
on a duplicate, on a 2xx without its charge, on a charge behind "nothing was sent", and
on an unsafe effect left unknown although nothing left, so a passing scenario means
something.
"""

from __future__ import annotations

import pytest

from tests.faults.audit import Audit, Evidence, Ledger
from tests.faults.load import Op, Reply

pytestmark = pytest.mark.faults

IDEMPOTENT = Op("t-0000", "idempotent", 100)
UNSAFE = Op("t-0001", "unsafe", 101)
SUCCEEDED = Ledger("succeeded", "idempotent", False, None, 201)


def audit(
    replies: list[Reply],
    charges: dict[str, list[float]],
    effects: dict[str, Ledger],
    attempts: dict[str, list[tuple[str, float]]] | None = None,
    *,
    ops: tuple[Op, ...] = (IDEMPOTENT,),
) -> list[str]:
    evidence = Evidence(effects, attempts or {}, charges)
    return Audit("rules", ops, replies, [], evidence).check()


def test_one_charge_a_receipt_and_a_2xx_pass() -> None:
    ok = Reply(IDEMPOTENT, 10.0, 11.0, 201)
    assert audit([ok], {IDEMPOTENT.key: [10.5]}, {IDEMPOTENT.key: SUCCEEDED}) == []


def test_a_duplicate_and_a_2xx_without_its_charge_fail() -> None:
    ok = Reply(IDEMPOTENT, 10.0, 11.0, 201)
    twice = audit([ok], {IDEMPOTENT.key: [10.5, 12.0]}, {IDEMPOTENT.key: SUCCEEDED})
    assert any("got a 2xx but has 2 charge(s)" in v for v in twice)
    assert any("2 charges after the retries" in v for v in twice)
    assert audit([ok], {}, {IDEMPOTENT.key: SUCCEEDED})


def test_a_charge_behind_nothing_sent_fails_unless_the_reconciler_sent_it() -> None:
    busy = Reply(IDEMPOTENT, 10.0, 11.0, 503, "store-unavailable")
    later = Reply(IDEMPOTENT, 20.0, 21.0, 201)
    charges = {IDEMPOTENT.key: [10.5]}
    effects = {IDEMPOTENT.key: SUCCEEDED}
    (violation,) = audit([busy, later], charges, effects)
    assert "answered 503 store-unavailable (nothing sent)" in violation
    by_reconciler = {IDEMPOTENT.key: [("reconciler@h:1:x", 10.2)]}
    assert audit([busy, later], charges, effects, by_reconciler) == []
    after = {IDEMPOTENT.key: [20.5]}
    assert audit([busy, later], after, effects) == []  # the later retry made it


def test_an_answer_that_does_not_say_what_was_sent_fails() -> None:
    failed = Reply(IDEMPOTENT, 10.0, 11.0, 500, "internal-error")
    later = Reply(IDEMPOTENT, 20.0, 21.0, 201)
    charges, effects = {IDEMPOTENT.key: [20.5]}, {IDEMPOTENT.key: SUCCEEDED}
    (violation,) = audit([failed, later], charges, effects)
    assert "answered 500 internal-error, which does not say" in violation


def test_non_terminal_effects_and_silent_unsafe_unknowns_fail() -> None:
    stuck = Ledger("dispatching", "idempotent", False, "proxy@h:1:x", None)
    (left,) = audit([], {IDEMPOTENT.key: [1.0]}, {IDEMPOTENT.key: stuck})
    assert "left dispatching" in left
    unknown = Ledger("outcome_unknown", "unsafe", False, None, None)
    told = [Reply(UNSAFE, 1.0, 2.0, 409, "outcome-unknown")]
    (silent,) = audit(told, {}, {UNSAFE.key: unknown}, ops=(UNSAFE,))
    assert "left outcome_unknown, but the target has no charge" in silent
    assert audit(told, {UNSAFE.key: [1.5]}, {UNSAFE.key: unknown}, ops=(UNSAFE,)) == []
