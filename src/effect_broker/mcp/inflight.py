"""The recorded tool calls running right now, so their cancellations can be withheld.

On the 2025-11-25 revision a client that gives up on a call (its own timeout, or its
caller cancelled) posts ``notifications/cancelled`` naming the call's JSON-RPC id, and
the server may then stop the tool halfway: a recorded effect would be left unknown
although nothing had gone wrong. The product's rule is that a client going away does
not cancel the upstream call, so the proxy answers such a notification itself when it
names a call it is recording. To tell those from cancellations of read-only or
pass-through calls (which may be cancelled), it needs to know which calls are in
flight, by session and id: that is this table, for the calls of this process. The
ledger keeps the same keys (``call_key``) for every worker, since a cancellation may
reach another worker than the call did. No I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass

from effect_broker.mcp.jsonrpc import Message, RequestId, correlated_id

CANCELLED = "notifications/cancelled"
# Far more recorded calls than a proxy runs at once; past it, see ``InFlightCalls``.
DEFAULT_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class CallScope:
    """Where a JSON-RPC id is unique: a client's ids are its own per session (and,
    on the sessionless revision, per nothing, so ``session`` is None there). The
    tenant and route keep two upstreams that happen to mint one session id apart."""

    tenant: str
    route: str
    session: str | None


class InFlightCalls:
    """The running recorded calls, each held until its engine task ends (not until its
    client leaves: the call goes on without it).

    Memory is bounded: an entry is a fixed-size digest, whatever the length of the
    session id or the JSON-RPC id, and at most ``limit`` are kept. Calls beyond that
    are counted instead, and while any is running every cancellation is withheld:
    withholding one that did not need it only lets a read-only call run to its end,
    whereas forwarding the wrong one could leave an effect unknown.
    """

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._limit = limit
        self._calls: Counter[bytes] = Counter()  # one id may run twice (two clients)
        self._untracked = 0

    def begin(self, scope: CallScope, request_id: RequestId) -> bytes | None:
        """Note a call as running; the returned token is given back to ``end``."""
        key = call_key(scope, request_id)
        if key in self._calls or len(self._calls) < self._limit:
            self._calls[key] += 1
            return key
        self._untracked += 1
        return None

    def end(self, token: bytes | None) -> None:
        if token is None:
            self._untracked -= 1
            return
        self._calls[token] -= 1
        if self._calls[token] <= 0:
            del self._calls[token]

    def running(self, scope: CallScope, request_id: RequestId) -> bool:
        return self._untracked > 0 or call_key(scope, request_id) in self._calls

    def __len__(self) -> int:
        return sum(self._calls.values()) + self._untracked


def cancelled_call(message: Message) -> RequestId | None:
    """The id a ``notifications/cancelled`` names, if the message is one; a malformed
    one names nothing and is forwarded for the server to judge."""
    if message.method != CANCELLED or "id" in message.body:
        return None
    params = message.body.get("params")
    request_id = params.get("requestId") if isinstance(params, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    return request_id


def call_key(scope: CallScope, request_id: RequestId) -> bytes:
    """A fixed-size digest of a call's scope and its id as the SDKs correlate it."""
    document = [scope.tenant, scope.route, scope.session, correlated_id(request_id)]
    return hashlib.sha256(json.dumps(document).encode()).digest()
