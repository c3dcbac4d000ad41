"""The explorer's pure parts: a seed's schedule, and the oracle's rules on made-up
evidence (a change that weakened a rule would have to change a test here too)."""

from __future__ import annotations

import json

import pytest

from effect_broker.demo import explorer
from effect_broker.demo.crash_matrix import MODES as MATRIX_MODES
from effect_broker.demo.explorer import Answer, Execution, LedgerRow, judge
from effect_broker.demo.explorer import schedule as schedule_module
from effect_broker.demo.explorer.relay import through, upstream_of


def plan(seed: int, kinds: tuple[str, ...] = explorer.FAULT_KINDS) -> explorer.Schedule:
    return explorer.make_schedule(
        seed, proxies=3, agents=6, ops=80, kinds=kinds, window=8.0
    )


def test_a_seed_gives_the_same_schedule_every_time() -> None:
    assert plan(11) == plan(11)
    assert plan(11).describe() == plan(11).describe()
    assert plan(11) != plan(12)


def test_the_schedule_spreads_operations_and_faults_over_the_window() -> None:
    schedule = plan(5)
    assert len(schedule.keys) == 80
    assert len(schedule.ops) >= 80  # twins: a second agent asks with the same key
    assert all(0 <= op.at <= 9.0 for op in schedule.ops)
    assert {op.agent for op in schedule.ops} == set(range(6))
    assert len(schedule.timed) == 8
    assert all(0 < fault.at <= 8.0 for fault in schedule.timed)
    assert all(fault.proxy is None or 0 <= fault.proxy < 3 for fault in schedule.faults)
    assert "reconcilable" in schedule.keys.values()


def test_within_the_lease_nothing_outlives_a_lease() -> None:
    for seed in range(20):
        schedule = plan(seed, explorer.WITHIN_LEASE)
        assert schedule.send_pause is None
        assert not {f.kind for f in schedule.faults} & explorer.OUTLIVE_LEASE
        frozen = [f for f in schedule.faults if f.kind in ("pause", "ledger-stall")]
        assert all(f.seconds <= 0.5 for f in frozen)  # well inside the 1.8 s lease


def test_a_send_pause_arms_one_proxy_and_outlives_the_lease() -> None:
    schedule = plan(3, (explorer.SEND_PAUSE,))
    assert schedule.timed == ()
    pause = schedule.send_pause
    assert pause is not None and pause.count >= 3 and pause.seconds > 1.8 + 0.5


def test_unknown_fault_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kinds"):
        plan(1, ("kill", "meteor"))


def charge(charge_id: str) -> str:
    return json.dumps({"id": charge_id, "amount": 100, "status": "succeeded"})


def answer(
    key: str, status: int | None, body: str | None = None, **more: object
) -> Answer:
    return Answer(key, 0, 0, 1.0, 2.0, status=status, body=body, **more)  # type: ignore[arg-type]


def row(key: str, status: str, safety: str, receipt: int | None = None) -> LedgerRow:
    return LedgerRow(key, status, safety, receipt, at_rest=True)


def test_one_execution_answered_and_replayed_the_same_is_fine() -> None:
    verdict = judge(
        {"k": "reconcilable"},
        [
            answer("k", 201, charge("ch_1")),
            answer("k", 201, charge("ch_1"), replayed=True),
        ],
        [Execution("k", "ch_1", 1.5)],
        {"k": row("k", "succeeded", "reconcilable", 201)},
    )
    assert verdict.ok, verdict.violations
    assert verdict.stats["executions"] == 1


def test_two_executions_for_one_key_are_a_violation() -> None:
    verdict = judge(
        {"k": "reconcilable"},
        [answer("k", 201, charge("ch_2"))],
        [Execution("k", "ch_1", 1.5), Execution("k", "ch_2", 3.0)],
        {"k": row("k", "succeeded", "reconcilable", 201)},
    )
    assert verdict.violations == [
        "k (reconcilable): 2 executions at the target, at most one is promised"
    ]
    assert verdict.stats["duplicates"] == 1


