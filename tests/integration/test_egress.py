"""Egress policy: where pass-through requests and blind tunnels may go.

Refused by default: the proxy's own ports, the ledger database, link-local and metadata
addresses; in a shared gateway also loopback and private ranges. Names are checked by
what they resolve to when the proxy connects. Every refusal is a 403 ``egress-refused``
decided before any connection attempt: ``outside_attempts`` records (and blocks) every
connection to a non-loopback address, and must stay empty.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from tests.integration.gateway_support import basic, make_key
from tests.integration.harness import (
    PROBLEMS,
    ROUTES,
    Broker,
    address,
    ledger_rows,
    request,
    running_broker,
    serve_handler,
)
from tests.integration.outside import outside_attempts

REFUSED = PROBLEMS + "egress-refused"


async def hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")


def with_proxy(extra: str) -> Any:
    """routes.yaml of the harness with ``extra`` lines in its proxy section."""

    def routes(target: str) -> str:
        text = ROUTES.format(
            target=target,
            timeout="2s",
            key_retention="1h",
            settlement_bound="300ms",
            unmatched="pass",
        )
        return text.replace("  unmatched: pass\n", "  unmatched: pass\n" + extra)

    return routes


class FakeResolver(AbstractResolver):
    """Answers from a table and records every lookup; never asks a real DNS server."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        if host not in self.table:
            raise OSError(f"{host} is not in the test's table")
        return [
            ResolveResult(
                hostname=host,
                host=ip,
                port=port,
                family=socket.AF_INET6 if ":" in ip else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for ip in self.table[host]
        ]

    async def close(self) -> None:
        return None


@pytest.fixture
def outside(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    with outside_attempts(monkeypatch) as attempts:
        yield attempts


async def raw_connect(broker: Broker, authority: str) -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
    try:
        async with asyncio.timeout(10):
            writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            # a refusal closes the connection; an open tunnel stays open, bodiless
            body = await reader.read() if status != 200 else b""
    finally:
        writer.close()
    return status, json.loads(body) if body else {}


def port_of(url: str) -> int:
    return address(url)[1]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "0x7f000001", "[::1]"])
async def test_pass_through_to_the_admin_port_is_refused(
    broker: Broker, host: str, outside: list[Any]
) -> None:
    url = URL(f"http://{host}:{port_of(broker.admin_url)}/metrics", encoded=True)
    answer = await request("GET", url, proxy=broker.proxy_url)

    assert answer.status == 403, answer
    assert answer.problem["type"] == REFUSED
    assert "admin" in answer.problem["detail"]
    assert outside == []


async def test_pass_through_to_the_proxy_itself_is_refused(broker: Broker) -> None:
    answer = await request("GET", f"{broker.proxy_url}/x", proxy=broker.proxy_url)

    assert answer.status == 403, answer
    assert answer.problem["type"] == REFUSED


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::ffff:127.0.0.1]"])
async def test_connect_to_the_ledger_database_is_refused(
    broker: Broker, database_url: str, host: str
) -> None:
    port = URL(database_url).port
    if port is None:  # the embedded server: a Unix socket, no TCP address to refuse
        pytest.skip("the ledger listens on a Unix socket here; CI's second run uses TCP")
    status, problem = await raw_connect(broker, f"{host}:{port}")

    assert status == 403
    assert problem["type"] == REFUSED
    assert "ledger" in problem["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://2852039166/latest/meta-data/",  # 169.254.169.254 as one number
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
    ],
)
async def test_pass_through_to_metadata_is_refused_before_any_connection(
    broker: Broker, url: str, outside: list[Any]
) -> None:
    answer = await request("GET", URL(url, encoded=True), proxy=broker.proxy_url)

    assert answer.status == 403, answer
    assert answer.problem["type"] == REFUSED
    assert outside == []


@pytest.mark.parametrize("authority", ["169.254.169.254:80", "[fd00:ec2::254]:443"])
async def test_connect_to_metadata_is_refused_before_any_connection(
    broker: Broker, authority: str, outside: list[Any]
) -> None:
    status, problem = await raw_connect(broker, authority)

    assert status == 403
    assert problem["type"] == REFUSED
    assert outside == []


@pytest.mark.parametrize(
    "name", ["metadata.test", "mixed.test"], ids=["metadata", "one-bad-address"]
)
async def test_a_name_resolving_to_a_denied_address_is_refused_at_connect_time(
    broker: Broker, name: str, outside: list[Any]
) -> None:
    resolver = FakeResolver(
        {
            "metadata.test": ["169.254.169.254"],
            "mixed.test": ["127.0.0.1", "fd00:ec2::254"],
        }
    )
    broker.state.egress.resolver = resolver

    answer = await request("GET", f"http://{name}/latest", proxy=broker.proxy_url)
    status, problem = await raw_connect(broker, f"{name}:443")

    assert answer.status == 403, answer
    assert answer.problem["type"] == REFUSED
    assert (status, problem["type"]) == (403, REFUSED)
    assert resolver.lookups == [name, name]
    assert outside == []


