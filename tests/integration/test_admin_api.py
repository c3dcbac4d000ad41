"""The admin API end to end: effects made by real requests through the proxy, then
listed, inspected, reconciled and resolved over HTTP, on a fresh ledger per test.

Unknown outcomes come from the demo target's ``hang_after_commit`` fault: the charge is
committed but its answer never arrives, so the proxy times out (500 ms) and records
``outcome_unknown``. The target's own table says what really happened.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest

from effect_broker.admin.app import build_admin_app
from effect_broker.models import EffectStatus
from effect_broker.server import admin_state
from effect_broker.tenancy import new_api_key
from tests.integration.admin_support import (
    IDEMPOTENT,
    RECONCILABLE,
    TOKEN,
    UNSAFE,
    Admin,
    admin,
    admin_broker,
    send,
    settled,
    unknown,
)
from tests.integration.harness import (
    PROBLEMS,
    Answer,
    Broker,
    request,
)

__all__ = ["admin"]  # the fixture, used by name


def assert_problem(answer: Answer, status: int, problem_type: str) -> dict[str, Any]:
    assert answer.status == status, answer
    problem = answer.problem
    assert problem["type"] == PROBLEMS + problem_type, problem
    assert problem["status"] == status
    assert problem["title"] and problem["detail"]
    return problem


# --------------------------------------------------------------------------- auth


async def test_v1_needs_the_admin_token_and_probes_stay_open(admin: Admin) -> None:
    missing = await admin.get("/v1/effects", token=None)
    wrong = await admin.get("/v1/effects", token=TOKEN + "x")
    right = await admin.get("/v1/effects")

    assert_problem(missing, 401, "unauthorized")
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert_problem(wrong, 401, "unauthorized")
    assert 'error="invalid_token"' in wrong.headers["WWW-Authenticate"]
    assert right.status == 200
    assert right.json == {"effects": [], "next_cursor": None}
    for open_path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert (await admin.get(open_path, token=None)).status == 200, open_path


async def test_basic_credentials_are_not_a_bearer_token(admin: Admin) -> None:
    answer = await request(
        "GET",
        admin.url + "/v1/effects",
        headers={
            "Authorization": "Basic " + base64.b64encode(b"x:" + TOKEN.encode()).decode()
        },
    )

    assert answer.status == 401


async def test_a_sidecar_without_an_admin_token_tells_how_to_set_one(
    broker: Broker,
) -> None:
    """The harness's admin app has no token: every /v1 call is refused, helpfully."""
    unlocked = Admin(broker, broker.admin_url, "anything")

    answer = await unlocked.get("/v1/effects")

    problem = assert_problem(answer, 401, "admin-token-not-configured")
    assert "EFFECT_BROKER_ADMIN_TOKEN" in problem["detail"]
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await unlocked.get("/healthz", token=None)).status == 200


async def test_a_blank_token_setting_does_not_open_the_api(
    database_url: str, tmp_path: Path
) -> None:
    async with admin_broker(database_url, tmp_path, token="  ") as admin:
        answer = await admin.get("/v1/effects", token="  ")

    assert_problem(answer, 401, "admin-token-not-configured")


# --------------------------------------------------------------------------- list


