"""A client's own timeout does not cancel a recorded tool call. On the 2025-11-25
revision the SDK's client, giving up, posts ``notifications/cancelled`` for the call:
the proxy acknowledges it itself, so the server finishes the tool once and the effect
settles with a receipt that the retry is given. A cancellation of a read-only call is
forwarded: that call is no effect, and the server may stop it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.integration.harness import Answer, Broker, request
from tests.integration.mcp_support import (
    CANCELLED,
    DEADLINE,
    REVISION,
    ToolStore,
    calls_seen,
    cancellations_seen,
    mcp_broker,
    modern,
    open_session,
    raw_call,
    session_call,
    session_cancel,
    settled_rows,
)

# The client's own timeout: far longer than the proxy needs to start the call (the
# tool's start is checked, not assumed), far shorter than the contract's 5 s.
CLIENT_TIMEOUT = 1.5


@dataclass
class Cancellations:
    """The ``notifications/cancelled`` the client posted, and how each was answered:
    the point after which a forwarded one would have reached the server."""

    answers: list[tuple[Any, int]] = field(default_factory=list)  # (requestId, status)
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    async def note(self, response: httpx2.Response) -> None:
        try:
            message = json.loads(response.request.content)
        except ValueError:
            return
        if isinstance(message, dict) and message.get("method") == CANCELLED:
            self.answers.append((message["params"]["requestId"], response.status_code))
            self.answered.set()


class LateAnswers(logging.Handler):
    """The SDK's client, once it has given up on a request, drops the answer that comes
    later and says so (at debug level). Until then the answer is still on its way
    through the client's streams, and closing the client under it makes the SDK's
    transport raise: a client that is about to close waits for this first."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.dropped = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "late request id" in record.getMessage():
            self.dropped.set()


