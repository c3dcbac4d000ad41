"""The effect lifecycle table and its safety-class guards, against an independent oracle.

The oracle below is typed out by hand from the lifecycle in docs/architecture.md ("The
state machine") and the safety-class table; it never asks ``is_allowed`` what the
answer should be.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from effect_broker.errors import IllegalTransition
from effect_broker.models import EffectStatus as S
from effect_broker.models import SafetyClass as C
from effect_broker.state_machine import (
    TERMINAL,
    TRANSITIONS,
    allowed_sources,
    check_transition,
    is_allowed,
)

# --- The oracle -------------------------------------------------------------------------

EVERY: frozenset[C] = frozenset(C)
IDEMPOTENT_ONLY: frozenset[C] = frozenset({C.IDEMPOTENT})
RECONCILABLE_ONLY: frozenset[C] = frozenset({C.RECONCILABLE})
TRANSACTIONAL_ONLY: frozenset[C] = frozenset({C.TRANSACTIONAL})
LOOKED_UP: frozenset[C] = frozenset({C.RECONCILABLE, C.TRANSACTIONAL})
REQUEUEABLE: frozenset[C] = frozenset({C.IDEMPOTENT, C.RECONCILABLE})

# (from, to, the classes that may make the move). Anything absent is forbidden for all.
EXPECTED_MOVES: tuple[tuple[S, S, frozenset[C]], ...] = (
    (S.PREPARED, S.DISPATCHING, EVERY),
    (S.DISPATCHING, S.SUCCEEDED, EVERY),
    (S.DISPATCHING, S.FAILED_FINAL, EVERY),
    (S.DISPATCHING, S.RETRYABLE, EVERY),
    (S.DISPATCHING, S.OUTCOME_UNKNOWN, EVERY),
    # Retryable means proven not committed, so even an unsafe effect may go again.
    (S.RETRYABLE, S.DISPATCHING, EVERY),
    (S.RETRYABLE, S.FAILED_FINAL, EVERY),
    (S.OUTCOME_UNKNOWN, S.DISPATCHING, IDEMPOTENT_ONLY),
    (S.OUTCOME_UNKNOWN, S.RECONCILING, LOOKED_UP),
    (S.OUTCOME_UNKNOWN, S.MANUAL_REVIEW, EVERY),
    (S.OUTCOME_UNKNOWN, S.SUCCEEDED, EVERY),
    (S.OUTCOME_UNKNOWN, S.PREPARED, REQUEUEABLE),
    (S.OUTCOME_UNKNOWN, S.FAILED_FINAL, EVERY),
    (S.RECONCILING, S.SUCCEEDED, EVERY),
    (S.RECONCILING, S.OUTCOME_UNKNOWN, EVERY),
    (S.RECONCILING, S.MANUAL_REVIEW, EVERY),
    (S.RECONCILING, S.PREPARED, RECONCILABLE_ONLY),
    # The kit's lookup returns the attempt's committed answer, a refusal included; its
    # tombstone proves the attempt can never commit, so another attempt may follow.
    (S.RECONCILING, S.FAILED_FINAL, TRANSACTIONAL_ONLY),
    (S.RECONCILING, S.RETRYABLE, TRANSACTIONAL_ONLY),
    (S.MANUAL_REVIEW, S.SUCCEEDED, EVERY),
    (S.MANUAL_REVIEW, S.FAILED_FINAL, EVERY),
    (S.MANUAL_REVIEW, S.PREPARED, REQUEUEABLE),
)
ORACLE: dict[tuple[S, S], frozenset[C]] = {
    (source, target): classes for source, target, classes in EXPECTED_MOVES
}
EXPECTED_TERMINAL: frozenset[S] = frozenset({S.SUCCEEDED, S.FAILED_FINAL})


def oracle_allows(current: S, target: S, safety: C) -> bool:
    return safety in ORACLE.get((current, target), frozenset())


def test_the_oracle_itself_is_well_formed() -> None:
    assert len(ORACLE) == len(EXPECTED_MOVES), "a move is listed twice"
    assert all(source != target for source, target in ORACLE), "no self-transitions"
    assert not any(source in EXPECTED_TERMINAL for source, _ in ORACLE)


# --- The table as data ------------------------------------------------------------------


def test_terminal_statuses_are_exactly_succeeded_and_failed_final() -> None:
    assert TERMINAL == EXPECTED_TERMINAL


def test_every_status_has_an_entry_and_none_moves_to_itself() -> None:
    assert set(TRANSITIONS) == set(S)
    for source, targets in TRANSITIONS.items():
        assert source not in targets, f"{source} has a self-transition"


def test_the_structural_table_is_the_oracle_ignoring_classes() -> None:
    for source in S:
        expected = {target for (src, target) in ORACLE if src == source}
        assert set(TRANSITIONS[source]) == expected, source


# --- Every (from, to, class) combination, deterministically -----------------------------

ALL_COMBINATIONS = list(itertools.product(S, S, C))


@pytest.mark.parametrize(
    ("current", "target", "safety"),
    ALL_COMBINATIONS,
    ids=[f"{c.value}->{t.value}[{s.value}]" for c, t, s in ALL_COMBINATIONS],
)
def test_every_combination_matches_the_oracle(current: S, target: S, safety: C) -> None:
    expected = oracle_allows(current, target, safety)
    assert is_allowed(current, target, safety) is expected
    if expected:
        check_transition(current, target, safety)
    else:
        with pytest.raises(IllegalTransition):
            check_transition(current, target, safety)


def test_the_table_allows_some_and_forbids_most() -> None:
    # Guards against a degenerate oracle/table pair that agree on "nothing" or "all".
    allowed = [combo for combo in ALL_COMBINATIONS if is_allowed(*combo)]
    assert 0 < len(allowed) < len(ALL_COMBINATIONS) // 2


# --- Readable refusals ------------------------------------------------------------------


def _refusal(current: S, target: S, safety: C) -> str:
    with pytest.raises(IllegalTransition) as caught:
        check_transition(current, target, safety)
    return str(caught.value)


@pytest.mark.parametrize("terminal", sorted(EXPECTED_TERMINAL))
@pytest.mark.parametrize("target", list(S))
def test_a_terminal_refusal_says_terminal(terminal: S, target: S) -> None:
    message = _refusal(terminal, target, C.IDEMPOTENT)
    assert "terminal" in message
    assert terminal.value in message


GUARDED_REFUSALS = [
    (source, target, safety)
    for (source, target), classes in ORACLE.items()
    for safety in C
    if safety not in classes
]


@pytest.mark.parametrize(
    ("current", "target", "safety"),
    GUARDED_REFUSALS,
    ids=[f"{c.value}->{t.value}[{s.value}]" for c, t, s in GUARDED_REFUSALS],
)
def test_a_class_guard_refusal_names_the_class(current: S, target: S, safety: C) -> None:
    message = _refusal(current, target, safety)
    assert safety.value in message
    assert current.value in message
    assert target.value in message
    assert "terminal" not in message


def test_the_class_guarded_moves_are_the_expected_ones() -> None:
    assert {(c, t) for c, t, _ in GUARDED_REFUSALS} == {
        (S.OUTCOME_UNKNOWN, S.DISPATCHING),
        (S.OUTCOME_UNKNOWN, S.RECONCILING),
        (S.OUTCOME_UNKNOWN, S.PREPARED),
        (S.RECONCILING, S.PREPARED),
        (S.RECONCILING, S.FAILED_FINAL),
        (S.RECONCILING, S.RETRYABLE),
        (S.MANUAL_REVIEW, S.PREPARED),
    }


def test_a_structural_refusal_names_both_statuses_and_no_class() -> None:
    message = _refusal(S.PREPARED, S.SUCCEEDED, C.UNSAFE)
    assert "prepared" in message
    assert "succeeded" in message
    assert "unsafe" not in message
    assert "terminal" not in message


def test_illegal_transition_is_a_conflict() -> None:
    with pytest.raises(IllegalTransition) as caught:
        check_transition(S.SUCCEEDED, S.PREPARED, C.IDEMPOTENT)
    assert caught.value.status == 409
    assert caught.value.problem_type == "illegal-transition"


# --- allowed_sources --------------------------------------------------------------------


@pytest.mark.parametrize("safety", list(C))
@pytest.mark.parametrize("target", list(S))
def test_allowed_sources_agrees_with_the_oracle(target: S, safety: C) -> None:
    sources = allowed_sources(target, safety)
    assert len(sources) == len(set(sources))
    assert set(sources) == {
        source for source in S if oracle_allows(source, target, safety)
    }


def test_allowed_sources_of_dispatching_by_class() -> None:
    assert set(allowed_sources(S.DISPATCHING, C.IDEMPOTENT)) == {
        S.PREPARED,
        S.RETRYABLE,
        S.OUTCOME_UNKNOWN,
    }
    assert set(allowed_sources(S.DISPATCHING, C.UNSAFE)) == {S.PREPARED, S.RETRYABLE}
    assert allowed_sources(S.PREPARED, C.UNSAFE) == ()


# --- Reachability: the safety promises as graph properties ------------------------------


def _reachable(start: S, safety: C) -> set[S]:
    seen: set[S] = set()
    queue: deque[S] = deque([start])
    while queue:
        current = queue.popleft()
        for target in S:
            if target not in seen and is_allowed(current, target, safety):
                seen.add(target)
                queue.append(target)
    return seen


def test_unsafe_can_never_dispatch_again_once_the_outcome_is_unknown() -> None:
    after_unknown = _reachable(S.OUTCOME_UNKNOWN, C.UNSAFE)
    assert S.DISPATCHING not in after_unknown
    assert S.PREPARED not in after_unknown
    assert after_unknown >= {S.MANUAL_REVIEW, S.SUCCEEDED, S.FAILED_FINAL}


@pytest.mark.parametrize("safety", [C.IDEMPOTENT, C.RECONCILABLE, C.TRANSACTIONAL])
def test_every_class_with_a_proof_can_go_again_after_unknown(safety: C) -> None:
    assert S.DISPATCHING in _reachable(S.OUTCOME_UNKNOWN, safety)


def test_transactional_dispatches_again_after_unknown_only_through_a_lookup() -> None:
    """No direct resend and no requeue: the only way back to DISPATCHING from an unknown
    outcome is RECONCILING (the lookup) then RETRYABLE (its tombstone committed)."""
    assert not is_allowed(S.OUTCOME_UNKNOWN, S.DISPATCHING, C.TRANSACTIONAL)
    assert not is_allowed(S.OUTCOME_UNKNOWN, S.PREPARED, C.TRANSACTIONAL)
    assert not is_allowed(S.RECONCILING, S.PREPARED, C.TRANSACTIONAL)
    assert not is_allowed(S.MANUAL_REVIEW, S.PREPARED, C.TRANSACTIONAL)
    assert is_allowed(S.RECONCILING, S.RETRYABLE, C.TRANSACTIONAL)


@pytest.mark.parametrize("safety", list(C))
def test_every_class_can_always_settle(safety: C) -> None:
    for status in set(S) - EXPECTED_TERMINAL:
        reachable = _reachable(status, safety)
        assert reachable & EXPECTED_TERMINAL, f"{status} is a dead end for {safety}"


@pytest.mark.parametrize("terminal", sorted(EXPECTED_TERMINAL))
@pytest.mark.parametrize("safety", list(C))
def test_nothing_is_reachable_from_a_terminal_status(terminal: S, safety: C) -> None:
    assert _reachable(terminal, safety) == set()


# --- A random walk against the oracle ---------------------------------------------------


def _allowed_targets(current: S, safety: C) -> list[S]:
    return [target for target in S if oracle_allows(current, target, safety)]


def _pairs(path: Iterable[S]) -> Iterable[tuple[S, S]]:
    return itertools.pairwise(path)


class LifecycleMachine(RuleBasedStateMachine):
    """One effect from its reservation on; each move is checked against the oracle."""

    def __init__(self) -> None:
        super().__init__()
        self.safety: C = C.UNSAFE
        self.status: S = S.PREPARED
        self.path: list[S] = [S.PREPARED]
        self.refused: int = 0

    @initialize(safety=st.sampled_from(C))
    def reserve(self, safety: C) -> None:
        self.safety = safety
        self.status = S.PREPARED
        self.path = [S.PREPARED]

    def _attempt(self, to: S) -> None:
        before = self.status
        try:
            check_transition(before, to, self.safety)
        except IllegalTransition:
            moved = False
        else:
            moved = True
        assert moved is oracle_allows(before, to, self.safety), (
            f"{self.safety}: {before} -> {to} was {'allowed' if moved else 'refused'}"
        )
        if moved:
            self.status = to
            self.path.append(to)
        else:
            self.refused += 1
            assert self.status is before

    @rule(to=st.sampled_from(S))
    def try_any_move(self, to: S) -> None:
        self._attempt(to)

    @precondition(lambda self: bool(_allowed_targets(self.status, self.safety)))
    @rule(data=st.data())
    def take_an_allowed_move(self, data: st.DataObject) -> None:
        # Walks deep into the lifecycle; try_any_move alone mostly bounces off refusals.
        to = data.draw(st.sampled_from(_allowed_targets(self.status, self.safety)))
        self._attempt(to)

    @invariant()
    def the_machine_is_where_its_path_ends(self) -> None:
        assert self.path[-1] is self.status
        assert self.path[0] is S.PREPARED

    @invariant()
    def a_terminal_status_never_moves_again(self) -> None:
        for index, status in enumerate(self.path):
            if status in EXPECTED_TERMINAL:
                assert index == len(self.path) - 1, f"moved on after {status}"

    @invariant()
    def unsafe_never_dispatches_after_an_unknown_outcome(self) -> None:
        if self.safety is not C.UNSAFE or S.OUTCOME_UNKNOWN not in self.path:
            return
        first_unknown = self.path.index(S.OUTCOME_UNKNOWN)
        assert S.DISPATCHING not in self.path[first_unknown:], self.path

    @invariant()
    def only_idempotent_redispatches_straight_from_unknown(self) -> None:
        if (S.OUTCOME_UNKNOWN, S.DISPATCHING) in set(_pairs(self.path)):
            assert self.safety is C.IDEMPOTENT, self.path

    @invariant()
    def only_classes_with_a_lookup_ever_reconcile(self) -> None:
        if S.RECONCILING in self.path:
            assert self.safety in (C.RECONCILABLE, C.TRANSACTIONAL), self.path

    @invariant()
    def transactional_goes_again_after_unknown_only_through_a_tombstone(self) -> None:
        if self.safety is not C.TRANSACTIONAL:
            return
        for before, after in _pairs(self.path):
            if after is S.DISPATCHING:
                assert before in (S.PREPARED, S.RETRYABLE), self.path

    @invariant()
    def no_step_is_a_self_transition(self) -> None:
        assert all(a is not b for a, b in _pairs(self.path))


LifecycleMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None
)
TestLifecycle = LifecycleMachine.TestCase
