"""The published admin schema against the live admin API: generated and real traffic.

``/openapi.json`` is generated from the models the handlers use; these tests check the
promise from the outside. schemathesis generates requests from the document (valid and
invalid, then stateful sequences that follow the links from the list to one effect)
against a real admin port over a real ledger holding effects in every status; and real
answers to the requests an operator makes are validated against the document.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import jsonschema_rs
import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

from effect_broker.models import EffectStatus
from tests.integration.admin_support import (
    IDEMPOTENT,
    RECONCILABLE,
    TOKEN,
    UNSAFE,
    Admin,
    admin_broker,
    send,
    settled,
    unknown,
)
from tests.integration.harness import PROBLEM_JSON, Answer, arm_faults


async def effects_in_every_status(admin: Admin) -> dict[str, str]:
    """One effect per status an operator meets, made by real traffic; ids by status."""
    broker = admin.broker
    made = {"succeeded": await settled(broker, IDEMPOTENT, "order-1:charge")}
    unsafe, charge, ticket, review, gone = (
        *await unknown(broker, UNSAFE, "mail-1"),
        *await unknown(broker, IDEMPOTENT, "order-2:charge"),
        *await unknown(broker, RECONCILABLE, "ticket-1"),
        *await unknown(broker, IDEMPOTENT, "order-3:charge"),
        *await unknown(broker, UNSAFE, "mail-2"),
    )
    made |= {"outcome_unknown": unsafe, "idempotent_unknown": charge, "tickets": ticket}
    store = broker.state.store
    effect = await store.get("acme", UUID(review))
    await store.transition(
        effect, EffectStatus.MANUAL_REVIEW, kind="retention_expired", actor="test"
    )
    made["manual_review"] = review
    failed = await admin.post(
        f"/v1/effects/{gone}/resolve", {"resolution": "failed", "reason": "bounced"}
    )
    assert failed.json["status"] == "failed_final", failed
    made["failed_final"] = gone
    await arm_faults(broker, fail_before_commit=1)
    retryable = await send(broker, IDEMPOTENT, "order-4:charge")
    made["retryable"] = retryable.headers["Effect-Id"]
    return made


@pytest.fixture
async def populated(database_url: str, tmp_path: Path) -> AsyncIterator[Admin]:
    async with admin_broker(database_url, tmp_path) as admin:
        await effects_in_every_status(admin)
        yield admin


# ------------------------------------------------------------------ schemathesis


def run_schemathesis(url: str) -> tuple[list[str], set[tuple[str, int]]]:
    """Every phase and check schemathesis has, bounded; failures and statuses seen.

    Runs the engine behind ``st run`` (examples, coverage, fuzzing, stateful) with
    every check enabled. A fixed seed and small example counts keep it reproducible
    and well under a minute on two cores.
    """
    config = SchemathesisConfig.from_dict(
        {
            "headers": {"Authorization": f"Bearer {TOKEN}"},
            "seed": 20261201,
            "checks": {"enabled": True},
            "generation": {"max-examples": 25, "database": "none"},
            "phases": {
                "enabled": True,
                "stateful": {"enabled": True, "max-steps": 25},
            },
        }
    )
    schema = schemathesis.openapi.from_url(url + "/openapi.json", config=config)
    failures: list[str] = []
    seen: set[tuple[str, int]] = set()
    for event in from_schema(schema).execute():
        if isinstance(event, events.NonFatalError | events.FatalError):
            failures.append(f"engine error: {event!r}")
        if isinstance(event, events.PhaseFinished) and event.status == "failure":
            failures.append(f"phase {event.phase.name} failed")
        if not isinstance(event, events.ScenarioFinished):
            continue
        recorder = event.recorder
        for interaction in recorder.interactions.values():
            if interaction.response is not None:
                seen.add((str(event.phase), interaction.response.status_code))
        for case_id, checks in recorder.checks.items():
            for check in checks:
                if check.failure_info is not None:
                    case = recorder.cases[case_id].value
                    failures.append(
                        f"{check.name}: {case.method} {case.formatted_path} "
                        f"query={case.query} body={case.body!r}: "
                        f"{check.failure_info.failure.title}"
                    )
    return failures, seen


async def test_schemathesis_finds_nothing_against_the_live_admin_api(
    populated: Admin,
) -> None:
    # The loop keeps serving the admin port while schemathesis blocks its thread.
    failures, seen = await asyncio.to_thread(run_schemathesis, populated.url)

    assert failures == []
    statuses = {status for _, status in seen}
    assert {200, 202, 400, 401, 404, 409} <= statuses, seen
    assert all(status < 500 for status in statuses), seen
    assert any(phase == "stateful" and status == 200 for phase, status in seen), seen


# ------------------------------------------------------------------ real answers


def check_against_document(
    document: dict[str, Any], path: str, method: str, answer: Answer
) -> None:
    """``answer`` has a status the operation documents, its media type and its schema."""
    operation = document["paths"][path][method]
    assert str(answer.status) in operation["responses"], (path, answer)
    content = operation["responses"][str(answer.status)]["content"]
    [(media, body)] = content.items()
    assert answer.headers["Content-Type"].startswith(media), (path, answer)
    schema = {**body["schema"], "components": document["components"]}
    validator = jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
    validator.validate(answer.json)


async def test_real_answers_match_the_generated_document(populated: Admin) -> None:
    admin = populated
    document = (await admin.get("/openapi.json", token=None)).json
    ids = {effect["operation_key"]: effect["id"] for effect in await _all(admin)}
    charge, mail = ids["order-1:charge"], ids["mail-1"]
    one = "/v1/effects/{effect_id}"
    calls: list[tuple[str, str, Answer, int]] = [
        ("/v1/effects", "get", await admin.get("/v1/effects"), 200),
        (
            "/v1/effects",
            "get",
            await admin.get("/v1/effects", params=[("limit", "2")]),
            200,
        ),
        (one, "get", await admin.get(f"/v1/effects/{charge}"), 200),
        (
            one,
            "get",
            await admin.get(f"/v1/effects/{charge}", params=[("at_sequence", "2")]),
            200,
        ),
        (one + "/receipt", "get", await admin.get(f"/v1/effects/{charge}/receipt"), 200),
        (
            one + "/reconcile",
            "post",
            await admin.post(f"/v1/effects/{ids['order-2:charge']}/reconcile"),
            202,
        ),
        (
            one + "/resolve",
            "post",
            await admin.post(
                f"/v1/effects/{mail}/resolve",
                {
                    "resolution": "succeeded",
                    "reason": "seen in the target",
                    "evidence": {"checked_in": "target", "rows": [1, 2.5, None, True]},
                    "external_id": None,
                },
            ),
            200,
        ),
        (one + "/receipt", "get", await admin.get(f"/v1/effects/{mail}/receipt"), 200),
        # errors, each with the status the document promises
        (
            "/v1/effects",
            "get",
            await admin.get("/v1/effects", params=[("older_than", "1e300")]),
            400,
        ),
        (
            "/v1/effects",
            "get",
            await admin.get("/v1/effects", params=[("route", "a\x00b")]),
            400,
        ),
        ("/v1/effects", "get", await admin.get("/v1/effects", token=None), 401),
        (one, "get", await admin.get(f"/v1/effects/{uuid4()}"), 404),
        (
            one,
            "get",
            await admin.get(f"/v1/effects/{charge}", params=[("at_sequence", "99")]),
            404,
        ),
        (
            one + "/receipt",
            "get",
            await admin.get(f"/v1/effects/{ids['ticket-1']}/receipt"),
            404,
        ),
        (
            one + "/reconcile",
            "post",
            await admin.post(f"/v1/effects/{charge}/reconcile"),
            409,
        ),
        (
            one + "/resolve",
            "post",
            await admin.post(
                f"/v1/effects/{ids['ticket-1']}/resolve",
                {"resolution": "succeeded", "reason": "seen", "evidence": {}},
            ),
            400,
        ),
        (
            one + "/resolve",
            "post",
            await admin.post(
                f"/v1/effects/{charge}/resolve", {"resolution": "failed", "reason": "x"}
            ),
            409,
        ),
        ("/healthz", "get", await admin.get("/healthz", token=None), 200),
        ("/readyz", "get", await admin.get("/readyz", token=None), 200),
    ]

    for path, method, answer, status in calls:
        assert answer.status == status, (path, answer)
        check_against_document(document, path, method, answer)
    problems = [answer for *_, answer, _ in calls if answer.status >= 400]
    assert all(a.headers["Content-Type"].startswith(PROBLEM_JSON) for a in problems)


async def _all(admin: Admin) -> list[dict[str, Any]]:
    answer = await admin.get("/v1/effects", params=[("limit", "500")])
    assert answer.status == 200, answer
    effects: list[dict[str, Any]] = answer.json["effects"]
    return effects
