"""The claims of a transactional contract: the target kit's lookup and tombstone.

Checked with the proxy's own kit client (``engine.lookup.Kit``), so a verdict is what
the proxy would conclude. A committed attempt must be found by the lookup and must
refuse a tombstone; a tombstone for an attempt never sent must commit, and then the
attempt itself, arriving late under that key, must be refused. That last one is the
whole point of the kit: once the proxy holds the tombstone's proof of absence, it sends
the next attempt, and the late one must never commit beside it.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

import aiohttp

from effect_broker.conformance.sandbox import Sandbox
from effect_broker.conformance.verdicts import (
    KIT_BLOCKS_TOMBSTONED,
    KIT_FINDS_COMMITTED,
    KIT_REFUSES_TOMBSTONE_AFTER_COMMIT,
    ClaimResult,
    Verdict,
)
from effect_broker.engine.lookup import Finding, Kit, KitAnswer
from effect_broker.target.protocol import ATTEMPT_KEY_HEADER, attempt_key

MAX_KIT_BODY = 1 << 20


def _fresh_attempt_key() -> str:
    return attempt_key(secrets.token_urlsafe(32), 1)


def _unknown(claim: str, answer: KitAnswer) -> ClaimResult:
    return ClaimResult(
        claim,
        Verdict.NOT_CHECKABLE,
        f"no proof either way ({answer.detail}); is the kit's secret injected?",
    )


async def check_transactional(
    session: aiohttp.ClientSession, sandbox: Sandbox, origin: str
) -> list[ClaimResult]:
    kit = Kit(
        session=session,
        origin=origin,
        headers=list(sandbox.headers.items()),
        timeout=timedelta(seconds=sandbox.timeout),
        max_body=MAX_KIT_BODY,
    )
    return [
        *await _committed(session, sandbox, kit),
        await _tombstoned(session, sandbox, kit),
    ]


async def _committed(
    session: aiohttp.ClientSession, sandbox: Sandbox, kit: Kit
) -> list[ClaimResult]:
    key = _fresh_attempt_key()
    answer = await sandbox.send(session, ATTEMPT_KEY_HEADER, key)
    if not answer.ok:
        reason = f"the attempt was answered {answer.brief()}: fix the sample request"
        return [
            ClaimResult(claim, Verdict.NOT_CHECKABLE, reason)
            for claim in (KIT_FINDS_COMMITTED, KIT_REFUSES_TOMBSTONE_AFTER_COMMIT)
        ]
    found = await kit.look_up(key)
    if found.finding is Finding.COMMITTED:
        assert found.response is not None
        same = found.response.status == answer.status
        lookup = ClaimResult(
            KIT_FINDS_COMMITTED,
            Verdict.HELD if same else Verdict.BROKEN,
            f"committed at {found.at}, receipt {found.response.status}"
            + ("" if same else f", but the attempt was answered {answer.status}"),
        )
    elif found.finding is Finding.UNKNOWN:
        lookup = _unknown(KIT_FINDS_COMMITTED, found)
    else:
        lookup = ClaimResult(
            KIT_FINDS_COMMITTED,
            Verdict.BROKEN,
            f"the lookup says {found.finding} for an attempt answered {answer.status}",
        )
    refused = await kit.tombstone(key)
    if refused.finding is Finding.COMMITTED:
        tombstone = ClaimResult(
            KIT_REFUSES_TOMBSTONE_AFTER_COMMIT,
            Verdict.HELD,
            "refused with the attempt's receipt",
        )
    elif refused.finding is Finding.UNKNOWN:
        tombstone = _unknown(KIT_REFUSES_TOMBSTONE_AFTER_COMMIT, refused)
    else:
        tombstone = ClaimResult(
            KIT_REFUSES_TOMBSTONE_AFTER_COMMIT,
            Verdict.BROKEN,
            f"a tombstone over a committed attempt answered {refused.finding}: the "
            "proxy would send the effect again",
        )
    return [lookup, tombstone]


async def _tombstoned(
    session: aiohttp.ClientSession, sandbox: Sandbox, kit: Kit
) -> ClaimResult:
    key = _fresh_attempt_key()
    written = await kit.tombstone(key)
    if written.finding is Finding.UNKNOWN:
        return _unknown(KIT_BLOCKS_TOMBSTONED, written)
    if written.finding is not Finding.TOMBSTONED:
        return ClaimResult(
            KIT_BLOCKS_TOMBSTONED,
            Verdict.BROKEN,
            f"a tombstone for an attempt never sent answered {written.finding}",
        )
    late = await sandbox.send(session, ATTEMPT_KEY_HEADER, key)
    after = await kit.look_up(key)
    if late.ok or after.finding is Finding.COMMITTED:
        return ClaimResult(
            KIT_BLOCKS_TOMBSTONED,
            Verdict.BROKEN,
            f"the attempt under a tombstoned key was answered {late.brief()} and the "
            f"lookup now says {after.finding}: it committed after its proof of absence",
        )
    return ClaimResult(
        KIT_BLOCKS_TOMBSTONED,
        Verdict.HELD,
        f"tombstoned, then the late attempt was refused ({late.status}) and nothing "
        "committed",
    )
