"""Resolution words that cannot be misread, decided without I/O.

``did_not_happen`` (proof) and ``abandoned`` (it may have happened) both settle as
failed_final, but what the agent's retry is told differs, and the old ``failed`` is
read as ``abandoned`` because it never required proof.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from effect_broker.answers import MCP, as_jsonrpc, operator_answer
from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.resolution import (
    CONSEQUENCES,
    Resolution,
    ResolutionRequest,
    permitted,
    plan,
    read_operator_receipt,
)
from effect_broker.mcp.render import error_code
from effect_broker.models import Effect, EffectStatus, SafetyClass

S, C = EffectStatus, SafetyClass


def effect(safety: SafetyClass, status: EffectStatus = S.OUTCOME_UNKNOWN) -> Effect:
    now = datetime.now(UTC)
    fields: dict[str, Any] = {name: None for name in Effect.__dataclass_fields__}
    fields.update(
        effect_id=uuid.uuid4(),
        tenant_id="t",
        operation_key="k",
        safety=safety,
        status=status,
        attempts=1,
        version=3,
        created_at=now,
        updated_at=now,
        request_preview={},
    )
    return Effect(**fields)


def resolved(safety: SafetyClass, resolution: Resolution) -> StoredResponse:
    request = ResolutionRequest(resolution, "why", {"checked": "logs"}, None)
    receipt = plan(effect(safety), request).receipt
    assert receipt is not None
    return receipt


@pytest.mark.parametrize(
    ("safety", "offered"),
    [
        (C.UNSAFE, ["succeeded", "did_not_happen", "abandoned"]),
        (C.IDEMPOTENT, ["succeeded", "not_committed", "did_not_happen", "abandoned"]),
        (C.RECONCILABLE, ["succeeded", "not_committed", "did_not_happen", "abandoned"]),
        (C.TRANSACTIONAL, ["succeeded", "did_not_happen", "abandoned"]),
    ],
)
def test_the_choices_offered_are_exactly_what_the_contract_permits(
    safety: SafetyClass, offered: list[str]
) -> None:
    assert [r.value for r in permitted(effect(safety))] == offered
    assert permitted(effect(safety, S.SUCCEEDED)) == ()
    assert permitted(effect(safety, S.DISPATCHING)) == ()


def test_both_ways_to_give_up_settle_as_failed_final_with_their_own_word() -> None:
    for word in (Resolution.DID_NOT_HAPPEN, Resolution.ABANDONED):
        receipt = resolved(C.UNSAFE, word)
        assert receipt.status == 422
        assert json.loads(receipt.body)["resolution"] == word.value
        assert read_operator_receipt(receipt).resolution is word


def test_an_old_failed_receipt_is_read_as_abandoned() -> None:
    """Receipts written before the split say ``failed``; they never required proof."""
    body = {"resolved_by": "operator", "resolution": "failed", "reason": "r"}
    old = StoredResponse(422, "Unprocessable Content", [], json.dumps(body).encode())

    verdict = read_operator_receipt(old)

    assert verdict.resolution is Resolution.ABANDONED
    assert not verdict.happened and not verdict.proven_absent


def test_every_consequence_says_what_the_agent_is_told() -> None:
    assert (
        "retry with the same Operation-Key will get this receipt"
        in CONSEQUENCES[Resolution.SUCCEEDED]
    )
    assert (
        "told it did not happen: it may send it again"
        in CONSEQUENCES[Resolution.DID_NOT_HAPPEN]
    )
    assert "told it may have happened" in CONSEQUENCES[Resolution.ABANDONED]


@pytest.mark.parametrize(
    ("word", "says", "never"),
    [
        (Resolution.DID_NOT_HAPPEN, "proved this tool call did not happen", "may have"),
        (Resolution.ABANDONED, "it may have happened", "did not happen"),
    ],
)
def test_the_mcp_answer_uses_the_same_words(
    word: Resolution, says: str, never: str
) -> None:
    made = effect(C.UNSAFE, S.FAILED_FINAL)

    table = operator_answer(made, resolved(C.UNSAFE, word), MCP)
    answer = as_jsonrpc(table, 7, error_code(table.error))

    assert answer.text is not None
    message = json.loads(answer.text)["error"]["data"]["message"]
    assert says in message
    assert never not in message.split(". The operator's reason")[0]


def test_the_mcp_management_server_uses_the_same_words() -> None:
    from effect_broker.mcp.management import INSTRUCTIONS

    for word in Resolution:
        assert word.value in INSTRUCTIONS
    assert "failed" not in INSTRUCTIONS.replace("failed_final", "")
