"""Recorded streams: a streamed answer reaches the client as the target sends it, is
recorded once, and replays as the same events.

The fake target holds every stream after its first event until the test opens its
gate, so a client that receives the first event before the gate opens proves the
proxy passed it on alone (a proxy that waited for the whole answer would deadlock the
test into its timeout). Clients: httpx, and the real openai and anthropic SDKs, in
reverse mode and through HTTP_PROXY (httpx's ``proxy=``); httpx and openai through
HTTPS_PROXY too, the proxy intercepting with its local CA.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import anthropic
import asyncpg
import httpx
import openai
import pytest

from effect_broker.reconciler import Reconciler
from tests.integration.harness import Broker, ledger_rows, running_broker
from tests.integration.stream_support import (
    FORWARD_HOST,
    PATHS,
    StreamTarget,
    plain_events,
    stream_routes,
    stream_target,
)
from tests.integration.tls_support import TlsWorld, serve_tls

MODES = ("reverse", "forward")
# The first event through the proxy, after the fake sent it: "a few ms" (about 1 ms
# measured), with room for a loaded two-core test machine.
FIRST_EVENT_BOUND = 0.25
# The same seen through an SDK's stream, which includes the SDK's own first parse (a
# cold anthropic client took 61 ms where the bytes took 1): the gate already proves
# the event came through alone, this bounds only how late.
SDK_FIRST_EVENT_BOUND = 1.0


@asynccontextmanager
async def streaming_broker(
    database_url: str,
    tmp_path: Path,
    *,
    events: int = 5,
    timeout: str = "2s",
    idle: str = "2s",
    grace: str = "1s",
    **settings: object,
) -> AsyncIterator[tuple[Broker, StreamTarget]]:
    async with (
        stream_target(events) as target,
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: stream_routes(
                target.url, timeout=timeout, idle=idle, grace=grace
            ),
            **settings,
        ) as broker,
    ):
        yield broker, target


def url_of(broker: Broker, name: str, mode: str) -> str:
    if mode == "reverse":
        return f"{broker.proxy_url}/{name}{PATHS[name]}"
    return f"http://{FORWARD_HOST}{PATHS[name]}"


def http_client(broker: Broker, mode: str) -> httpx.AsyncClient:
    proxy = broker.proxy_url if mode == "forward" else None
    return httpx.AsyncClient(proxy=proxy, timeout=10.0)


async def effect_status(database_url: str, key: str) -> str:
    rows = await ledger_rows(database_url)
    return str({row["operation_key"]: row["status"] for row in rows}[key])


async def event_kinds(database_url: str, key: str) -> list[str]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT ev.kind FROM effect_events ev"
            " JOIN effects e USING (tenant_id, effect_id)"
            " WHERE e.operation_key = $1 ORDER BY ev.seq",
            key,
        )
    finally:
        await conn.close()
    return [row["kind"] for row in rows]


async def make_due(database_url: str, key: str) -> None:
    """Bring the reconciler's next look at ``key`` forward to now."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE effects SET due_at = now() WHERE operation_key = $1", key
        )
    finally:
        await conn.close()