async def test_list_filters_by_status_route_prefix_and_age(admin: Admin) -> None:
    broker = admin.broker
    charge_ids = [await settled(broker, IDEMPOTENT, f"order-{n}:charge") for n in (1, 2)]
    refund_id = await settled(broker, IDEMPOTENT, "refund-1")
    [mail_id] = await unknown(broker, UNSAFE, "mail-1")

    async def ids(*params: tuple[str, str]) -> set[str]:
        answer = await admin.get("/v1/effects", params=list(params))
        assert answer.status == 200, answer
        return {effect["id"] for effect in answer.json["effects"]}

    everything = {*charge_ids, refund_id, mail_id}
    assert await ids() == everything
    assert await ids(("status", "outcome_unknown")) == {mail_id}
    assert await ids(("status", "outcome_unknown"), ("status", "succeeded")) == everything
    assert await ids(("status", "manual_review")) == set()
    assert await ids(("route", UNSAFE)) == {mail_id}
    assert await ids(("operation_key_prefix", "order-")) == set(charge_ids)
    assert await ids(("older_than", "3600")) == set()
    assert await ids(("older_than", "0")) == everything

    [mail] = (await admin.get("/v1/effects", params=[("route", UNSAFE)])).json["effects"]
    assert mail["status"] == "outcome_unknown"
    assert mail["safety"] == "unsafe"
    assert mail["contract"] == "email.send@1"
    assert mail["operation_key"] == "mail-1"
    assert mail["request_preview"]["method"] == "POST"
    assert mail["last_error"]  # why the outcome is unknown


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ([("status", "lost")], "status"),
        ([("limit", "0")], "limit"),
        ([("limit", "501")], "limit"),
        ([("limit", "ten")], "limit"),
        ([("older_than", "-1")], "older_than"),
        ([("older_than", "soon")], "older_than"),
        ([("older_than", "nan")], "older_than"),
        ([("cursor", "not-a-cursor")], "cursor"),
        ([("route", "a"), ("route", "b")], "route"),
        ([("statuses", "succeeded")], "statuses"),
    ],
)
async def test_bad_list_parameters_are_named(
    admin: Admin, params: list[tuple[str, str]], parameter: str
) -> None:
    answer = await admin.get("/v1/effects", params=params)

    problem = assert_problem(answer, 400, "invalid-parameter")
    assert problem["parameter"] == parameter
    assert parameter in problem["detail"]


async def test_the_cursor_pages_through_every_effect_once_newest_first(
    admin: Admin,
) -> None:
    made = [await settled(admin.broker, IDEMPOTENT, f"page-{n}") for n in range(5)]

    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = [("limit", "2")] + ([("cursor", cursor)] if cursor else [])
        answer = await admin.get("/v1/effects", params=params)
        assert answer.status == 200, answer
        seen.extend(answer.json["effects"])
        pages += 1
        cursor = answer.json["next_cursor"]
        if cursor is None:
            break

    assert pages == 3
    assert [effect["id"] for effect in seen] == list(reversed(made))
    stamps = [effect["created_at"] for effect in seen]
    assert stamps == sorted(stamps, reverse=True)


# --------------------------------------------------------------------------- inspect


async def test_inspect_shows_history_attempts_chain_and_guarantee(admin: Admin) -> None:
    effect_id = await settled(admin.broker, IDEMPOTENT, "order-9:charge")

    effect = await admin.effect(effect_id)

    assert effect["id"] == effect_id
    assert effect["status"] == "succeeded"
    assert effect["contract"] == "payments.charge@1"
    assert effect["attempts"] == 1
    assert effect["chain_intact"] is True
    assert "one observable effect" in effect["guarantee"]
    history = effect["history"]
    assert [event["seq"] for event in history] == [1, 2, 3]
    assert [(event["from"], event["to"]) for event in history] == [
        (None, "prepared"),
        ("prepared", "dispatching"),
        ("dispatching", "succeeded"),
    ]
    assert history[0]["kind"] == "reserved"
    assert history[1]["details"] == {"attempt": 1}
    assert re.fullmatch(r"[0-9a-f]{64}", history[2]["digest"])
    assert history[2]["prev_digest"] == history[1]["digest"]
    assert history[0]["prev_digest"] == ""
    [attempt] = effect["attempt_log"]
    assert attempt["attempt_no"] == 1
    assert "at_sequence" not in effect


