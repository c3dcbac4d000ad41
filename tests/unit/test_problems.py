"""One problem document for every error: the members and headers clients rely on."""

from __future__ import annotations

import json

import pytest

from effect_broker.errors import (
    EffectBrokerError,
    InFlight,
    OutcomeUnknown,
    PayloadMismatch,
    StoreUnavailable,
    UpstreamBusy,
    UpstreamUnreachable,
)
from effect_broker.problems import problem, problem_bytes


@pytest.mark.parametrize(
    ("error", "retry"),
    [
        (InFlight("busy"), "true"),
        (UpstreamUnreachable("refused"), "true"),
        (UpstreamBusy("full"), "true"),
        (StoreUnavailable("down"), "true"),
        (PayloadMismatch("drift"), "false"),
        (OutcomeUnknown("lost"), "false"),
        (EffectBrokerError("bug"), "false"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else value,
)
def test_sdks_are_told_whether_a_retry_can_help(
    error: EffectBrokerError, retry: str
) -> None:
    answer = problem(error)
    assert answer.headers["x-should-retry"] == retry
    assert answer.headers["Stripe-Should-Retry"] == retry


def test_the_caller_may_say_otherwise_for_one_answer() -> None:
    answer = problem(OutcomeUnknown("lost"), retry_helps=True)
    assert answer.headers["x-should-retry"] == "true"


def test_a_document_has_the_rfc_members_and_a_message() -> None:
    answer = problem(PayloadMismatch("use a new key"), message="short")
    document = json.loads(answer.body)
    assert document["type"] == "https://effect-broker.dev/problems/payload-mismatch"
    assert (document["status"], document["detail"]) == (422, "use a new key")
    assert document["message"] == "short"
    assert json.loads(problem(InFlight("wait")).body)["message"] == "wait"


def test_raw_bytes_are_a_complete_closing_http_message() -> None:
    raw = problem_bytes(UpstreamUnreachable("could not reach x"))
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 502 Bad Gateway"
    assert "Connection: close" in lines
    assert f"Content-Length: {len(body)}" in lines
    assert json.loads(body)["type"].endswith("/upstream-unreachable")