def test_unsafe_is_held_to_at_most_one_as_well() -> None:
    verdict = judge(
        {"u": "unsafe"},
        [],
        [Execution("u", "ch_1", 1.0), Execution("u", "ch_2", 2.0)],
        {},
    )
    assert not verdict.ok


def test_a_2xx_claims_an_execution_and_must_name_it() -> None:
    never = judge({"k": "idempotent"}, [answer("k", 201, charge("ch_1"))], [], {})
    assert never.violations == [
        "k (idempotent): answered 2xx, but the target never executed it"
    ]
    other = judge(
        {"k": "idempotent"},
        [answer("k", 201, charge("ch_9"))],
        [Execution("k", "ch_1", 1.0)],
        {},
    )
    assert "naming ch_9" in other.violations[0]


def test_a_replay_must_equal_the_first_answer() -> None:
    verdict = judge(
        {"k": "idempotent"},
        [answer("k", 201, charge("ch_1")), answer("k", 200, charge("ch_1"))],
        [Execution("k", "ch_1", 1.0)],
        {},
    )
    assert len(verdict.violations) == 1
    assert "is not the first" in verdict.violations[0]


def test_unknown_and_lost_answers_claim_nothing() -> None:
    unknown = answer("u", 409, "{}", problem="outcome-unknown")
    lost = answer("u", None, error="TimeoutError")
    for executions in ([], [Execution("u", "ch_1", 1.0)]):
        verdict = judge(
            {"u": "unsafe"},
            [lost, unknown],
            executions,
            {"u": row("u", "outcome_unknown", "unsafe")},
        )
        assert verdict.ok, verdict.violations
        assert verdict.stats["unsafe unknown"] == 1
        assert verdict.stats["unsafe unknown, executed"] == len(executions)


def test_a_2xx_receipt_in_the_ledger_claims_an_execution() -> None:
    verdict = judge({"k": "idempotent"}, [], [], {"k": row("k", "succeeded", "x", 201)})
    assert verdict.violations == [
        "k (idempotent): the ledger holds a 2xx receipt, the target no execution"
    ]


def test_an_execution_nobody_asked_for_is_a_violation() -> None:
    verdict = judge({}, [], [Execution("stray", "ch_1", 1.0)], {})
    assert not verdict.ok


def test_retry_rules_follow_real_agents() -> None:
    assert answer("k", None, error="TimeoutError").next_pause(1.0, 0.1) == 0.1
    assert answer("k", 503).next_pause(1.0, 0.1) == 0.1
    assert answer("k", 409, retry_after=0.5).next_pause(1.0, 0.1) == 0.5
    assert answer("k", 409, retry_after=9.0).next_pause(1.0, 0.1) == 1.0
    assert answer("k", 409, problem="outcome-unknown").next_pause(1.0, 0.1) is None
    assert answer("k", 201).next_pause(1.0, 0.1) is None
    assert answer("k", 422).next_pause(1.0, 0.1) is None


def test_the_relay_reaches_a_tcp_server_or_a_socket_directory() -> None:
    tcp = upstream_of("postgresql://postgres@127.0.0.1:5433/ledger")
    assert (tcp.host, tcp.port, tcp.socket) == ("127.0.0.1", 5433, None)
    unix = upstream_of("postgresql://postgres:@/postgres?host=/run/pg")
    assert unix.socket == "/run/pg/.s.PGSQL.5432"
    assert through("postgresql://postgres:@/ledger?host=/run/pg", 6000) == (
        "postgresql://postgres@127.0.0.1:6000/ledger"
    )
    assert through("postgresql://u:pw@db:5432/x?sslmode=disable", 7) == (
        "postgresql://u:pw@127.0.0.1:7/x?sslmode=disable"
    )


def test_the_schedule_draws_the_crash_matrix_modes() -> None:
    assert set(schedule_module.MODES) == set(MATRIX_MODES)
