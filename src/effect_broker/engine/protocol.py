"""The one seam for targets that speak something other than plain HTTP over HTTP.

A JSON-RPC target (MCP) answers ``200 OK`` for a refused call and a completed one
alike, and may want the derived key inside the body rather than in a header. A route
may therefore come with a ``TargetProtocol`` (wired in by the composition root, keyed
by route name): the dispatcher asks it what an answer proves and how the derived key
is placed. Routes without one keep the HTTP rules of ``outcomes``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import aiohttp

from effect_broker.config.contracts import Contract
from effect_broker.engine.messages import StoredRequest, StoredResponse
from effect_broker.models import Effect, EffectStatus


class TargetProtocol(Protocol):
    def judge(
        self, response: StoredResponse, effect: Effect, contract: Contract
    ) -> EffectStatus:
        """The effect's next status given a complete answer to this attempt.

        RETRYABLE is honoured only while ``effect.attempts < contract.retry_limit``;
        past it the dispatcher stores the answer as final, so a protocol that must
        never store an answer as final returns OUTCOME_UNKNOWN there instead.
        """
        ...

    def with_key(
        self, request: StoredRequest, contract: Contract, downstream_key: str
    ) -> StoredRequest:
        """The outgoing request with the derived key placed where the target reads it
        (headers are already done); the stored request itself never holds it."""
        ...


# One answer's watch: given its content type and each chunk as it arrives, a reason to
# stop reading, or None to read on. The empty reason ``COMPLETE`` stops it too: the
# answer is whole though its stream is still open.
AnswerWatch = Callable[[str | None, bytes], str | None]
COMPLETE = ""


@runtime_checkable
class CutsShort(Protocol):
    """Optional, beside ``TargetProtocol``: a target whose answer may stop being one
    the proxy can wait for. An MCP server may, mid-call, send the client a request of
    its own (elicitation, sampling) on the call's stream and wait for the client's
    answer; a recorded call cannot relay it, so reading on would only wait for the
    timeout. A reason from the watch ends the read there: the answer so far is judged
    as the complete one, and the reason becomes the attempt's detail. The same server
    may also send its whole answer and keep the stream open: ``COMPLETE`` then ends
    the read with no detail, and the answer is judged at once."""

    def watch(self, request: StoredRequest) -> AnswerWatch:
        """A fresh watch for the answer to ``request`` (it may keep state across
        chunks)."""
        ...


@runtime_checkable
class Follows(Protocol):
    """Optional, beside ``TargetProtocol``: a target that may end an answer early and
    deliver the rest on another request. An MCP server may close a call's SSE stream
    after an event id (SEP-1699 polling) and send the result on a GET resumed with
    ``Last-Event-ID``; without following it the proxy would call a call that ran
    "unknown". The dispatcher hands it each complete answer, still inside the
    contract's timeout (``within`` seconds are left) and the receipt's size limit."""

    async def follow(
        self,
        session: aiohttp.ClientSession,
        request: StoredRequest,
        response: StoredResponse,
        *,
        within: float,
        max_body: int,
    ) -> tuple[StoredResponse, str] | None:
        """The whole answer and a detail for the attempt (empty when the answer is
        complete), or None when there is nothing to follow."""
        ...
