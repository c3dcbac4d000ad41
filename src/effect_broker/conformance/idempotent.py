"""The claims of an idempotent contract, checked with real requests.

One effect per key: the same key and payload twice must come back as the same effect
(the same id in the answer, or the same answer). Drift: the same key with another
payload must be refused (a 4xx), or at least answered with the first effect, never a
second one. Retention: a key must still be remembered ``key_retention`` later, which a
run can only check for as long as it is allowed to wait.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import aiohttp

from effect_broker.config.contracts import Contract
from effect_broker.config.durations import format_duration
from effect_broker.conformance.sandbox import Answer, Sandbox
from effect_broker.conformance.verdicts import (
    DRIFT_REFUSED,
    KEY_RETENTION,
    SAME_KEY_ONE_EFFECT,
    ClaimResult,
    Verdict,
)


def same_effect(first: Answer, again: Answer, pointer: str) -> bool | None:
    """Whether two 2xx answers name one effect: by id when both carry one, else by
    the bytes of the answer. None when the second is not a 2xx (nothing to compare)."""
    if not again.ok:
        return None
    ids = first.effect_id(pointer), again.effect_id(pointer)
    if ids[0] is not None and ids[1] is not None:
        return ids[0] == ids[1]
    return first.body == again.body


async def check_idempotent(
    session: aiohttp.ClientSession,
    sandbox: Sandbox,
    contract: Contract,
    retention_wait: timedelta | None,
) -> list[ClaimResult]:
    header = contract.idempotency_header
    key = sandbox.fresh_key("idem")
    first = await sandbox.send(session, header, key)
    if not first.ok:
        reason = f"the first request was answered {first.brief()}: fix the sample request"
        return [
            ClaimResult(claim, Verdict.NOT_CHECKABLE, reason)
            for claim in (SAME_KEY_ONE_EFFECT, DRIFT_REFUSED, KEY_RETENTION)
        ]
    again = await sandbox.send(session, header, key)
    results = [_one_effect(first, again, sandbox.effect_id_pointer)]
    results.append(await _drift(session, sandbox, header, key, first))
    results.append(
        await _retention(session, sandbox, contract, key, first, retention_wait)
    )
    return results


def _one_effect(first: Answer, again: Answer, pointer: str) -> ClaimResult:
    same = same_effect(first, again, pointer)
    if same is None:
        return ClaimResult(
            SAME_KEY_ONE_EFFECT,
            Verdict.NOT_CHECKABLE,
            f"the repeat was answered {again.brief()}, not with the effect",
        )
    if same:
        shown = first.effect_id(pointer) or "the same answer"
        return ClaimResult(
            SAME_KEY_ONE_EFFECT, Verdict.HELD, f"both answers name {shown}"
        )
    return ClaimResult(
        SAME_KEY_ONE_EFFECT,
        Verdict.BROKEN,
        f"the same key made two effects ({first.effect_id(pointer)} and "
        f"{again.effect_id(pointer)}): the target ignores the key",
    )


async def _drift(
    session: aiohttp.ClientSession,
    sandbox: Sandbox,
    header: str | None,
    key: str,
    first: Answer,
) -> ClaimResult:
    drift = sandbox.request.drift_body
    if drift is None:
        return ClaimResult(
            DRIFT_REFUSED,
            Verdict.NOT_CHECKABLE,
            "no drifted payload to send (--drift-body)",
        )
    answer = await sandbox.send(session, header, key, drift)
    if 400 <= answer.status < 500:
        return ClaimResult(DRIFT_REFUSED, Verdict.HELD, f"refused: {answer.brief()}")
    same = same_effect(first, answer, sandbox.effect_id_pointer)
    if same:
        return ClaimResult(
            DRIFT_REFUSED,
            Verdict.HELD,
            "not refused, but answered with the first effect (no second one); the "
            "proxy refuses drift itself before sending",
        )
    if same is None:
        return ClaimResult(
            DRIFT_REFUSED, Verdict.NOT_CHECKABLE, f"answered {answer.brief()}"
        )
    return ClaimResult(
        DRIFT_REFUSED,
        Verdict.BROKEN,
        f"another payload under the same key made a new effect "
        f"({answer.effect_id(sandbox.effect_id_pointer)})",
    )


async def _retention(
    session: aiohttp.ClientSession,
    sandbox: Sandbox,
    contract: Contract,
    key: str,
    first: Answer,
    wait: timedelta | None,
) -> ClaimResult:
    claimed = contract.key_retention
    assert claimed is not None  # the loader's invariant for idempotent contracts
    if wait is None or wait <= timedelta(0):
        return ClaimResult(
            KEY_RETENTION,
            Verdict.NOT_CHECKABLE,
            f"the contract claims {format_duration(claimed)}; checking it takes that "
            "long: pass --retention-wait",
        )
    span = min(wait, claimed)
    # Waiting is the check itself: the key must outlive this span.
    await asyncio.sleep(span.total_seconds())
    again = await sandbox.send(session, contract.idempotency_header, key)
    same = same_effect(first, again, sandbox.effect_id_pointer)
    shown = format_duration(span)
    if same:
        partly = (
            "" if span >= claimed else f" (of the {format_duration(claimed)} claimed)"
        )
        return ClaimResult(
            KEY_RETENTION,
            Verdict.HELD,
            f"the key was still remembered after {shown}{partly}",
        )
    if same is None:
        return ClaimResult(
            KEY_RETENTION, Verdict.NOT_CHECKABLE, f"after {shown}: {again.brief()}"
        )
    return ClaimResult(
        KEY_RETENTION,
        Verdict.BROKEN,
        f"the key was forgotten within {shown} (a new effect, "
        f"{again.effect_id(sandbox.effect_id_pointer)}); the contract claims "
        f"{format_duration(claimed)}",
    )
