"""Real HTTP clients through the proxy, as agents use it: curl, requests, httpx, aiohttp,
the standard library's urllib, and Node's fetch.

Forward mode takes the proxy from each client's own mechanism (curl ``-x``, the
``HTTP_PROXY`` environment for requests, httpx and urllib, ``proxy=`` for aiohttp;
Node's built-in fetch has no proxy of its own, so it runs in reverse mode only); reverse
mode points the client's URL at the sidecar. For every client this proves: the first
call reaches the target once under the derived key; a retry gets the stored receipt
byte for byte with ``Idempotent-Replayed: true`` and no second charge; and neither the
client's ``Idempotency-Key`` nor the ``Operation-Key`` ever reaches the target (an echo
upstream records every header it receives).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import requests
from aiohttp import ClientSession, web
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from effect_broker.canonical import downstream_key
from effect_broker.tracing import install
from tests.integration.harness import (
    ROUTES,
    Broker,
    request,
    running_broker,
    serve_handler,
)
from tests.integration.node_support import NODE_DIR, node_ready

CHARGE = {"amount": 1000, "currency": "usd", "order_id": "order-42"}
OPERATION_KEY = "order-42:charge"
CLIENT_KEY = "client-chosen-key"


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes


#: (url, headers, body, proxy or None for a direct request) -> the reply
Client = Callable[[str, dict[str, str], bytes, str | None], Awaitable[Reply]]


# --------------------------------------------------------------------- the clients


def _lowered(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in pairs}


def curl_client(tmp_path: Path) -> Client:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed on this machine")

    async def send(
        url: str, headers: dict[str, str], body: bytes, proxy: str | None
    ) -> Reply:
        body_file, head_file, out_file = (
            tmp_path / "curl-body",
            tmp_path / "curl-head",
            tmp_path / "curl-out",
        )
        body_file.write_bytes(body)
        args = ["curl", "-sS", "-X", "POST", "--data-binary", f"@{body_file}"]
        args += ["-D", str(head_file), "-o", str(out_file)]
        args += ["-x", proxy] if proxy else ["--noproxy", "*"]
        for name, value in headers.items():
            args += ["-H", f"{name}: {value}"]
        process = await asyncio.create_subprocess_exec(
            *args, url, stderr=asyncio.subprocess.PIPE
        )
        _, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()
        # The last header block is the final answer (skips any 100 Continue).
        block = head_file.read_bytes().decode("latin-1").strip().split("\r\n\r\n")[-1]
        status_line, *lines = block.split("\r\n")
        pairs = [line.split(":", 1) for line in lines]
        return Reply(
            int(status_line.split()[1]),
            {name.strip().lower(): value.strip() for name, value in pairs},
            out_file.read_bytes(),
        )

    return send


def use_proxy_from_environment(
    monkeypatch: pytest.MonkeyPatch, proxy: str | None
) -> None:
    """What an agent's shell does: HTTP_PROXY set (or not), nothing excluded."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy"):
        if proxy is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, proxy)


def requests_client(monkeypatch: pytest.MonkeyPatch) -> Client:
    async def send(
        url: str, headers: dict[str, str], body: bytes, proxy: str | None
    ) -> Reply:
        use_proxy_from_environment(monkeypatch, proxy)
        # Blocking: run it in a thread so the in-process servers keep serving.
        response = await asyncio.to_thread(
            requests.post, url, data=body, headers=headers, timeout=10
        )
        return Reply(
            response.status_code, _lowered(response.headers.items()), response.content
        )

    return send


def httpx_client(monkeypatch: pytest.MonkeyPatch) -> Client:
    async def send(
        url: str, headers: dict[str, str], body: bytes, proxy: str | None
    ) -> Reply:
        use_proxy_from_environment(monkeypatch, proxy)
        async with httpx.AsyncClient(timeout=10) as client:  # trust_env: reads the env
            response = await client.post(url, content=body, headers=headers)
        return Reply(
            response.status_code, _lowered(response.headers.items()), response.content
        )

    return send


def aiohttp_client() -> Client:
    async def send(
        url: str, headers: dict[str, str], body: bytes, proxy: str | None
    ) -> Reply:
        async with (
            ClientSession() as session,
            session.post(url, data=body, headers=headers, proxy=proxy) as response,
        ):
            return Reply(
                response.status, _lowered(response.headers.items()), await response.read()
            )

    return send


