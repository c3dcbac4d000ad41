"""The crash matrix, once per test run: the proof that the README's claims hold.

Real processes (the demo payment target, ``effect-broker serve``), killed at every
failpoint, SIGKILLed in flight, frozen past their lease, raced by ten agents, and a naive
client without the proxy; every cell on a database of its own on the session's server.
The runner judges each cell; this test also pins the rows a reader looks at first, so a
change in the rules themselves cannot quietly make the matrix weaker.
"""

from __future__ import annotations

from typing import Any

import pytest

from effect_broker.demo import crash_matrix as runner

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def matrix(server_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One full run, shared by every assertion below (it takes well under a minute)."""
    return runner.run_matrix(
        server_dsn, tmp_path_factory.mktemp("crash-matrix"), progress=print
    )


def cell(matrix: Any, mode: str, scenario: str) -> Any:
    (found,) = [c for c in matrix.cells if (c.mode, c.scenario) == (mode, scenario)]
    return found


def test_no_cell_breaks_its_rule(matrix: Any) -> None:
    assert matrix.violations == []
    assert len(matrix.cells) == len(runner.MODES) * len(runner.SCENARIOS)
    assert matrix.seconds < 180


@pytest.mark.parametrize("mode", runner.MODES)
def test_the_naive_client_double_charges(matrix: Any, mode: str) -> None:
    naive = cell(matrix, mode, runner.NAIVE)
    assert naive.observation.charges >= 2
    assert naive.verdict == "duplicate (expected: no proxy)"


@pytest.mark.parametrize("mode", ["idempotent", "reconcilable"])
@pytest.mark.parametrize("scenario", [s for s in runner.SCENARIOS if s != runner.NAIVE])
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


def test_the_judge_flags_a_duplicate_and_a_naive_run_without_one() -> None:
    """The rules themselves, on made-up observations: red where it must be red."""
    ledger = runner.Ledger("succeeded", 2, 6, False, None, "response", "proxy@h:1:x")
    agent = runner.agent.AgentResult(
        mode="idempotent",
        naive=False,
        outcome="answered",
        status=201,
        replayed=True,
        effect_status="succeeded",
        charge_id="ch_1",
        body="{}",
        attempts=2,
        history=("reset", "201 replayed"),
        seconds=1.0,
    )
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