async def settled(database_url: str, key: str, want: str, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while (status := await effect_status(database_url, key)) != want:
        assert time.monotonic() < deadline, f"{key} is {status}, never {want}"
        await asyncio.sleep(0.02)


async def first_then_rest(
    response: httpx.Response, target: StreamTarget
) -> tuple[bytes, float, bytes]:
    """The first piece of the body (read before the target may go on), how long after
    the target sent it, then everything else once the gate is open."""
    chunks = response.aiter_raw()
    first = await anext(chunks)
    assert target.first_sent_at is not None
    lag = time.perf_counter() - target.first_sent_at
    target.gate.set()
    rest = b"".join([chunk async for chunk in chunks])
    return first, lag, rest


@pytest.mark.parametrize("mode", MODES)
async def test_httpx_sees_the_first_event_at_once_and_a_retry_replays_the_events(
    database_url: str, tmp_path: Path, mode: str
) -> None:
    async with streaming_broker(database_url, tmp_path) as (broker, target):
        headers = {"Operation-Key": "stream-1"}
        async with (
            http_client(broker, mode) as client,
            client.stream(
                "POST", url_of(broker, "events", mode), headers=headers, json={}
            ) as response,
        ):
            assert response.status_code == 200
            assert response.headers["Content-Type"] == "text/event-stream"
            assert response.headers["Effect-Status"] == "dispatching"
            first, lag, rest = await first_then_rest(response, target)
        assert first == plain_events(5)[0]
        assert lag < FIRST_EVENT_BOUND
        whole = first + rest
        assert whole == b"".join(plain_events(5))
        # The end of the body came only after the receipt: settled the moment it ended.
        assert await effect_status(database_url, "stream-1") == "succeeded"

        async with http_client(broker, mode) as client:
            replay = await client.post(
                url_of(broker, "events", mode), headers=headers, json={}
            )
        assert replay.content == whole
        assert replay.headers["Idempotent-Replayed"] == "true"
        assert replay.headers["Content-Type"] == "text/event-stream"
        assert replay.headers["Transfer-Encoding"] == "chunked"
        assert "Content-Length" not in replay.headers
        assert "Effect-Receipt-Streamed" not in replay.headers
        assert replay.headers["Effect-Status"] == "succeeded"
        assert target.hits == 1


async def test_a_duplicate_mid_stream_waits_and_gets_the_recorded_events(
    database_url: str, tmp_path: Path
) -> None:
    """The same key again while the first answer streams: it waits for the stream to
    settle and is then given the replay, woken by this process when the stream ends
    (the cross-process poll is slowed to an hour here, so only that wake counts)."""
    async with streaming_broker(database_url, tmp_path) as (broker, target):
        broker.state.engine.wiring.waiters._interval = 3600.0
        url = url_of(broker, "events", "reverse")
        async with (
            httpx.AsyncClient(timeout=10.0) as client,
            client.stream(
                "POST", url, headers={"Operation-Key": "twice"}, json={}
            ) as response,
        ):
            chunks = response.aiter_raw()
            first = await anext(chunks)
            duplicate = asyncio.ensure_future(
                client.post(
                    url, headers={"Operation-Key": "twice", "Prefer": "wait=5"}, json={}
                )
            )
            done, _ = await asyncio.wait({duplicate}, timeout=0.3)
            assert not done, "the duplicate was answered while the first still streamed"
            target.gate.set()
            whole = first + b"".join([chunk async for chunk in chunks])
            ended = time.monotonic()
            replay = await asyncio.wait_for(duplicate, 5)
            waited_after_end = time.monotonic() - ended
        assert replay.status_code == 200
        assert replay.headers["Idempotent-Replayed"] == "true"
        assert replay.content == whole == b"".join(plain_events(5))
        assert waited_after_end < 1.0
        assert target.hits == 1


async def test_the_end_of_the_stream_waits_for_the_receipt(
    database_url: str, tmp_path: Path
) -> None:
    """Every event passes while the ledger is held up; the end does not."""
    async with streaming_broker(database_url, tmp_path) as (broker, target):
        async with (
            httpx.AsyncClient(timeout=10.0) as client,
            client.stream(
                "POST",
                url_of(broker, "events", "reverse"),
                headers={"Operation-Key": "held"},
                json={},
            ) as response,
        ):
            chunks = response.aiter_raw()
            seen = await anext(chunks)
            blocker = await asyncpg.connect(database_url)
            try:
                tx = blocker.transaction()
                await tx.start()
                await blocker.execute(
                    "SELECT 1 FROM effects WHERE operation_key = 'held' FOR UPDATE"
                )
                target.gate.set()
                await asyncio.wait_for(target.finished.wait(), 5)
                whole = b"".join(plain_events(5))
                while len(seen) < len(whole):
                    seen += await asyncio.wait_for(anext(chunks), 5)
                assert seen == whole  # every event arrived while the receipt waits
                ended = asyncio.ensure_future(anext(chunks, b"<end>"))
                done, _ = await asyncio.wait({ended}, timeout=0.5)
                assert not done, "the body ended before its receipt was written"
                await tx.rollback()
                assert await asyncio.wait_for(ended, 5) == b"<end>"
            finally:
                await blocker.close()
        assert await effect_status(database_url, "held") == "succeeded"


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_leaves_mid_stream_leaves_a_succeeded_effect(
    database_url: str, tmp_path: Path, mode: str
) -> None:
    async with streaming_broker(database_url, tmp_path) as (broker, target):
        headers = {"Operation-Key": "left"}
        async with (
            http_client(broker, mode) as client,
            client.stream(
                "POST", url_of(broker, "events", mode), headers=headers, json={}
            ) as response,
        ):
            await anext(response.aiter_raw())
        # The client closed its connection; only now may the target go on.
        target.gate.set()
        await settled(database_url, "left", "succeeded")
        async with http_client(broker, mode) as client:
            replay = await client.post(
                url_of(broker, "events", mode), headers=headers, json={}
            )
        assert replay.content == b"".join(plain_events(5))
        assert target.hits == 1


async def test_a_stream_quiet_past_its_idle_timeout_is_outcome_unknown(
    database_url: str, tmp_path: Path
) -> None:
    async with streaming_broker(database_url, tmp_path, idle="300ms") as (
        broker,
        target,
    ):
        target.stall = True
        async with (
            httpx.AsyncClient(timeout=10.0) as client,
            client.stream(
                "POST",
                url_of(broker, "events", "reverse"),
                headers={"Operation-Key": "quiet"},
                json={},
            ) as response,
        ):
            with pytest.raises(httpx.RemoteProtocolError):
                await first_then_rest(response, target)
        assert await effect_status(database_url, "quiet") == "outcome_unknown"
        # Idempotent: the reconciler resends under the same derived key, and this
        # time the target finishes the answer.
        target.stall = False
        await make_due(database_url, "quiet")
        await Reconciler(broker.state.engine).run_once()
        assert await effect_status(database_url, "quiet") == "succeeded"
        assert target.hits == 2


async def test_a_stream_longer_than_the_timeout_keeps_its_lease(
    database_url: str, tmp_path: Path
) -> None:
    """A stream that keeps flowing past the contract's timeout and its lease settles
    as answered: the lease is renewed, so the reconciler never takes it over."""
    async with streaming_broker(
        database_url,
        tmp_path,
        timeout="300ms",
        idle="400ms",
        grace="200ms",
        upstream_queue_timeout=timedelta(milliseconds=100),
    ) as (broker, target):
        target.heartbeat = 0.1
        reconciler = Reconciler(broker.state.engine)
        async with (
            httpx.AsyncClient(timeout=10.0) as client,
            client.stream(
                "POST",
                url_of(broker, "events", "reverse"),
                headers={"Operation-Key": "long"},
                json={},
            ) as response,
        ):
            chunks = response.aiter_raw()
            await anext(chunks)
            # The first lease (100ms queue + 300ms + 200ms) and every renewed one
            # (400ms idle + 200ms) run out several times over while the reconciler
            # looks for dead holders.
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                await reconciler.run_once()
                await asyncio.sleep(0.05)
            target.gate.set()
            rest = b"".join([chunk async for chunk in chunks])
        assert rest.endswith(plain_events(5)[-1])
        assert await effect_status(database_url, "long") == "succeeded"
        kinds = await event_kinds(database_url, "long")
        assert "lease_renewed" in kinds and "lease_expired" not in kinds
        assert target.hits == 1


async def test_a_stream_larger_than_a_receipt_keeps_its_digest(
    database_url: str, tmp_path: Path
) -> None:
    async with streaming_broker(
        database_url, tmp_path, events=50, max_receipt_bytes=256
    ) as (broker, target):
        target.gate.set()
        headers = {"Operation-Key": "big"}
        async with httpx.AsyncClient(timeout=10.0) as client:
            first = await client.post(
                url_of(broker, "events", "reverse"), headers=headers, json={}
            )
            replay = await client.post(
                url_of(broker, "events", "reverse"), headers=headers, json={}
            )
        whole = b"".join(plain_events(50))
        assert first.content == whole  # the client got every byte
        assert replay.headers["Effect-Receipt-Truncated"] == "true"
        digest = base64.b64encode(hashlib.sha256(whole).digest()).decode()
        assert replay.headers["Effect-Receipt-Digest"] == f"sha-256=:{digest}:"
        assert replay.headers["Effect-Receipt-Body-Length"] == str(len(whole))
        assert replay.content == b""
        assert target.hits == 1


@pytest.mark.parametrize("mode", MODES)
async def test_openai_streams_through_the_proxy_and_replays_the_same_chunks(
    database_url: str, tmp_path: Path, mode: str
) -> None:
    async with streaming_broker(database_url, tmp_path) as (broker, target):

        async def chat() -> tuple[list[str], float]:
            base = url_of(broker, "openai", mode).removesuffix("/chat/completions")
            async with (
                http_client(broker, mode) as http,
                openai.AsyncOpenAI(
                    base_url=base, api_key="sk-test", max_retries=0, http_client=http
                ) as client,
            ):
                stream = await client.chat.completions.create(
                    model="fake",
                    messages=[{"role": "user", "content": "hi"}],
                    stream=True,
                    extra_headers={"Operation-Key": "chat-1"},
                )
                words, lag = [], 0.0
                async for chunk in stream:
                    if not words:
                        assert target.first_sent_at is not None
                        lag = time.perf_counter() - target.first_sent_at
                        target.gate.set()
                    words.append(chunk.choices[0].delta.content or "")
                return words, lag

        words, lag = await chat()
        assert lag < SDK_FIRST_EVENT_BOUND
        assert words == [f"w{i} " for i in range(5)]
        await settled(database_url, "chat-1", "succeeded")
        replayed, _ = await chat()
        assert replayed == words
        assert target.hits == 1


@pytest.mark.parametrize("mode", MODES)
async def test_anthropic_streams_through_the_proxy_and_replays_the_same_events(
    database_url: str, tmp_path: Path, mode: str
) -> None:
    async with streaming_broker(database_url, tmp_path) as (broker, target):

        async def ask() -> tuple[list[str], float]:
            base = url_of(broker, "anthropic", mode).removesuffix("/v1/messages")
            proxy = broker.proxy_url if mode == "forward" else None
            async with anthropic.AsyncAnthropic(
                base_url=base,
                api_key="sk-test",
                max_retries=0,
                http_client=anthropic.DefaultAsyncHttpxClient(proxy=proxy),
            ) as client:
                kinds, lag = [], 0.0
                async with client.messages.stream(
                    model="fake",
                    max_tokens=10,
                    messages=[{"role": "user", "content": "hi"}],
                    extra_headers={"Operation-Key": "ask-1"},
                ) as stream:
                    async for event in stream:
                        if not kinds:
                            assert target.first_sent_at is not None
                            lag = time.perf_counter() - target.first_sent_at
                            target.gate.set()
                        kinds.append(event.type)
                    text = await stream.get_final_text()
                kinds.append(text)
                return kinds, lag

        events, lag = await ask()
        assert lag < SDK_FIRST_EVENT_BOUND
        assert events[0] == "message_start"
        assert events[-1] == "".join(f"w{i} " for i in range(5))
        await settled(database_url, "ask-1", "succeeded")
        replayed, _ = await ask()
        assert replayed == events
        assert target.hits == 1


# --------------------------------------------------------------- through HTTPS_PROXY


@asynccontextmanager
async def intercepting_broker(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Broker, StreamTarget, ssl.SSLContext]]:
    """The stream target behind TLS as api.test, reached through the intercepting
    proxy; the context a client trusts the proxy's CA with."""
    world = TlsWorld(tmp_path)
    target = StreamTarget()
    async with (
        serve_tls(target.handle, world.server_context()) as port,
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: stream_routes(f"https://127.0.0.1:{port}").replace(
                f"host: {FORWARD_HOST}", "host: api.test"
            ),
            **world.settings(),
        ) as broker,
    ):
        try:
            yield broker, target, world.client_context()
        finally:
            target.gate.set()
            target.closing.set()