def urllib_client(monkeypatch: pytest.MonkeyPatch) -> Client:
    def post(url: str, headers: dict[str, str], body: bytes) -> Reply:
        # A new opener per call: urlopen's default one keeps the proxies it first saw.
        opener = urllib.request.build_opener()
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with opener.open(request, timeout=10) as response:
                return Reply(
                    response.status, _lowered(response.headers.items()), response.read()
                )
        except urllib.error.HTTPError as refused:  # a 4xx/5xx answer is still one
            return Reply(refused.code, _lowered(refused.headers.items()), refused.read())

    async def send(
        url: str, headers: dict[str, str], body: bytes, proxy: str | None
    ) -> Reply:
        use_proxy_from_environment(monkeypatch, proxy)
        return await asyncio.to_thread(post, url, headers, body)

    return send


def node_fetch_client() -> Client:
    """Node's built-in fetch, no proxy agent: reverse mode only (it has no proxy)."""
    node_ready()

    async def send(
        url: str, headers: dict[str, str], body: bytes, proxy: str | None
    ) -> Reply:
        assert proxy is None, "Node's built-in fetch takes no proxy"
        process = await asyncio.create_subprocess_exec(
            "node",
            str(NODE_DIR / "fetch_client.mjs"),
            url,
            json.dumps(headers),
            env={**os.environ, "FETCH": "builtin"},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(body), 60)
        assert process.returncode == 0, err.decode(errors="replace")
        answer = json.loads(out)
        return Reply(
            answer["status"],
            _lowered(answer["headers"]),
            base64.b64decode(answer["body_b64"]),
        )

    return send


@pytest.fixture
def client(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Client:
    name = request.param
    if name == "node":
        return node_fetch_client()
    if name == "curl":
        return curl_client(tmp_path)
    if name == "requests":
        return requests_client(monkeypatch)
    if name == "httpx":
        return httpx_client(monkeypatch)
    if name == "urllib":
        return urllib_client(monkeypatch)
    return aiohttp_client()


# --------------------------------------------------------------------- the upstreams


@dataclass
class Echo:
    """An upstream that answers 201 and records every header list it received."""

    url: str = ""
    received: list[list[tuple[str, str]]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(
            [(name.decode(), value.decode()) for name, value in request.raw_headers]
        )
        await request.read()
        return web.json_response({"id": f"echo_{len(self.received)}"}, status=201)


@asynccontextmanager
async def echo_upstream() -> AsyncIterator[Echo]:
    echo = Echo()
    async with serve_handler(echo.handle) as url:
        echo.url = url
        yield echo


ECHO_ROUTES = """\
  - name: echo-forward
    match: {{method: POST, host: echo.internal, path: /v1/charges}}
    upstream: {echo}
    contract: payments.charge
  - name: echo-reverse
    match: {{method: POST, path: /echo/v1/charges}}
    strip_prefix: /echo
    upstream: {echo}
    contract: payments.charge
"""


@asynccontextmanager
async def broker_with_echo(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Broker, Echo]]:
    """The harness routes (demo target) plus two routes to an echo upstream."""
    async with echo_upstream() as echo:

        def routes(target: str) -> str:
            standard = ROUTES.format(
                target=target,
                timeout="2s",
                key_retention="1h",
                settlement_bound="300ms",
                unmatched="pass",
            )
            return standard + ECHO_ROUTES.format(echo=echo.url)

        async with running_broker(database_url, tmp_path, routes=routes) as broker:
            yield broker, echo


def derived_key(broker: Broker, operation_key: str) -> str:
    tenant = broker.state.tenant
    return downstream_key(
        broker.state.keyring.tenant_hmac_key(tenant), tenant, operation_key
    )


def charge_headers(client_key: str = CLIENT_KEY) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Operation-Key": OPERATION_KEY,
        "Idempotency-Key": client_key,
    }


# --------------------------------------------------------------------- the tests

MODES = {
    # mode: (URL of the demo target's route, URL of the echo route)
    "forward": ("http://payments.internal/v1/charges", "http://echo.internal/v1/charges"),
    "reverse": ("{proxy}/payments/v1/charges", "{proxy}/echo/v1/charges"),
}
#: Every client in every mode it has: Node's built-in fetch has no proxy setting.
MATRIX = pytest.mark.parametrize(
    ("client", "mode"),
    [
        *(
            (name, mode)
            for name in ("curl", "requests", "httpx", "aiohttp", "urllib")
            for mode in MODES
        ),
        ("node", "reverse"),
    ],
    indirect=["client"],
)


