"""The one table from the engine's outcomes to answers, as both adapters read it."""

from __future__ import annotations

import dataclasses
import json
import unicodedata
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from effect_broker.answers import (
    HTTP,
    MCP,
    SERVER_REQUEST_CUT,
    Answer,
    ReceiptCache,
    Relay,
    Words,
    answer_for,
    as_jsonrpc,
    as_problem,
    cached,
    failure_answer,
    key_problem,
)
from effect_broker.engine import (
    Busy,
    Conflict,
    NotSent,
    Outcome,
    Replayed,
    StoredResponse,
    Unknowable,
    Unknown,
)
from effect_broker.errors import (
    BodyTooLarge,
    ProxyAuthenticationRequired,
    RequestTimeout,
    StoreUnavailable,
    TooManyFailedCredentials,
)
from effect_broker.mcp.jsonrpc import NOT_SENT, OUTCOME_UNKNOWN
from effect_broker.mcp.render import error_code
from effect_broker.models import Effect, EffectStatus, SafetyClass

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EFFECT = Effect(
    effect_id=uuid.uuid4(), tenant_id="acme", operation_key="k", request_hash="h",
    route="charge", contract_name="c", contract_version="1",
    safety=SafetyClass.IDEMPOTENT, downstream_key="dk", status=EffectStatus.RETRYABLE,
    version=3, attempts=1, lease_owner=None, lease_expires_at=None, due_at=None,
    first_dispatched_at=NOW, retention_deadline=None, settlement_deadline=None,
    request_ciphertext=None, request_preview={}, last_error=None, created_at=NOW,
    updated_at=NOW,
)  # fmt: skip
WAIT = timedelta(seconds=3)
BOTH = pytest.mark.parametrize("words", [HTTP, MCP], ids=["http", "mcp"])


def problem_of(outcome: Outcome, words: Words) -> Answer:
    answer = answer_for(outcome, words)
    assert isinstance(answer, Answer), answer
    return answer


def document(answer: Answer) -> dict[str, object]:
    return dict(as_problem(answer).document or {})


@BOTH
@pytest.mark.parametrize(
    ("outcome", "slug", "status", "retry_helps"),
    [
        (NotSent(EFFECT, "queue full", WAIT, saturated=True), "upstream-busy", 503, True),
        (NotSent(EFFECT, "bad certificate", WAIT, tls=True), "upstream-tls", 502, False),
        (NotSent(EFFECT, "held", WAIT, withheld=True), "send-withheld", 503, True),
        (NotSent(EFFECT, "refused", WAIT), "upstream-unreachable", 502, True),
        (Busy(EFFECT, "in flight", WAIT), "in-flight", 409, True),
        (Conflict(EFFECT), "payload-mismatch", 422, False),
        (Unknown(EFFECT, Unknowable.TIMED_OUT, "timeout"), "outcome-unknown", 504, True),
        (Unknown(EFFECT, Unknowable.LOST, "reset"), "outcome-unknown", 502, True),
    ],
    ids=["saturated", "tls", "withheld", "unreachable", "busy", "conflict", "timeout",
         "lost"],
)  # fmt: skip
def test_each_outcome_has_one_problem_whichever_adapter_asks(
    words: Words, outcome: Outcome, slug: str, status: int, retry_helps: bool
) -> None:
    answer = problem_of(outcome, words)

    body = document(answer)
    assert str(body["type"]).endswith("/" + slug)
    assert body["status"] == status
    assert answer.helps is retry_helps
    assert as_problem(answer).headers["x-should-retry"] == str(retry_helps).lower()


def test_the_mcp_adapter_frames_a_saturated_target_as_its_own_problem() -> None:
    """MCP once answered a full queue and a failed certificate as "unreachable"."""
    for outcome, slug in [
        (NotSent(EFFECT, "queue full", WAIT, saturated=True), "upstream-busy"),
        (NotSent(EFFECT, "bad certificate", WAIT, tls=True), "upstream-tls"),
    ]:
        answer = problem_of(outcome, MCP)
        response = as_jsonrpc(answer, 7, error_code(answer.error))
        assert response.status == 200
        assert response.body is not None
        error = json.loads(bytes(response.body))["error"]  # type: ignore[arg-type]
        assert error["code"] == NOT_SENT
        assert error["data"]["type"].endswith("/" + slug)
        assert "the same operation key" in error["data"]["detail"]


def test_wording_follows_the_adapter_and_the_decision_does_not() -> None:
    outcome = NotSent(EFFECT, "refused", WAIT)

    http, mcp = problem_of(outcome, HTTP), problem_of(outcome, MCP)

    assert "the same Operation-Key is safe" in http.error.message
    assert "the same operation key is safe" in mcp.error.message
    assert (http.code, http.helps, http.retry_after) == (
        mcp.code,
        mcp.helps,
        mcp.retry_after,
    )


