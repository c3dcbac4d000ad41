"""Progress notifications of a recorded tools/call reach the official ``mcp`` client
while the call runs; the stored result is what a retry replays (without progress)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.harness import ledger_rows
from tests.integration.mcp_support import (
    ToolStore,
    client,
    mcp_broker,
    modern,
    raw_call,
    structured,
)


@pytest.mark.parametrize("revision", ["handshake", "sessionless"])
async def test_the_client_sees_progress_of_a_recorded_call(
    database_url: str, tmp_path: Path, revision: str
) -> None:
    store = ToolStore()
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    arguments = {"owner": "ada", "operation_key": f"acct-{revision}"}
    async with mcp_broker(database_url, tmp_path, store) as broker:
        if revision == "handshake":
            async with client(broker) as session:
                live = await session.call_tool(
                    "open_account", arguments, progress_callback=on_progress
                )
        else:
            async with modern(broker) as c:
                live = await c.call_tool(
                    "open_account", arguments, progress_callback=on_progress
                )
        retry = await raw_call(broker, "retry-1", "open_account", arguments)
        rows = await ledger_rows(database_url)
    assert progress == [(1, 2, "opening")]
    assert structured(live) == {"account": "acc_1", "owner": "ada"}
    assert [row["status"] for row in rows] == ["succeeded"]
    assert store.calls["open_account"] == 1
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json["result"]["structuredContent"] == structured(live)