async def test_at_sequence_folds_the_history_to_that_event(admin: Admin) -> None:
    effect_id = await settled(admin.broker, IDEMPOTENT, "order-9:charge")

    first = await admin.get(f"/v1/effects/{effect_id}", params=[("at_sequence", "1")])
    second = await admin.get(f"/v1/effects/{effect_id}", params=[("at_sequence", "2")])

    assert first.json["at_sequence"]["status"] == "prepared"
    assert first.json["at_sequence"]["attempts"] == 0
    assert first.json["at_sequence"]["last_kind"] == "reserved"
    assert second.json["at_sequence"] == {
        "seq": 2,
        "status": "dispatching",
        "attempts": 1,
        "last_kind": "dispatch",
        "last_actor": second.json["history"][1]["actor"],
        "occurred_at": second.json["history"][1]["occurred_at"],
    }
    assert second.json["status"] == "succeeded"  # the effect itself is unchanged
    for bad in ("0", "-1", "two"):
        answer = await admin.get(
            f"/v1/effects/{effect_id}", params=[("at_sequence", bad)]
        )
        assert assert_problem(answer, 400, "invalid-parameter")["parameter"] == (
            "at_sequence"
        )
    # A well-formed sequence number this effect has no event for is not a malformed
    # request (the schema allows it) but a missing thing, like an unknown effect id.
    beyond = await admin.get(f"/v1/effects/{effect_id}", params=[("at_sequence", "4")])
    problem = assert_problem(beyond, 404, "no-such-event")
    assert problem["parameter"] == "at_sequence"
    assert "1 to 3" in problem["detail"]


async def test_a_tampered_event_breaks_the_chain(admin: Admin, database_url: str) -> None:
    effect_id = await settled(admin.broker, IDEMPOTENT, "order-9:charge")
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await conn.execute(
                "ALTER TABLE effect_events DISABLE TRIGGER effect_events_append_only"
            )
            await conn.execute(
                "UPDATE effect_events SET actor = 'someone-else' "
                "WHERE effect_id = $1 AND seq = 2",
                UUID(effect_id),
            )
            await conn.execute(
                "ALTER TABLE effect_events ENABLE TRIGGER effect_events_append_only"
            )
    finally:
        await conn.close()

    effect = await admin.effect(effect_id)

    assert effect["chain_intact"] is False


async def test_unknown_ids_and_non_uuids_are_404(admin: Admin) -> None:
    for path in (
        f"/v1/effects/{uuid4()}",
        "/v1/effects/not-a-uuid",
        f"/v1/effects/{uuid4()}/receipt",
    ):
        assert_problem(await admin.get(path), 404, "not-found")
    for path in (f"/v1/effects/{uuid4()}/reconcile", "/v1/effects/x/resolve"):
        answer = await admin.post(
            path,
            {"resolution": "failed", "reason": "gone"} if "resolve" in path else None,
        )
        assert_problem(answer, 404, "not-found")


async def test_unrouted_paths_and_methods_answer_problems(admin: Admin) -> None:
    assert_problem(await admin.get("/v1/nothing-here"), 404, "route-not-found")
    wrong_method = await admin.call("DELETE", "/v1/effects")
    assert_problem(wrong_method, 405, "method-not-allowed")
    assert "GET" in wrong_method.headers["Allow"]


# --------------------------------------------------------------------------- receipt


async def test_receipt_is_the_decrypted_answer_and_404_until_settled(
    admin: Admin,
) -> None:
    broker = admin.broker
    effect_id = await settled(broker, IDEMPOTENT, "order-5:charge")
    [mail_id] = await unknown(broker, UNSAFE, "mail-5")

    answer = await admin.get(f"/v1/effects/{effect_id}/receipt")
    none_yet = await admin.get(f"/v1/effects/{mail_id}/receipt")

    assert answer.status == 200, answer
    receipt = answer.json
    assert receipt["effect_id"] == effect_id
    assert receipt["status_code"] == 201
    assert receipt["source"] == "response"
    response = receipt["response"]
    assert response["status"] == 201
    assert json.loads(response["body_text"])["order_id"] == "order-5:charge"
    assert base64.b64decode(response["body_base64"]).decode() == response["body_text"]
    assert any(name.lower() == "content-type" for name, _ in response["headers"])
    assert "outcome_unknown" in assert_problem(none_yet, 404, "no-receipt")["detail"]


