"""What a transactional target's answers prove: the attempt's own answer, the kit's
lookup and its tombstone, read strictly (pure, table-tested).

Only the kit's exact document about the attempt key asked for, with the status the
protocol gives it, proves anything; every other answer is "unknown", which never sends.
"""

from __future__ import annotations

import json
import random

import pytest

from effect_broker.engine.lookup import (
    Finding,
    read_lookup,
    read_tombstone,
    status_after_transactional_answer,
)
from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.outcomes import next_look_when_unknown
from effect_broker.models import EffectStatus as S
from effect_broker.models import SafetyClass
from effect_broker.target.protocol import (
    AttemptReport,
    AttemptState,
    StoredAnswer,
    attempt_key,
)

KEY = attempt_key("downstream-key-of-the-effect", 1)
OTHER = attempt_key("downstream-key-of-the-effect", 2)
AT = "2026-12-01T12:00:00.123456+00:00"
ANSWER = StoredAnswer(201, {"Content-Type": "application/json"}, b'{"id": "e-1"}')


def doc(kind: AttemptState, *, key: str = KEY, **fields: object) -> bytes:
    answer = ANSWER if kind is AttemptState.COMMITTED else None
    at = None if kind is AttemptState.ABSENT else AT
    document = AttemptReport(key, kind, at, answer).to_json()
    document.update(fields)
    return json.dumps(document).encode()


COMMITTED, TOMBSTONED, ABSENT = (
    doc(AttemptState.COMMITTED),
    doc(AttemptState.TOMBSTONED),
    doc(AttemptState.ABSENT),
)
# Answers that are not the kit's document about KEY: each proves nothing.
NOT_THE_KIT = [
    b"",
    b"Not Found",
    b'{"error": "not found"}',
    b"[]",
    doc(AttemptState.ABSENT, key=OTHER),
    doc(AttemptState.TOMBSTONED, protocol="effect-broker-target/0"),
    doc(AttemptState.TOMBSTONED, state="gone"),
    doc(AttemptState.COMMITTED, response={"status": 201, "headers": {}, "body": "!"}),
    doc(AttemptState.COMMITTED, response=None),
    b"\xff\xfe",
]


def response(status: int, body: bytes = b"") -> StoredResponse:
    return StoredResponse(status, "", [], body)


# --- the attempt's own answer ---------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b"", S.SUCCEEDED),
        (201, b"", S.SUCCEEDED),
        (303, b"", S.SUCCEEDED),
        (400, b"", S.FAILED_FINAL),
        (404, b"", S.FAILED_FINAL),
        (409, b'{"error": "duplicate invoice number"}', S.FAILED_FINAL),
        (422, b"", S.FAILED_FINAL),
        # The kit refused this attempt: its key's row is there (a tombstone).
        (409, TOMBSTONED, S.OUTCOME_UNKNOWN),
        (409, COMMITTED, S.OUTCOME_UNKNOWN),
        # A kit document about another attempt is the application's conflict.
        (409, doc(AttemptState.TOMBSTONED, key=OTHER), S.FAILED_FINAL),
        # Nothing that needs a guess: the lookup proves it.
        (408, b"", S.OUTCOME_UNKNOWN),
        (429, b"", S.OUTCOME_UNKNOWN),
        (500, b"", S.OUTCOME_UNKNOWN),
        (502, b"", S.OUTCOME_UNKNOWN),
        (503, b"", S.OUTCOME_UNKNOWN),
        (504, b"", S.OUTCOME_UNKNOWN),
    ],
)
def test_what_an_attempts_answer_proves(status: int, body: bytes, expected: S) -> None:
    assert status_after_transactional_answer(response(status, body), KEY) is expected


def test_an_unknown_transactional_effect_is_due_for_its_lookup_at_once() -> None:
    delay = next_look_when_unknown(
        SafetyClass.TRANSACTIONAL, 3, None, rng=random.Random()
    )
    assert delay is not None and delay.total_seconds() == 0


# --- the lookup -------------------------------------------------------------------------


def test_a_committed_lookup_gives_back_the_attempts_answer() -> None:
    found = read_lookup(200, COMMITTED, KEY)
    assert found.finding is Finding.COMMITTED
    assert found.at == AT
    assert found.response is not None
    assert (found.response.status, found.response.body) == (201, b'{"id": "e-1"}')
    assert ("Content-Type", "application/json") in found.response.headers
    assert found.response.reason == "Created"


@pytest.mark.parametrize(
    ("status", "body", "finding"),
    [
        (200, TOMBSTONED, Finding.TOMBSTONED),
        (404, ABSENT, Finding.ABSENT),
        # The status and the document must agree, or it is not the protocol talking.
        (404, COMMITTED, Finding.UNKNOWN),
        (404, TOMBSTONED, Finding.UNKNOWN),
        (200, ABSENT, Finding.UNKNOWN),
        (201, COMMITTED, Finding.UNKNOWN),
        (401, ABSENT, Finding.UNKNOWN),
        (503, ABSENT, Finding.UNKNOWN),
        (500, b"", Finding.UNKNOWN),
        (401, b'{"error": "bad secret"}', Finding.UNKNOWN),
    ],
)
def test_what_a_lookup_proves(status: int, body: bytes, finding: Finding) -> None:
    assert read_lookup(status, body, KEY).finding is finding


@pytest.mark.parametrize("body", NOT_THE_KIT)
@pytest.mark.parametrize("status", [200, 404])
def test_a_lookup_answer_that_is_not_the_kits_document_proves_nothing(
    status: int, body: bytes
) -> None:
    """A plain 404 from a server without the kit is never taken as 'absent'."""
    answer = read_lookup(status, body, KEY)
    assert answer.finding is Finding.UNKNOWN
    assert answer.detail


# --- the tombstone ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "finding", "written"),
    [
        (201, TOMBSTONED, Finding.TOMBSTONED, True),
        (200, TOMBSTONED, Finding.TOMBSTONED, False),
        (409, COMMITTED, Finding.COMMITTED, False),
        # Disagreeing status and document: no proof.
        (201, COMMITTED, Finding.UNKNOWN, False),
        (200, COMMITTED, Finding.UNKNOWN, False),
        (409, TOMBSTONED, Finding.UNKNOWN, False),
        (201, ABSENT, Finding.UNKNOWN, False),
        (404, ABSENT, Finding.UNKNOWN, False),
        (401, TOMBSTONED, Finding.UNKNOWN, False),
        (503, b"", Finding.UNKNOWN, False),
    ],
)
def test_what_a_tombstone_proves(
    status: int, body: bytes, finding: Finding, written: bool
) -> None:
    answer = read_tombstone(status, body, KEY)
    assert (answer.finding, answer.written) == (finding, written)
    if finding is Finding.TOMBSTONED:
        assert answer.at == AT
    if finding is Finding.COMMITTED:
        assert answer.response is not None and answer.response.status == 201


@pytest.mark.parametrize("body", NOT_THE_KIT)
@pytest.mark.parametrize("status", [200, 201, 409])
def test_a_tombstone_answer_that_is_not_the_kits_document_proves_nothing(
    status: int, body: bytes
) -> None:
    assert read_tombstone(status, body, KEY).finding is Finding.UNKNOWN
