"""A server that closes a call's stream and delivers the result on a resumed GET
(SEP-1699 polling): the proxy follows the resumed stream itself, records the result
the tool produced once, and replays it to a retry."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.integration.harness import ledger_rows, running_broker
from tests.integration.mcp_resume_support import (
    PollingStore,
    polling_routes,
    serve_polling_mcp,
)
from tests.integration.mcp_support import calls_seen, client, structured


async def test_a_result_on_a_resumed_stream_is_recorded_once_and_replayed(
    database_url: str, tmp_path: Path
) -> None:
    store = PollingStore()
    arguments = {"invoice": "inv_7", "operation_key": "inv-7:settle"}
    async with (
        serve_polling_mcp(store) as upstream,
        running_broker(
            database_url, tmp_path, routes=lambda _: polling_routes(upstream)
        ) as broker,
    ):
        async with client(broker) as first:
            one = await first.call_tool("settle_invoice", arguments)
        rows = await ledger_rows(database_url)
        async with client(broker) as second:  # a retry, from a new session
            two = await second.call_tool("settle_invoice", arguments)
    assert store.closed.is_set(), "the server never closed the call's stream"
    # The proxy, not the client, came back for the result: a GET with the cursor.
    resumed = [s for s in store.requests("GET") if "last-event-id" in s.headers]
    assert resumed, [(s.method, s.headers) for s in store.seen.seen]
    assert store.calls["settle_invoice"] == 1
    assert not one.is_error and not two.is_error
    assert (
        structured(one) == structured(two) == {"settlement": "st_1", "invoice": "inv_7"}
    )
    assert [(r["operation_key"], r["status"]) for r in rows] == [
        ("inv-7:settle", "succeeded")
    ]


async def test_a_server_that_never_delivers_leaves_the_call_unknown_and_unsent(
    database_url: str, tmp_path: Path
) -> None:
    """Its event store lost the events: every resumed GET comes back empty. The proxy
    gives up within the contract's timeout, calls the outcome unknown (the tool ran),
    and never sends the call a second time."""
    store = PollingStore()
    async with (
        serve_polling_mcp(store, forgetful=True) as upstream,
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: polling_routes(upstream, timeout="2s"),
        ) as broker,
        client(broker) as session,
    ):
        began = time.monotonic()
        with pytest.raises(MCPError) as lost:
            await session.call_tool(
                "settle_invoice", {"invoice": "inv_8", "operation_key": "inv-8:settle"}
            )
        took = time.monotonic() - began
        rows = await ledger_rows(database_url)
    assert store.calls["settle_invoice"] == 1
    assert len(calls_seen(store.seen, "settle_invoice")) == 1  # one POST, never resent
    assert [s for s in store.requests("GET") if "last-event-id" in s.headers]
    assert lost.value.error.data["type"].endswith("/outcome-unknown")
    assert took < 2 + 2, took  # the contract's timeout bounds the following
    assert [(r["operation_key"], r["status"]) for r in rows] == [
        ("inv-8:settle", "outcome_unknown")
    ]


async def test_an_unrecorded_call_that_polls_is_resumed_by_its_own_client(
    database_url: str, tmp_path: Path
) -> None:
    """A read-only tool's stream passes through as the server framed it (priming id
    and retry included), so the SDK client resumes it through the proxy itself."""
    store = PollingStore()
    async with (
        serve_polling_mcp(store) as upstream,
        running_broker(
            database_url, tmp_path, routes=lambda _: polling_routes(upstream)
        ) as broker,
        client(broker) as session,
    ):
        preview = await session.call_tool("preview_invoice", {"invoice": "inv_9"})
        rows = await ledger_rows(database_url)
    assert structured(preview) == {"preview": "inv_9"}
    assert store.calls["preview_invoice"] == 1
    assert [s for s in store.requests("GET") if "last-event-id" in s.headers]
    assert rows == []