async def test_a_name_resolving_to_the_admin_port_is_refused(broker: Broker) -> None:
    broker.state.egress.resolver = FakeResolver({"admin.test": ["127.0.0.1"]})
    port = port_of(broker.admin_url)

    answer = await request(
        "GET", f"http://admin.test:{port}/metrics", proxy=broker.proxy_url
    )

    assert answer.status == 403, answer
    assert answer.problem["type"] == REFUSED


async def test_a_name_resolving_to_an_allowed_address_passes(broker: Broker) -> None:
    async with serve_handler(hello) as upstream:
        broker.state.egress.resolver = FakeResolver({"fine.test": ["127.0.0.1"]})
        answer = await request(
            "GET", f"http://fine.test:{port_of(upstream)}/", proxy=broker.proxy_url
        )
        status, _ = await raw_connect(broker, f"fine.test:{port_of(upstream)}")

    assert (answer.status, answer.body) == (200, b"hello")
    assert status == 200


async def test_the_gateway_refuses_loopback_pass_through_and_its_admin_port(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        running_broker(database_url, tmp_path, gateway=True) as broker,
        serve_handler(hello) as upstream,
    ):
        auth = basic("acme", await make_key(broker.state.store, "acme"))
        answers = [
            await request(
                method, url, proxy=broker.proxy_url, headers={"Proxy-Authorization": auth}
            )
            for method, url in [
                ("GET", f"{upstream}/"),
                ("POST", f"{upstream}/internal/delete-everything"),
                ("GET", f"{broker.admin_url}/metrics"),
                ("GET", f"http://localhost:{port_of(broker.admin_url)}/metrics"),
            ]
        ]

        assert [a.status for a in answers] == [403] * 4, answers
        assert {a.problem["type"] for a in answers} == {REFUSED}
        assert "EFFECT_BROKER_GATEWAY" in answers[0].problem["detail"]
        assert await ledger_rows(database_url) == []


async def test_proxy_allow_opens_a_gateway_refusal_and_proxy_deny_closes_a_host(
    database_url: str, tmp_path: Path
) -> None:
    async with serve_handler(hello) as allowed, serve_handler(hello) as denied:
        extra = (
            f'  allow: ["127.0.0.1:{port_of(allowed)}"]\n'
            f'  deny: ["localhost:{port_of(denied)}"]\n'
        )
        async with running_broker(
            database_url, tmp_path, gateway=True, routes=with_proxy(extra)
        ) as broker:
            auth = {
                "Proxy-Authorization": basic(
                    "acme", await make_key(broker.state.store, "acme")
                )
            }
            ok = await request("GET", f"{allowed}/", proxy=broker.proxy_url, headers=auth)
            refused = await request(
                "GET", f"{denied}/", proxy=broker.proxy_url, headers=auth
            )

    assert (ok.status, ok.body) == (200, b"hello")
    assert refused.status == 403
    assert refused.problem["type"] == REFUSED
    assert "proxy.deny" in refused.problem["detail"]


async def test_a_cidr_in_proxy_deny_refuses_pass_through_and_tunnels(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        serve_handler(hello) as upstream,
        running_broker(
            database_url, tmp_path, routes=with_proxy('  deny: ["127.0.0.0/8"]\n')
        ) as broker,
    ):
        answer = await request("GET", f"{upstream}/", proxy=broker.proxy_url)
        status, problem = await raw_connect(broker, upstream.removeprefix("http://"))

    assert answer.status == 403
    assert "127.0.0.0/8" in answer.problem["detail"]
    assert (status, problem["type"]) == (403, REFUSED)


async def test_route_traffic_is_not_subject_to_the_egress_lists(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(
        database_url, tmp_path, routes=with_proxy('  deny: ["127.0.0.0/8"]\n')
    ) as broker:
        answer = await request(
            "POST",
            f"{broker.proxy_url}/payments/v1/charges",
            headers={"Content-Type": "application/json", "Operation-Key": "k-1"},
            data=json.dumps({"amount": 1, "currency": "usd", "order_id": "o-1"}),
        )

    assert answer.status == 201, answer
    assert len(await ledger_rows(database_url)) == 1


def query_form(database_url: str) -> str | None:
    """The same TCP ledger, spelled with host and port as query parameters (as libpq and
    asyncpg accept), or None when the ledger listens on a Unix socket."""
    url = URL(database_url)
    if url.port is None or not url.host:
        return None
    return f"postgresql://{url.user}@{url.path}?host={url.host}&port={url.port}"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_connect_to_a_ledger_named_in_query_parameters_is_refused(
    database_url: str, tmp_path: Path, host: str
) -> None:
    dsn = query_form(database_url)
    if dsn is None:
        pytest.skip("the ledger listens on a Unix socket here; CI's second run uses TCP")
    async with running_broker(dsn, tmp_path) as broker:
        status, problem = await raw_connect(broker, f"{host}:{URL(database_url).port}")

    assert status == 403
    assert problem["type"] == REFUSED
    assert "ledger" in problem["detail"]