# --------------------------------------------------------------------------- reconcile


async def test_reconcile_now_makes_an_idempotent_unknown_effect_due_at_once(
    admin: Admin,
) -> None:
    [effect_id] = await unknown(admin.broker, IDEMPOTENT, "order-7:charge")
    before = await admin.effect(effect_id)
    assert before["due_at"] > before["updated_at"]  # backoff before the next look

    answer = await admin.post(f"/v1/effects/{effect_id}/reconcile")

    assert answer.status == 202, answer
    assert answer.json["status"] == "outcome_unknown"
    assert answer.json["due_at"] == answer.json["updated_at"]  # due now
    after = await admin.effect(effect_id)
    last = after["history"][-1]
    assert (last["kind"], last["actor"]) == ("rescheduled", "operator:acme")
    assert last["details"] == {"delay_seconds": 0}


async def test_reconcile_refuses_unsafe_unknown_and_settled_effects(
    admin: Admin,
) -> None:
    broker = admin.broker
    [mail_id] = await unknown(broker, UNSAFE, "mail-7")
    done_id = await settled(broker, IDEMPOTENT, "order-8:charge")
    before = await admin.effect(mail_id)

    unsafe = await admin.post(f"/v1/effects/{mail_id}/reconcile")
    done = await admin.post(f"/v1/effects/{done_id}/reconcile")

    problem = assert_problem(unsafe, 409, "not-reconcilable")
    assert "resolve" in problem["detail"]
    assert_problem(done, 409, "already-settled")
    assert (await admin.effect(mail_id))["version"] == before["version"]


# --------------------------------------------------------------------------- resolve


async def test_resolved_as_succeeded_a_retry_is_told_it_happened_never_a_fake_answer(
    admin: Admin,
) -> None:
    broker = admin.broker
    [effect_id] = await unknown(broker, UNSAFE, "mail-1")
    assert len(broker.charges("mail-1")) == 1  # the target did commit
    evidence = {"external_id": "ch_1", "checked_in": "target charges table"}

    answer = await admin.post(
        f"/v1/effects/{effect_id}/resolve",
        {
            "resolution": "succeeded",
            "reason": "found the charge in the target's table",
            "evidence": evidence,
            "external_id": "ch_1",
        },
    )
    retry = await send(broker, UNSAFE, "mail-1")

    assert answer.status == 200, answer
    assert answer.json["status"] == "succeeded"
    assert retry.status == 409  # no SDK may parse an operator's note as the target's
    assert retry.headers["Effect-Status"] == "succeeded"
    assert retry.headers["Effect-Id"] == effect_id
    assert retry.headers["x-should-retry"] == "false"
    problem = retry.problem
    assert problem["type"] == PROBLEMS + "resolved-by-operator"
    assert (problem["resolution"], problem["external_id"]) == ("succeeded", "ch_1")
    assert problem["evidence"] == evidence
    assert "this effect happened (ch_1)" in problem["message"]
    assert len(broker.charges("mail-1")) == 1  # the target was not called again
    effect = await admin.effect(effect_id)
    last = effect["history"][-1]
    assert last["kind"] == "operator_succeeded"
    assert last["actor"] == "operator:acme"
    assert last["details"]["reason"] == "found the charge in the target's table"
    assert last["details"]["evidence"] == evidence
    assert effect["chain_intact"] is True
    receipt = (await admin.get(f"/v1/effects/{effect_id}/receipt")).json
    assert (receipt["source"], receipt["external_id"]) == ("operator", "ch_1")