def test_an_unsafe_effect_whose_answer_was_lost_is_not_worth_a_retry() -> None:
    unsafe = dataclasses.replace(EFFECT, safety=SafetyClass.UNSAFE)

    answer = problem_of(Unknown(unsafe, Unknowable.LOST, "reset"), HTTP)

    assert answer.helps is False
    assert "an operator resolves it" in answer.error.message


def test_a_call_cut_at_a_server_question_is_not_worth_a_retry() -> None:
    outcome = Unknown(EFFECT, Unknowable.LOST, SERVER_REQUEST_CUT + "elicitation/create")

    answer = problem_of(outcome, MCP)

    assert answer.helps is False
    assert "elicitation/create" in answer.error.message
    assert error_code(answer.error) == OUTCOME_UNKNOWN


def test_a_replayed_receipt_is_relayed_as_the_target_gave_it() -> None:
    response = StoredResponse(201, "Created", [], b"{}")

    relay = answer_for(Replayed(EFFECT, response), MCP)

    assert relay == Relay(response, EFFECT, replayed=True)


def test_a_settling_effect_says_when_to_look_again() -> None:
    outcome = Unknown(EFFECT, Unknowable.SETTLING, "settling", WAIT)

    answer = problem_of(outcome, HTTP)

    assert answer.helps is True
    assert as_problem(answer).headers["Retry-After"] == "3"


@pytest.mark.parametrize(
    ("error", "header", "value"),
    [
        (ProxyAuthenticationRequired("who?"), "Proxy-Authenticate", "Basic"),
        (TooManyFailedCredentials("slow down", WAIT), "Retry-After", "3"),
    ],
    ids=["407-challenge", "429-retry-after"],
)
def test_every_front_gives_a_refusal_what_its_status_requires(
    error: Exception, header: str, value: str
) -> None:
    answer = failure_answer(error)

    assert answer is not None
    assert as_problem(answer).headers[header].startswith(value)


def test_failures_never_show_an_exception_text_not_written_for_a_client() -> None:
    outage = failure_answer(StoreUnavailable("could not connect to 10.0.0.7:5432"))
    bug = failure_answer(KeyError("secret"))

    assert outage is not None and "10.0.0.7" not in outage.error.message
    assert bug is not None and "secret" not in bug.error.message
    assert as_problem(bug).status == 500


def test_a_timed_out_body_and_a_parse_error_close_the_connection() -> None:
    timeout = failure_answer(RequestTimeout("slow"))
    malformed = failure_answer(ValueError("bad bytes \xff"), status=400)

    assert timeout is not None and timeout.close
    assert malformed is not None and malformed.close and malformed.code == 400
    assert "bad bytes" not in malformed.error.message
    too_large = failure_answer(BodyTooLarge())
    assert too_large is not None and too_large.code == 413 and not too_large.close


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("k" * 256, "256 characters long"),
        ("a\tb", "control characters"),
        ("a\udcffb", "valid UTF-8"),
    ],
    ids=["long", "control", "undecodable"],
)
def test_one_rule_for_a_key_from_a_header_or_a_tool_argument(
    key: str, problem: str
) -> None:
    for name in ("Operation-Key", "operation_key"):
        found = key_problem(key, name)
        assert found is not None and found.startswith(name) and problem in found
    assert key_problem("order-42:charge", "Operation-Key") is None


def test_a_key_is_refused_for_exactly_the_control_characters_of_unicode() -> None:
    """Every code point of category Cc, and no other, makes a key a problem."""
    for point in range(0x110000):
        if 0xD800 <= point <= 0xDFFF:
            continue  # lone surrogates are refused as undecodable, tested above
        char = chr(point)
        control = unicodedata.category(char) == "Cc"
        assert (key_problem(f"a{char}b", "Operation-Key") is not None) == control, point


def test_a_cached_receipt_answers_a_retry_and_refuses_another_payload() -> None:
    from effect_broker.answers import SettledReplay, prunable_at

    settled = dataclasses.replace(EFFECT, status=EffectStatus.SUCCEEDED)
    receipts = ReceiptCache(max_bytes=100_000)
    response = StoredResponse(200, "OK", [], b"{}")
    receipts.put(
        SettledReplay(settled, response, Replayed(settled, response).source,
                      prunable_at(settled, timedelta(days=3650)))
    )  # fmt: skip

    assert cached(receipts, "acme", "k", "h") == Replayed(settled, response)
    assert cached(receipts, "acme", "k", "other") == Conflict(settled)
