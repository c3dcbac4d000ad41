"""A server that closes a call's stream and delivers the result on a resumed GET
(SEP-1699 polling): the proxy follows the resumed stream itself, records the result
the tool produced once, and replays it to a retry."""

from __future__ import annotations

from pathlib import Path

from tests.integration.harness import ledger_rows, running_broker
from tests.integration.mcp_resume_support import (
    PollingStore,
    polling_routes,
    serve_polling_mcp,
)
from tests.integration.mcp_support import client, structured


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