async def test_httpx_and_openai_stream_through_https_proxy(
    database_url: str, tmp_path: Path
) -> None:
    async with intercepting_broker(database_url, tmp_path) as (broker, target, trust):
        headers = {"Operation-Key": "tls-1"}
        url = "https://api.test/v1/events"
        async with (
            httpx.AsyncClient(proxy=broker.proxy_url, verify=trust) as client,
            client.stream("POST", url, headers=headers, json={}) as response,
        ):
            assert response.headers["Effect-Status"] == "dispatching"
            first, lag, rest = await first_then_rest(response, target)
        assert lag < FIRST_EVENT_BOUND
        assert first + rest == b"".join(plain_events(5))
        assert await effect_status(database_url, "tls-1") == "succeeded"
        async with httpx.AsyncClient(proxy=broker.proxy_url, verify=trust) as client:
            replay = await client.post(url, headers=headers, json={})
        assert replay.content == first + rest
        assert replay.headers["Idempotent-Replayed"] == "true"

        target.gate.clear()
        async with (
            httpx.AsyncClient(proxy=broker.proxy_url, verify=trust) as http,
            openai.AsyncOpenAI(
                base_url="https://api.test/v1",
                api_key="sk-test",
                max_retries=0,
                http_client=http,
            ) as sdk,
        ):
            stream = await sdk.chat.completions.create(
                model="fake",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                extra_headers={"Operation-Key": "tls-chat"},
            )
            words = []
            async for chunk in stream:
                target.gate.set()  # only once the first chunk came through
                words.append(chunk.choices[0].delta.content or "")
        assert words == [f"w{i} " for i in range(5)]
        assert target.hits == 2
