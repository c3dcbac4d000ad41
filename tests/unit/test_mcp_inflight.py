"""The table of recorded MCP calls in flight: what a cancellation is checked against."""

from __future__ import annotations

import json
from typing import Any

from effect_broker.mcp.inflight import (
    CallScope,
    InFlightCalls,
    cancelled_call,
    correlated_id,
)
from effect_broker.mcp.jsonrpc import parse_message

ONE = CallScope("t1", "billing-mcp", "session-a")


def notification(method: str, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode()


def test_a_call_is_running_until_it_ends() -> None:
    calls = InFlightCalls()
    token = calls.begin(ONE, 1)
    assert calls.running(ONE, 1)
    assert not calls.running(CallScope("t1", "billing-mcp", "session-b"), 1)
    assert not calls.running(CallScope("t2", "billing-mcp", "session-a"), 1)
    calls.end(token)
    assert not calls.running(ONE, 1) and len(calls) == 0


def test_ids_compare_as_the_sdks_correlate_them() -> None:
    """The SDKs take a string that reads as an integer for that integer, so a
    cancellation naming ``"1"`` stops the server's call ``1``: it is the same call."""
    calls = InFlightCalls()
    calls.begin(ONE, 1)
    calls.begin(ONE, "42")
    calls.begin(ONE, "abc")
    for spelling in ("1", " 1", "+1", "01", 1):
        assert calls.running(ONE, spelling), spelling
    assert calls.running(ONE, 42) and calls.running(ONE, "42")
    assert calls.running(ONE, "abc") and not calls.running(ONE, "ABC")
    assert not calls.running(ONE, "1.0") and not calls.running(ONE, 2)
    assert correlated_id("9" * 5000) == "9" * 5000  # past what int() reads: a string


def test_one_id_running_twice_stays_until_both_end() -> None:
    calls = InFlightCalls()
    first, second = calls.begin(ONE, 5), calls.begin(ONE, 5)
    calls.end(first)
    assert calls.running(ONE, 5)
    calls.end(second)
    assert not calls.running(ONE, 5)


def test_past_its_limit_the_table_withholds_every_cancellation() -> None:
    """Bounded memory never means forwarding a cancellation of a recorded call."""
    calls = InFlightCalls(limit=1)
    kept = calls.begin(ONE, 1)
    counted = calls.begin(ONE, 2)
    assert counted is None and len(calls) == 2
    assert calls.running(ONE, 2) and calls.running(ONE, 99)
    calls.end(counted)
    assert calls.running(ONE, 1) and not calls.running(ONE, 99)
    calls.end(kept)
    assert len(calls) == 0


def test_only_a_well_formed_cancellation_names_a_call() -> None:
    def named(body: bytes) -> object:
        return cancelled_call(parse_message(body))

    assert named(notification("notifications/cancelled", requestId=3)) == 3
    assert named(notification("notifications/cancelled", requestId="a")) == "a"
    assert named(notification("notifications/cancelled", requestId=True)) is None
    assert named(notification("notifications/cancelled")) is None
    assert named(notification("notifications/progress", requestId=3)) is None
    as_request = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "notifications/cancelled",
            "params": {"requestId": 3},
        }
    ).encode()
    assert named(as_request) is None
