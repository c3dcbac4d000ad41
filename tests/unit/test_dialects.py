"""The error envelopes of ``dialects``: pure translation of a problem document."""

from __future__ import annotations

from effect_broker.dialects import translate

DOCUMENT = {
    "type": "https://effect-broker.dev/problems/payload-mismatch",
    "title": "This Operation-Key was already used with a different payload.",
    "status": 422,
    "detail": "first used with a different payload",
    "message": "first used with a different payload",
    "effect_id": "e-1",
}


def test_problem_is_left_as_it_is() -> None:
    assert translate("problem", 422, DOCUMENT) == (422, DOCUMENT)


def test_stripe_gets_its_idempotency_error_as_a_400() -> None:
    status, body = translate("stripe", 422, DOCUMENT)
    assert status == 400
    error = body["error"]
    assert error["type"] == "idempotency_error"
    assert error["code"] == "payload_mismatch"
    assert error["message"] == DOCUMENT["message"]
    assert error["problem_type"] == DOCUMENT["type"]
    assert error["problem"] == DOCUMENT


def test_openai_keeps_the_status_and_names_server_errors() -> None:
    assert translate("openai", 422, DOCUMENT)[1]["error"]["type"] == (
        "invalid_request_error"
    )
    unknown = {**DOCUMENT, "type": "https://effect-broker.dev/problems/outcome-unknown"}
    status, body = translate("openai", 504, unknown)
    assert status == 504
    assert body["error"]["type"] == "server_error"
    assert body["error"]["code"] == "outcome_unknown"


def test_anthropic_wraps_the_error_in_its_typed_envelope() -> None:
    status, body = translate("anthropic", 404, DOCUMENT)
    assert status == 404
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