async def test_resolved_as_did_not_happen_a_retry_is_told_it_may_send_again(
    admin: Admin,
) -> None:
    broker = admin.broker
    [effect_id] = await unknown(broker, UNSAFE, "mail-2")
    evidence = {"checked_in": "smtp log", "found": "no message for mail-2"}

    answer = await admin.post(
        f"/v1/effects/{effect_id}/resolve",
        {"resolution": "did_not_happen", "reason": "never left", "evidence": evidence},
    )
    retry = await send(broker, UNSAFE, "mail-2")

    assert answer.json["status"] == "failed_final"
    assert retry.status == 409
    assert retry.headers["Effect-Status"] == "failed_final"
    problem = retry.problem
    assert (problem["resolution"], problem["reason"]) == ("did_not_happen", "never left")
    assert problem["evidence"] == evidence
    assert "proved this effect did not happen" in problem["message"]
    assert "may send it again under a new Operation-Key" in problem["message"]
    last = (await admin.effect(effect_id))["history"][-1]
    assert (last["kind"], last["to"]) == ("operator_did_not_happen", "failed_final")


async def test_did_not_happen_needs_proof(admin: Admin) -> None:
    [effect_id] = await unknown(admin.broker, UNSAFE, "mail-3")

    answer = await admin.post(
        f"/v1/effects/{effect_id}/resolve",
        {"resolution": "did_not_happen", "reason": "I think it bounced"},
    )

    problem = assert_problem(answer, 400, "invalid-resolution")
    assert problem["field"] == "evidence"
    assert "did_not_happen" in problem["detail"]
    assert (await admin.effect(effect_id))["status"] == "outcome_unknown"


@pytest.mark.parametrize("word", ["abandoned", "failed"])
async def test_abandoned_tells_the_retry_it_may_have_happened(
    admin: Admin, word: str
) -> None:
    """``failed`` (the old word, still accepted) never required proof, so it is
    recorded as abandoned: the agent must not be told that nothing happened."""
    broker = admin.broker
    [effect_id] = await unknown(broker, UNSAFE, f"mail-{word}")

    answer = await admin.post(
        f"/v1/effects/{effect_id}/resolve",
        {"resolution": word, "reason": "customer cancelled; do not send"},
    )
    retry = await send(broker, UNSAFE, f"mail-{word}")

    assert answer.json["status"] == "failed_final"
    problem = retry.problem
    assert (problem["resolution"], problem["reason"]) == (
        "abandoned",
        "customer cancelled; do not send",
    )
    assert "it may have happened" in problem["message"]
    assert "did not happen" not in problem["message"]
    assert "risks doing it twice" in problem["message"]
    assert len(broker.charges(f"mail-{word}")) == 1  # the target did commit it
    last = (await admin.effect(effect_id))["history"][-1]
    assert (last["kind"], last["to"]) == ("operator_abandoned", "failed_final")
    assert last["details"]["evidence"] == {}


async def test_not_committed_requeues_idempotent_and_reconcilable_effects(
    admin: Admin,
) -> None:
    broker = admin.broker
    [charge_id] = await unknown(broker, IDEMPOTENT, "order-3:charge")
    [ticket_id] = await unknown(broker, RECONCILABLE, "ticket-3")

    for effect_id in (charge_id, ticket_id):
        answer = await admin.post(
            f"/v1/effects/{effect_id}/resolve",
            {
                "resolution": "not_committed",
                "reason": "no such charge in the target",
                "evidence": {"checked_in": "target admin"},
            },
        )
        assert answer.status == 200, answer
        assert answer.json["status"] == "prepared"
        assert answer.json["due_at"] == answer.json["updated_at"]  # due now
        last = (await admin.effect(effect_id))["history"][-1]
        assert (last["kind"], last["actor"]) == (
            "operator_not_committed",
            "operator:acme",
        )
        assert last["details"]["reason"] == "no such charge in the target"
        assert last["details"]["evidence"] == {"checked_in": "target admin"}

    retry = await send(broker, IDEMPOTENT, "order-3:charge")
    assert retry.status == 201  # sent again with the same derived key
    assert len(broker.charges("order-3:charge")) == 1  # and the target deduplicated


