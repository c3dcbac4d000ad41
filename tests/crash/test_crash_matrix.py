"""The crash matrix, once per test run: the proof that the documented claims hold.

Real processes (the demo payment target, ``effect-broker serve``), killed at every
failpoint, SIGKILLed in flight and mid-stream, frozen past their lease, raced by ten
agents, and a naive client without the proxy; every cell on a database of its own on the
session's server.
The runner judges each cell; this test also pins the rows a reader looks at first, so a
change in the rules themselves cannot quietly make the matrix weaker.
"""

from __future__ import annotations

from typing import Any

import pytest

from effect_broker.demo import crash_matrix as runner

# The shared run's 50 cells count against the first test that asks for it. Each cell
# has deadlines of its own, so the module's limit only has to outlast a busy machine
# (three suites at once ran the matrix in well over the default 300 s).
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def matrix(server_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One full run, shared by every assertion below (50 cells, four at a time)."""
    return runner.run_matrix(
        server_dsn,
        tmp_path_factory.mktemp("crash-matrix"),
        progress=print,
        parallel=4,  # cells mostly wait on timeouts: four at a time fit two cores
    )


def cell(matrix: Any, mode: str, scenario: str) -> Any:
    (found,) = [c for c in matrix.cells if (c.mode, c.scenario) == (mode, scenario)]
    return found


def test_no_cell_breaks_its_rule(matrix: Any) -> None:
    assert matrix.violations == []
    assert len(matrix.cells) == runner.cell_count(runner.MODES, runner.SCENARIOS)
    assert {cell.mode for cell in matrix.cells} == set(runner.MODES)


@pytest.mark.parametrize("mode", runner.MODES)
def test_the_naive_client_double_charges(matrix: Any, mode: str) -> None:
    naive = cell(matrix, mode, runner.NAIVE)
    assert naive.observation.charges >= 2
    assert naive.verdict == "duplicate (expected: no proxy)"


KEYED = [
    (mode, scenario)
    for mode in ("idempotent", "reconcilable", runner.TRANSACTIONAL)
    for scenario in runner.SCENARIOS
    if scenario != runner.NAIVE and runner.applies(mode, scenario)
]


@pytest.mark.parametrize("mode,scenario", KEYED)
def test_keyed_targets_are_charged_exactly_once(
    matrix: Any, mode: str, scenario: str
) -> None:
    seen = cell(matrix, mode, scenario).observation
    assert seen.charges == 1
    assert seen.ledger.status == "succeeded"
    assert seen.ledger.receipt_source is not None


@pytest.mark.parametrize("scenario", sorted(runner.AMBIGUOUS))
def test_unsafe_ambiguity_is_shown_not_retried(matrix: Any, scenario: str) -> None:
    seen = cell(matrix, "unsafe", scenario).observation
    assert seen.charges <= 1
    assert seen.ledger.status == "outcome_unknown"
    assert seen.ledger.receipt_source is None
    assert [result.outcome for result in seen.agents] == ["outcome_unknown"]


@pytest.mark.parametrize("scenario", ["after_receipt_commit", "in_receipt_batch"])
@pytest.mark.parametrize("mode", runner.MODES)
def test_a_committed_receipt_is_replayed(matrix: Any, mode: str, scenario: str) -> None:
    seen = cell(matrix, mode, scenario).observation
    (result,) = seen.agents
    assert result.final_2xx and result.replayed


@pytest.mark.parametrize("mode", runner.MODES)
def test_ten_concurrent_agents_get_one_answer(matrix: Any, mode: str) -> None:
    seen = cell(matrix, mode, runner.CONCURRENT).observation
    assert seen.charges == 1
    assert len(seen.agents) == runner.CONCURRENT_AGENTS
    assert all(result.final_2xx for result in seen.agents)
    assert len({result.body for result in seen.agents}) == 1
    assert sum(not result.replayed for result in seen.agents) <= 1


@pytest.mark.parametrize("mode", runner.MODES)
def test_the_zombie_is_fenced(matrix: Any, mode: str) -> None:
    seen = cell(matrix, mode, runner.ZOMBIE).observation
    assert seen.fenced > 0
    assert seen.taken_over
    assert seen.second_proxy_kept_it


def test_the_tombstone_wins_over_a_held_attempt(matrix: Any) -> None:
    """The race only this class can settle: a tombstone proved the first attempt
    absent while it held its transaction open; its commit then failed, and the next
    attempt (under its own key) charged once."""
    seen = cell(matrix, runner.TRANSACTIONAL, runner.TOMBSTONE_RACE).observation
    assert seen.charges == 1
    assert seen.ledger.absences_proven >= 1
    assert seen.ledger.attempts >= 2


def test_a_held_commit_wins_and_is_found_not_resent(matrix: Any) -> None:
    seen = cell(matrix, runner.TRANSACTIONAL, runner.COMMIT_RACE).observation
    assert seen.charges == 1
    assert seen.ledger.attempts == 1
    assert seen.ledger.receipt_source == "lookup"
    assert seen.ledger.absences_proven == 0


def test_the_races_run_in_transactional_mode_only() -> None:
    for scenario in (runner.TOMBSTONE_RACE, runner.COMMIT_RACE):
        assert [m for m in runner.MODES if runner.applies(m, scenario)] == [
            runner.TRANSACTIONAL
        ]


def answered_201(mode: str, *, replayed: bool, history: tuple[str, ...]) -> Any:
    """A made-up agent that finally got a 201, for the judge's own tests."""
    return runner.agent.AgentResult(
        mode=mode,
        naive=False,
        outcome="answered",
        status=201,
        replayed=replayed,
        effect_status="succeeded",
        charge_id="ch_1",
        body="{}",
        attempts=len(history),
        history=history,
        seconds=1.0,
    )


def test_the_judge_flags_a_race_without_its_proof() -> None:
    agent = answered_201(
        runner.TRANSACTIONAL, replayed=False, history=("504 outcome-unknown", "201")
    )
    resent = runner.Ledger("succeeded", 2, 9, False, None, "lookup", "proxy@h:1:x")
    commit = runner.Observation(
        runner.TRANSACTIONAL, runner.COMMIT_RACE, 1, resent, (agent,)
    )
    assert "2 attempts sent: the committed one was resent" in runner.judge(commit)[1]
    unproven = runner.Ledger("succeeded", 2, 9, False, None, "response", "p@h:1:x")
    race = runner.Observation(
        runner.TRANSACTIONAL, runner.TOMBSTONE_RACE, 1, unproven, (agent,)
    )
    assert "no tombstone proved the held attempt absent" in runner.judge(race)[1]


def test_the_judge_flags_a_duplicate_and_a_naive_run_without_one() -> None:
    """The rules themselves, on made-up observations: red where it must be red."""
    ledger = runner.Ledger("succeeded", 2, 6, False, None, "response", "proxy@h:1:x")
    agent = answered_201("idempotent", replayed=True, history=("reset", "201 replayed"))
    duplicate = runner.Observation(
        "idempotent", "after_upstream_response", 2, ledger, (agent,)
    )
    assert runner.judge(duplicate)[1] == ["2 charges, expected exactly 1"]
    quiet_naive = runner.Observation("unsafe", runner.NAIVE, 1, None, (agent,))
    assert runner.judge(quiet_naive)[1]
    silent_unsafe = runner.Observation("unsafe", "sigkill-in-flight", 1, ledger, (agent,))
    problems = runner.judge(silent_unsafe)[1]
    assert "effect is succeeded, expected a visible outcome_unknown" in problems
    assert "the agent was not told the outcome is unknown" in problems
