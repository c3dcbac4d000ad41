"""An answer the target finishes on another request (``protocol.Follows``).

The dispatcher reads one answer per attempt; a target that closes it early and sends
the rest elsewhere (an MCP server polling its client, SEP-1699) would leave the
attempt "unknown" although the call ran and its result exists. Following it inside
the attempt keeps the contract's timeout the bound of the whole attempt, and the
followed answer is judged and recorded like any other.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

import aiohttp

from effect_broker.engine.messages import StoredRequest
from effect_broker.engine.protocol import Follows
from effect_broker.engine.upstream import AttemptResult, Delivery


async def followed(
    protocol: Follows,
    session: aiohttp.ClientSession,
    request: StoredRequest,
    attempt: AttemptResult,
    timeout: timedelta,
    max_body: int,
) -> AttemptResult:
    """``attempt`` with the answer the target finished elsewhere, if it did; an
    answer that was cut, too long or never came is left as it is."""
    response = attempt.response
    if (
        attempt.delivery is not Delivery.ANSWERED
        or response is None
        or attempt.detail
        or attempt.overflow is not None
        or attempt.live is not None
    ):
        return attempt
    started = time.perf_counter()
    found = await protocol.follow(
        session,
        request,
        response,
        within=timeout.total_seconds() - attempt.elapsed,
        max_body=max_body,
    )
    if found is None:
        return attempt
    whole, detail = found
    return replace(
        attempt,
        response=whole,
        detail=detail,
        elapsed=attempt.elapsed + time.perf_counter() - started,
    )