async def test_not_committed_is_refused_for_an_unsafe_effect(admin: Admin) -> None:
    [effect_id] = await unknown(admin.broker, UNSAFE, "mail-4")
    before = await admin.effect(effect_id)

    answer = await admin.post(
        f"/v1/effects/{effect_id}/resolve",
        {"resolution": "not_committed", "reason": "I think it failed"},
    )

    problem = assert_problem(answer, 409, "requeue-refused")
    assert "did_not_happen" in problem["detail"]
    assert "abandoned" in problem["detail"]
    assert "new Operation-Key" in problem["detail"]
    after = await admin.effect(effect_id)
    assert (after["status"], after["version"]) == ("outcome_unknown", before["version"])
    assert len(admin.broker.charges("mail-4")) == 1


async def test_invalid_resolutions_are_400_and_change_nothing(admin: Admin) -> None:
    [effect_id] = await unknown(admin.broker, UNSAFE, "mail-6")
    before = await admin.effect(effect_id)
    path = f"/v1/effects/{effect_id}/resolve"
    cases: list[tuple[object, str]] = [
        ({"resolution": "succeeded", "reason": "seen it"}, "evidence"),
        ({"resolution": "succeeded", "reason": "seen it", "evidence": {}}, "evidence"),
        ({"resolution": "failed"}, "reason"),
        ({"resolution": "failed", "reason": "   "}, "reason"),
        ({"resolution": "failed", "reason": "x" * 1001}, "reason"),
        ({"resolution": "failed", "reason": "r", "evidence": "a string"}, "evidence"),
        ({"resolution": "retry", "reason": "please"}, "resolution"),
        ({"resolution": "failed", "reason": "r", "evidense": {}}, "evidense"),
        ({"resolution": "failed", "reason": "r", "external_id": 7}, "external_id"),
        (["failed"], "body"),
    ]

    for body, field in cases:
        answer = await admin.post(path, body)
        problem = assert_problem(answer, 400, "invalid-resolution")
        assert problem["field"] == field, (body, problem)
    not_json = await admin.call("POST", path, raw=b"{resolution: failed")
    assert assert_problem(not_json, 400, "invalid-resolution")["field"] == "body"

    after = await admin.effect(effect_id)
    assert (after["status"], after["version"]) == ("outcome_unknown", before["version"])


async def test_a_settled_effect_cannot_be_resolved(admin: Admin) -> None:
    effect_id = await settled(admin.broker, IDEMPOTENT, "order-4:charge")

    answer = await admin.post(
        f"/v1/effects/{effect_id}/resolve",
        {"resolution": "failed", "reason": "changed my mind"},
    )

    assert_problem(answer, 409, "already-settled")
    assert (await admin.effect(effect_id))["status"] == "succeeded"


async def test_manual_review_is_resolvable_but_not_reconcilable(admin: Admin) -> None:
    store = admin.broker.state.store
    [effect_id] = await unknown(admin.broker, IDEMPOTENT, "order-6:charge")
    effect = await store.get("acme", UUID(effect_id))
    await store.transition(
        effect, EffectStatus.MANUAL_REVIEW, kind="retention_expired", actor="test"
    )

    reconcile = await admin.post(f"/v1/effects/{effect_id}/reconcile")
    resolved = await admin.post(
        f"/v1/effects/{effect_id}/resolve",
        {
            "resolution": "succeeded",
            "reason": "charge visible in the target",
            "evidence": {"checked_in": "target"},
        },
    )

    assert "manual_review" in assert_problem(reconcile, 409, "not-reconcilable")["detail"]
    assert resolved.status == 200, resolved
    assert resolved.json["status"] == "succeeded"


# --------------------------------------------------------------------------- tenants


