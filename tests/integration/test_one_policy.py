"""A client retry and the reconciler obey the same limits: one policy, end to end.

Before the engine, the request path resent an unknown idempotent effect and a retryable
one whatever their retry limit, while the reconciler refused; these tests pin the
shared rule down through real HTTP, a real ledger and the target's own table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from effect_broker.errors import StoreUnavailable
from tests.integration.harness import (
    PROBLEMS,
    Broker,
    arm_faults,
    ledger_rows,
    running_broker,
)
from tests.integration.proxy_support import charge, closed_port, post
from tests.routes_yaml import one_idempotent_route


def one_attempt_routes(upstream: str) -> str:
    return one_idempotent_route(upstream + "/idempotent", timeout="500ms", retry_limit=1)


async def test_a_client_retry_past_the_retry_limit_goes_to_review_not_upstream(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(
        database_url,
        tmp_path,
        routes=lambda target: one_attempt_routes(target),
    ) as broker:
        url = f"{broker.proxy_url}/payments/v1/charges"
        await arm_faults(broker, hang_after_commit=1)
        lost = await post(url, key="order-1:charge", body=charge("order-1"))
        assert lost.status == 504
        assert lost.headers["Effect-Status"] == "outcome_unknown"

        retry = await post(url, key="order-1:charge", body=charge("order-1"))

        assert retry.status == 409
        assert retry.problem["type"] == PROBLEMS + "outcome-unknown"
        assert retry.headers["Effect-Status"] == "manual_review"
        assert "retry limit" in retry.problem["detail"]
        assert retry.headers["Effect-Id"] == lost.headers["Effect-Id"]
        [effect] = await ledger_rows(database_url)
        assert (effect["status"], effect["attempts"]) == ("manual_review", 1)
        assert len(broker.charges("order-1")) == 1


async def test_a_client_retry_of_a_retryable_effect_past_its_limit_is_given_up(
    database_url: str, tmp_path: Path
) -> None:
    upstream = f"http://127.0.0.1:{closed_port()}"
    async with running_broker(
        database_url,
        tmp_path,
        routes=lambda _: one_attempt_routes(upstream),
    ) as broker:
        url = f"{broker.proxy_url}/payments/v1/charges"
        refused = await post(url, key="order-2:charge", body=charge("order-2"))
        assert refused.status == 502
        assert refused.headers["Effect-Status"] == "retryable"

        retry = await post(url, key="order-2:charge", body=charge("order-2"))
        again = await post(url, key="order-2:charge", body=charge("order-2"))

        assert retry.status == 502
        assert retry.headers["Effect-Status"] == "failed_final"
        assert b"nothing was sent" in retry.body
        assert (again.status, again.body) == (retry.status, retry.body)
        [effect] = await ledger_rows(database_url)
        assert (effect["status"], effect["attempts"]) == ("failed_final", 1)


async def test_a_ledger_failure_after_sending_is_outcome_unknown_not_nothing_sent(
    broker: Broker, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target has the charge; telling the client "nothing was sent" would invite a
    retry under a new key, and so a second charge."""

    async def ledger_down(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("the ledger database is unreachable: injected")

    monkeypatch.setattr(broker.state.store, "record_receipt", ledger_down)
    url = f"{broker.proxy_url}/payments/v1/charges"

    answer = await post(url, key="order-3:charge", body=charge("order-3"))

    assert answer.status == 502
    assert answer.problem["type"] == PROBLEMS + "outcome-unknown"
    assert "was sent" in answer.problem["detail"]
    assert answer.problem["effect_id"] == answer.headers["Effect-Id"]
    assert len(broker.charges("order-3")) == 1
    [effect] = await ledger_rows(database_url)
    assert effect["status"] == "dispatching"  # the reconciler settles it after the lease
