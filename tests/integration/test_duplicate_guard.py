"""duplicate_payload_window: a client that mints a fresh key per retry is caught.

The ledger stops a retry by its key; a model that makes up a new key for every retry
defeats that, and each retry becomes a charge. The guard compares the new key's
canonical request with recent effects on the same route: ``hold`` refuses it with 409
``suspected-duplicate`` naming the earlier effect, ``warn`` lets it through and counts
it. The demo target's own table says how many charges happened.
"""

from __future__ import annotations

import re
from pathlib import Path

from effect_broker.headers import REPEAT_HEADER, upstream_request_headers
from tests.integration.harness import PROBLEMS, Broker, request, running_broker

CHARGE = b'{"amount": 4200, "currency": "usd", "order_id": "order-42"}'
JSON = {"Content-Type": "application/json"}


def routes(window: str) -> object:
    def render(target: str) -> str:
        return f"""version: 1
contracts:
  - name: held
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 2s
    duplicate_payload_window: {{mode: hold, window: {window}}}
  - name: warned
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 2s
    duplicate_payload_window: {{mode: warn, window: {window}}}
routes:
  - name: held
    match: {{method: POST, path: /held/v1/charges}}
    strip_prefix: /held
    upstream: {target}/idempotent
    contract: held
  - name: warned
    match: {{method: POST, path: /warned/v1/charges}}
    strip_prefix: /warned
    upstream: {target}/idempotent
    contract: warned
"""

    return render


async def charge(broker: Broker, route: str, key: str, **headers: str) -> object:
    return await request(
        "POST",
        f"{broker.proxy_url}/{route}/v1/charges",
        headers={**JSON, "Operation-Key": key, **headers},
        data=CHARGE,
    )


async def test_hold_refuses_a_re_minted_key_and_names_the_earlier_effect(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, routes=routes("10m")) as broker:
        first = await charge(broker, "held", "model-attempt-1")
        # The model's retry, under a key it made up again: the same charge.
        second = await charge(broker, "held", "model-attempt-2")
        # A retry of the first key is a retry, never a suspect.
        again = await charge(broker, "held", "model-attempt-1")
        charged_before_declaring = len(broker.charges("order-42"))
        declared = await charge(
            broker, "held", "model-attempt-2", **{REPEAT_HEADER: "intentional"}
        )
        charged = len(broker.charges("order-42"))
    assert first.status == 201
    assert second.status == 409
    problem = second.problem
    assert problem["type"] == PROBLEMS + "suspected-duplicate"
    assert problem["earlier_effect_id"] == first.headers["Effect-Id"]
    assert problem["earlier_operation_key"] == "model-attempt-1"
    assert "Effect-Repeat: intentional" in problem["detail"]
    assert again.status == 201 and again.headers.get("Idempotent-Replayed") == "true"
    assert charged_before_declaring == 1
    assert declared.status == 201
    assert charged == 2  # declared intentional: a second, equal charge is meant


async def test_a_request_that_failed_for_good_may_be_tried_under_a_new_key(
    database_url: str, tmp_path: Path
) -> None:
    """A final failure did not happen; a new key is how it is tried again."""
    declined = b'{"amount": -1, "currency": "usd", "order_id": "order-42"}'
    async with running_broker(database_url, tmp_path, routes=routes("10m")) as broker:
        answers = [
            await request(
                "POST",
                f"{broker.proxy_url}/held/v1/charges",
                headers={**JSON, "Operation-Key": key},
                data=declined,
            )
            for key in ("try-1", "try-2")
        ]
    assert [a.status for a in answers] == [400, 400]
    assert answers[1].headers.get("Content-Type", "").startswith("application/json")
    assert answers[1].headers["Effect-Status"] == "failed_final"


async def test_warn_lets_it_through_and_counts_it(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, routes=routes("10m")) as broker:
        answers = [await charge(broker, "warned", f"re-minted-{n}") for n in range(3)]
        metrics = await request("GET", f"{broker.admin_url}/metrics")
        charged = len(broker.charges("order-42"))
    assert [a.status for a in answers] == [201, 201, 201]
    assert charged == 3
    found = re.search(
        r"^effect_broker_suspected_duplicates_total"
        r'\{action="warn",route="warned"\} (\S+)$',
        metrics.body.decode(),
        re.MULTILINE,
    )
    assert found is not None and float(found.group(1)) == 2.0


async def test_an_equal_request_outside_the_window_is_not_suspected(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, routes=routes("1ms")) as broker:
        first = await charge(broker, "held", "order-42:charge")
        later = await charge(broker, "held", "order-42:charge-again")
    assert (first.status, later.status) == (201, 201)


def test_the_repeat_declaration_is_never_forwarded() -> None:
    headers = upstream_request_headers(
        [("Effect-Repeat", "intentional"), ("X-Kept", "1")],
        operation_key_header="Operation-Key",
        downstream_header="Idempotency-Key",
        downstream_key="k",
        inject={},
    )
    assert ("X-Kept", "1") in headers
    assert all(name.lower() != "effect-repeat" for name, _ in headers)