@contextmanager
def late_answers() -> Iterator[LateAnswers]:
    logger = logging.getLogger("mcp.shared.jsonrpc_dispatcher")
    handler, level = LateAnswers(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@asynccontextmanager
async def watched_client(
    broker: Broker, cancellations: Cancellations
) -> AsyncIterator[ClientSession]:
    """An SDK client (the 2025-11-25 handshake) whose HTTP answers are watched."""
    http = httpx2.AsyncClient(
        timeout=httpx2.Timeout(30, read=300),
        event_hooks={"response": [cancellations.note]},
    )
    async with (
        http,
        streamable_http_client(f"{broker.proxy_url}/mcp", http_client=http) as (
            read,
            write,
        ),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def test_a_client_timeout_does_not_cancel_a_recorded_call(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    cancellations = Cancellations()
    arguments = {"amount": 30, "operation_key": "tr-cancel-1"}
    async with mcp_broker(database_url, tmp_path, store) as broker:
        with late_answers() as late:
            async with watched_client(broker, cancellations) as session:
                with pytest.raises(MCPError):
                    await session.call_tool(
                        "transfer", arguments, read_timeout_seconds=CLIENT_TIMEOUT
                    )
                assert store.started.is_set(), "the client gave up before the call began"
                await asyncio.wait_for(cancellations.answered.wait(), DEADLINE)
                reached_server = cancellations_seen(store)
                store.release.set()  # only now may the tool finish
                rows = await settled_rows(database_url)
                # The call's own answer comes too, late: through the client first.
                await asyncio.wait_for(late.dropped.wait(), DEADLINE)
        retry = await raw_call(broker, "retry-1", "transfer", arguments)
    [(cancelled_id, status)] = cancellations.answers
    assert status == 202  # acknowledged as the transport acknowledges a notification
    assert reached_server == [] and cancellations_seen(store) == []
    assert store.interrupted["transfer"] == 0
    assert store.calls["transfer"] == 1
    assert rows == [("tr-cancel-1", "succeeded")]
    assert retry.headers["Idempotent-Replayed"] == "true", retry
    assert retry.json["id"] == "retry-1" != cancelled_id
    assert retry.json["result"]["structuredContent"] == {
        "transfer_id": "tr_1",
        "amount": 30,
    }


async def test_a_cancelled_read_only_call_is_forwarded(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    cancellations = Cancellations()
    async with (
        mcp_broker(database_url, tmp_path, store) as broker,
        watched_client(broker, cancellations) as session,
    ):
        with pytest.raises(MCPError):
            await session.call_tool(
                "watch_rates", {"currency": "eur"}, read_timeout_seconds=CLIENT_TIMEOUT
            )
        assert store.started.is_set(), "the client gave up before the call began"
        await asyncio.wait_for(cancellations.answered.wait(), DEADLINE)
        reached_server = cancellations_seen(store)
    [(cancelled_id, status)] = cancellations.answers
    assert status == 202
    assert reached_server == [cancelled_id]
    assert store.calls["watch_rates"] == 1


async def test_the_sessionless_revision_cancels_by_hanging_up_and_is_not_obeyed(
    database_url: str, tmp_path: Path
) -> None:
    """At 2026-07-28 the SDK's client cancels by closing the call's stream (it posts
    no notification), which the proxy already does not pass on; a client that still
    posts ``notifications/cancelled`` there, naming the running call, is answered by
    the proxy too, not by the server."""
    store = ToolStore()
    arguments = {"amount": 40, "operation_key": "tr-cancel-2"}
    async with mcp_broker(database_url, tmp_path, store) as broker:
        async with modern(broker) as session:
            with pytest.raises(MCPError):
                await session.call_tool(
                    "transfer", arguments, read_timeout_seconds=CLIENT_TIMEOUT
                )
        assert store.started.is_set(), "the client gave up before the call began"
        [sent] = calls_seen(store, "transfer")
        late = await post_cancellation(broker, json.loads(sent.body)["id"])
        reached_server = cancellations_seen(store)
        store.release.set()
        rows = await settled_rows(database_url)
        retry = await raw_call(broker, "retry-2", "transfer", arguments)
    assert late.status == 202 and late.body == b""
    assert reached_server == [] and cancellations_seen(store) == []
    assert store.interrupted["transfer"] == 0
    assert store.calls["transfer"] == 1
    assert rows == [("tr-cancel-2", "succeeded")]
    assert retry.headers["Idempotent-Replayed"] == "true", retry
    assert retry.json["result"]["structuredContent"] == {
        "transfer_id": "tr_1",
        "amount": 40,
    }


async def post_cancellation(broker: Broker, request_id: Any) -> Answer:
    """``notifications/cancelled`` as a client in the field posts it at 2026-07-28."""
    return await request(
        "POST",
        f"{broker.proxy_url}/mcp",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": REVISION,
            "Mcp-Method": CANCELLED,
        },
        data=json.dumps(
            {
                "jsonrpc": "2.0",
                "method": CANCELLED,
                "params": {"requestId": request_id, "reason": "timed out"},
            }
        ),
    )


@pytest.mark.parametrize(
    ("call_id", "cancel_id"), [(2, "2"), ("7", 7), (" 9", 9)], ids=str
)
async def test_a_cancellation_naming_the_call_in_another_spelling_is_withheld(
    database_url: str, tmp_path: Path, call_id: Any, cancel_id: Any
) -> None:
    """The SDKs take ``"2"`` and ``2`` for one request id (a string that reads as an
    integer is that integer), so a cancellation naming the running call's id in the
    other spelling would stop it on the server: it is withheld like any other."""
    store = ToolStore()
    key = f"tr-spelling-{cancel_id!r}"
    async with mcp_broker(database_url, tmp_path, store) as broker:
        session = await open_session(broker.proxy_url)
        call = asyncio.create_task(
            session_call(
                broker.proxy_url,
                session,
                call_id,
                "transfer",
                {"amount": 5, "operation_key": key},
            )
        )
        await asyncio.wait_for(store.started.wait(), DEADLINE)
        cancelled = await session_cancel(broker.proxy_url, session, cancel_id)
        reached_server = cancellations_seen(store)
        store.release.set()
        answer = await asyncio.wait_for(call, DEADLINE)
        rows = await settled_rows(database_url)
    assert cancelled.status == 202 and cancelled.body == b""
    assert reached_server == [] and cancellations_seen(store) == []
    assert store.interrupted["transfer"] == 0
    assert store.calls["transfer"] == 1
    assert rows == [(key, "succeeded")]
    assert answer.status == 200, answer