@MATRIX
async def test_a_client_charges_once_and_a_retry_gets_the_receipt_byte_for_byte(
    client: Client, database_url: str, tmp_path: Path, mode: str
) -> None:
    async with broker_with_echo(database_url, tmp_path) as (broker, _):
        url = MODES[mode][0].format(proxy=broker.proxy_url)
        proxy = broker.proxy_url if mode == "forward" else None
        body = json.dumps(CHARGE).encode()

        first = await client(url, charge_headers(), body, proxy)
        [charge] = broker.charges("order-42")
        retry = await client(url, charge_headers("another-client-key"), body, proxy)

        assert first.status == 201, first
        assert first.headers["effect-status"] == "succeeded"
        assert "idempotent-replayed" not in first.headers
        assert json.loads(first.body)["id"] == charge["id"]
        assert charge["idempotency_key"] not in (CLIENT_KEY, OPERATION_KEY)
        assert charge["idempotency_key"] == derived_key(broker, OPERATION_KEY)

        assert retry.status == 201
        assert retry.body == first.body
        assert retry.headers["idempotent-replayed"] == "true"
        assert retry.headers["effect-id"] == first.headers["effect-id"]
        assert retry.headers["content-type"] == first.headers["content-type"]
        assert broker.charges() == [charge]


@MATRIX
async def test_neither_the_client_key_nor_the_operation_key_reaches_the_target(
    client: Client, database_url: str, tmp_path: Path, mode: str
) -> None:
    async with broker_with_echo(database_url, tmp_path) as (broker, echo):
        url = MODES[mode][1].format(proxy=broker.proxy_url)
        proxy = broker.proxy_url if mode == "forward" else None
        headers = {**charge_headers(), "X-Request-Note": "kept"}

        answer = await client(url, headers, json.dumps(CHARGE).encode(), proxy)

        assert answer.status == 201, answer
        [received] = echo.received
        names = [name.lower() for name, _ in received]
        assert "operation-key" not in names
        assert [v for n, v in received if n.lower() == "idempotency-key"] == [
            derived_key(broker, OPERATION_KEY)
        ]
        assert not any(
            OPERATION_KEY in value or CLIENT_KEY in value for _, value in received
        )
        assert ("X-Request-Note", "kept") in received
        assert not {"proxy-connection", "proxy-authorization"} & set(names)


async def test_repeated_client_keys_and_hop_by_hop_headers_never_reach_the_target(
    database_url: str, tmp_path: Path
) -> None:
    """Whatever the client sends under the idempotency header is replaced, not merged."""
    async with broker_with_echo(database_url, tmp_path) as (broker, echo):
        headers = [
            ("Content-Type", "application/json"),
            ("Operation-Key", OPERATION_KEY),
            ("Idempotency-Key", "first-client-key"),
            ("Idempotency-Key", "second-client-key"),
            ("Connection", "keep-alive, X-Hop-Secret"),
            ("X-Hop-Secret", "for-the-proxy-only"),
        ]
        answer = await request(
            "POST",
            f"{broker.proxy_url}/echo/v1/charges",
            data=json.dumps(CHARGE).encode(),
            headers=headers,
        )
        assert answer.status == 201

        [received] = echo.received
        assert [v for n, v in received if n.lower() == "idempotency-key"] == [
            derived_key(broker, OPERATION_KEY)
        ]
        names = {name.lower() for name, _ in received}
        assert not {"operation-key", "x-hop-secret"} & names


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    """An SDK tracer provider for this process, recording spans in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    install(provider)
    return exporter


async def test_the_clients_trace_continues_upstream_through_the_proxys_span(
    database_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    """One ``traceparent`` reaches the target: the client's trace, the proxy's upstream
    span, a child of the proxy's server span."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {
        **charge_headers(),
        "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01",
    }
    async with broker_with_echo(database_url, tmp_path) as (broker, echo):
        answer = await request(
            "POST",
            f"{broker.proxy_url}/echo/v1/charges",
            data=json.dumps(CHARGE).encode(),
            headers=headers,
        )
        assert answer.status == 201

        [received] = echo.received
        parents = [v for n, v in received if n.lower() == "traceparent"]
        assert len(parents) == 1
        _, sent_trace, sent_parent, _ = parents[0].split("-")
        assert sent_trace == trace_id
        [span] = [
            s for s in spans.get_finished_spans() if s.name == "effect echo-reverse"
        ]
        [upstream] = [s for s in spans.get_finished_spans() if s.name == "POST"]
        assert sent_parent == format(upstream.context.span_id, "016x")
        assert upstream.parent is not None
        assert upstream.parent.span_id == span.context.span_id
        assert span.parent is not None and span.parent.span_id == 0x00F067AA0BA902B7
        attributes = dict(span.attributes or {})
        assert attributes["effect_broker.status"] == "succeeded"
        assert OPERATION_KEY not in str(attributes)
        assert len(str(attributes["effect_broker.operation_key_digest"])) == 16