async def test_a_gateway_tenant_sees_only_its_own_effects(
    database_url: str, tmp_path: Path
) -> None:
    async with admin_broker(database_url, tmp_path, token=None, gateway=True) as admin:
        store = admin.broker.state.store
        keys = {}
        for tenant in ("acme", "globex"):
            key = new_api_key()
            await store.add_api_key(tenant, key.key_id, key.secret_hash)
            keys[tenant] = key.api_key
        proxy_auth = "Basic " + base64.b64encode(f"acme:{keys['acme']}".encode()).decode()
        answer = await send(
            admin.broker, IDEMPOTENT, "order-1:charge", proxy_auth=proxy_auth
        )
        assert answer.status == 201, answer
        effect_id = answer.headers["Effect-Id"]
        path = f"/v1/effects/{effect_id}"

        mine = await admin.get(path, token=keys["acme"])
        theirs = [
            await admin.get(path, token=keys["globex"]),
            await admin.get(path + "/receipt", token=keys["globex"]),
            await admin.post(path + "/reconcile", token=keys["globex"]),
            await admin.post(
                path + "/resolve",
                {"resolution": "failed", "reason": "not mine"},
                token=keys["globex"],
            ),
        ]
        listed = await admin.get("/v1/effects", token=keys["globex"])
        forged = await admin.get(path, token=keys["acme"] + "x")
        no_key = await admin.get(path, token="acme")

    assert mine.status == 200
    assert mine.json["tenant"] == "acme"
    for answer in theirs:
        assert_problem(answer, 404, "not-found")
    assert listed.json["effects"] == []
    assert_problem(forged, 401, "unauthorized")
    assert_problem(no_key, 401, "unauthorized")


# --------------------------------------------------------------------------- metrics


async def test_metrics_count_unknown_effects_until_they_are_resolved(
    admin: Admin,
) -> None:
    [effect_id] = await unknown(admin.broker, UNSAFE, "mail-9")
    line = 'effect_broker_unknown_effects{route="email",status="outcome_unknown"}'

    before = (await admin.get("/metrics", token=None)).body.decode()
    resolved = await admin.post(
        f"/v1/effects/{effect_id}/resolve",
        {"resolution": "failed", "reason": "bounced", "evidence": {"log": "smtp 550"}},
    )
    after = (await admin.get("/metrics", token=None)).body.decode()

    assert f"{line} 1.0" in before.splitlines()
    assert re.search(
        r'effect_broker_oldest_unknown_age_seconds\{route="email"\} \d', before
    )
    assert resolved.status == 200
    assert f"{line} 0.0" in after.splitlines()
    assert 'effect_broker_oldest_unknown_age_seconds{route="email"} 0.0' in after


# --------------------------------------------------------------------------- openapi


def _resolve_ref(document: dict[str, Any], ref: str) -> Any:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if "$ref" in node else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


async def test_openapi_documents_every_route_the_app_serves(admin: Admin) -> None:
    answer = await admin.get("/openapi.json", token=None)
    document = answer.json
    app = build_admin_app(admin_state(admin.broker.state), admin_token=TOKEN)

    served = {  # the console's HTML pages are for browsers, not API clients
        (route.resource.canonical, route.method.lower())
        for route in app.router.routes()
        if route.method != "HEAD"
        and route.resource is not None
        and not route.resource.canonical.startswith("/console")
    }
    documented = {
        (path, method) for path, item in document["paths"].items() for method in item
    }

    assert document["openapi"] == "3.1.0"
    assert served == documented
    for path, method in served:
        operation = document["paths"][path][method]
        bearer = operation["security"] == [{"bearerAuth": []}]
        assert bearer == path.startswith("/v1/"), path
        if bearer:
            assert "401" in operation["responses"], path
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert "Problem" in document["components"]["schemas"]
    for ref in _refs(document):
        assert _resolve_ref(document, ref) is not None, ref
