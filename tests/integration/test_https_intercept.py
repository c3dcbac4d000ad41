"""CONNECT to a host that routes watch is intercepted with the proxy's own CA, and the
requests inside go through the same flow as forward mode; other hosts are tunnelled
blind; upstream TLS is always verified.

Raw sockets and Python's ``ssl`` here, so each test sees exactly which certificate a
client is shown; the real clients are in ``test_https_clients``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from pathlib import Path

import pytest
from aiohttp import web

from effect_broker.canonical import downstream_key
from effect_broker.proxy.tls_ca import CA_COMMON_NAME
from effect_broker.tenancy import new_api_key
from tests.integration.harness import (
    PROBLEMS,
    address,
    ledger_rows,
    request,
    serve_handler,
)
from tests.integration.intercept_support import Setup, setup
from tests.integration.tls_support import (
    CHARGE,
    ChargeTarget,
    TlsWorld,
    charge_request,
    connect_raw,
    open_tunnel,
    serve_tls,
    split,
)


async def post_in_tunnel(s: Setup, key: str, body: bytes = CHARGE) -> bytes:
    tunnel = await open_tunnel(
        s.proxy, "api.test:443", s.world.client_context(), server_hostname="api.test"
    )
    try:
        assert tunnel.issuer()["commonName"] == CA_COMMON_NAME
        return await tunnel.exchange(charge_request(key, body))
    finally:
        await tunnel.close()


async def test_intercepted_tunnel_records_replays_and_refuses_drift(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        first = await post_in_tunnel(s, "order-42:charge")
        status, headers, body = split(first)
        assert status == 200, first
        assert headers["effect-status"] == "succeeded"
        assert json.loads(body)["id"] == "ch_1"
        again = await post_in_tunnel(s, "order-42:charge")
        status, replay_headers, replay_body = split(again)
        assert status == 200 and replay_headers["idempotent-replayed"] == "true"
        assert replay_body == body
        drift = await post_in_tunnel(s, "order-42:charge", b'{"amount": 5}')
        status, _, problem = split(drift)
        assert status == 422
        assert json.loads(problem)["type"] == PROBLEMS + "payload-mismatch"
        posts = s.target.posts()
        assert len(posts) == 1 and len(s.target.charges) == 1
        sent = posts[0].headers
        assert sent["idempotency-key"] == downstream_key(
            s.broker.state.keyring.tenant_hmac_key("acme"), "acme", "order-42:charge"
        )
        assert "operation-key" not in sent
        rows = await ledger_rows(database_url)
        assert [(r["operation_key"], r["status"]) for r in rows] == [
            ("order-42:charge", "succeeded")
        ]


async def test_leaf_names_the_sni_host_and_offers_http1_only(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        context = s.world.client_context()
        context.set_alpn_protocols(["h2", "http/1.1"])
        tunnel = await open_tunnel(
            s.proxy, "api.test:443", context, server_hostname="api.test"
        )
        try:
            cert = tunnel.peer.getpeercert()
            assert cert is not None
            assert cert["subjectAltName"] == (("DNS", "api.test"),)
            assert tunnel.peer.selected_alpn_protocol() == "http/1.1"
        finally:
            await tunnel.close()


async def test_unmatched_request_in_tunnel_passes_through_over_verified_tls(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        authority = f"localhost:{s.port}"
        tunnel = await open_tunnel(
            s.proxy, authority, s.world.client_context(), server_hostname="localhost"
        )
        try:
            assert tunnel.issuer()["commonName"] == CA_COMMON_NAME
            raw = await tunnel.exchange(
                f"GET /health HTTP/1.1\r\nHost: {authority}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
        finally:
            await tunnel.close()
        status, _, body = split(raw)
        assert status == 200 and json.loads(body) == {"ok": True, "path": "/health"}
        assert [seen.path for seen in s.target.seen] == ["/health"]
        assert await ledger_rows(database_url) == []


async def test_ip_literal_gets_an_ip_san(database_url: str, tmp_path: Path) -> None:
    async with setup(database_url, tmp_path) as s:
        tunnel = await open_tunnel(
            s.proxy,
            "127.0.0.9:443",
            s.world.client_context(),
            server_hostname="127.0.0.9",
        )
        try:
            cert = tunnel.peer.getpeercert()
            assert cert is not None
            assert cert["subjectAltName"] == (("IP Address", "127.0.0.9"),)
        finally:
            await tunnel.close()


async def test_unwatched_host_is_tunnelled_blind_and_nothing_recorded(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path, watch_loopback=False) as s:
        # 127.0.0.1 is not watched: blind, the client sees the target's own leaf.
        authority = f"127.0.0.1:{s.port}"
        tunnel = await open_tunnel(
            s.proxy, authority, s.world.client_context(), server_hostname="127.0.0.1"
        )
        try:
            assert tunnel.issuer()["organizationalUnitName"].startswith("Testing CA")
            raw = await tunnel.exchange(
                charge_request("blind-1", host=authority).replace(
                    b"Operation-Key: blind-1\r\n", b""
                )
            )
        finally:
            await tunnel.close()
        assert split(raw)[0] == 200
        assert await ledger_rows(database_url) == []
        assert s.target.posts()[0].headers["idempotency-key"] == "client-chosen"


async def test_upstream_certificate_failure_is_502_upstream_tls_and_not_sent(
    database_url: str, tmp_path: Path
) -> None:
    stranger = TlsWorld(tmp_path / "stranger")
    other = ChargeTarget()
    async with (
        serve_tls(other.handle, stranger.server_context()) as port,
        setup(database_url, tmp_path, untrusted_port=port) as s,
    ):
        answer = await request(
            "POST",
            "http://untrusted.test/v1/charges",
            proxy=s.broker.proxy_url,
            headers={"Operation-Key": "k-1", "Content-Type": "application/json"},
            data=CHARGE,
        )
        assert answer.status == 502, answer
        problem = answer.problem
        assert problem["type"] == PROBLEMS + "upstream-tls"
        assert "127.0.0.1" in problem["detail"] and "certificate" in problem["detail"]
        assert other.seen == []
        rows = await ledger_rows(database_url)
        assert [(r["operation_key"], r["status"]) for r in rows] == [("k-1", "retryable")]


async def test_without_a_ca_guarded_connect_is_refused_with_the_way_to_enable(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path, ca_cert=None, ca_key=None) as s:
        reader, writer, head = await connect_raw(s.proxy, "api.test:443")
        body = await reader.read()
        writer.close()
        assert head.startswith(b"HTTP/1.1 403")
        assert "effect-broker ca init" in json.loads(body)["detail"]


@pytest.mark.parametrize(
    "garbage",
    # Plain HTTP is served, not handshaken (see test_plain_tunnel); NUL bytes are
    # not HTTP either, and get a 400 before the close.
    [b"\x16\x03\x01\x00\x05hello", b"\x00" * 64],
)
async def test_garbage_instead_of_a_client_hello_leaves_the_proxy_serving(
    database_url: str, tmp_path: Path, garbage: bytes
) -> None:
    async with setup(database_url, tmp_path) as s:
        reader, writer, head = await connect_raw(s.proxy, "api.test:443")
        assert head.startswith(b"HTTP/1.1 200")
        writer.write(garbage)
        await writer.drain()
        # The handshake fails and the proxy closes the tunnel: EOF, not a hang.
        await asyncio.wait_for(reader.read(), 5)
        assert reader.at_eof()
        writer.close()
        assert split(await post_in_tunnel(s, "after-garbage"))[0] == 200


async def test_client_closing_mid_handshake_leaves_the_proxy_serving(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        _, writer, head = await connect_raw(s.proxy, "api.test:443")
        assert head.startswith(b"HTTP/1.1 200")
        # The first bytes of a real client hello, then nothing: the client is gone.
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        client = s.world.client_context().wrap_bio(
            incoming, outgoing, server_hostname="api.test"
        )
        with pytest.raises(ssl.SSLWantReadError):
            client.do_handshake()
        hello = outgoing.read()
        writer.write(hello[: len(hello) // 2])
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        assert split(await post_in_tunnel(s, "after-close"))[0] == 200


async def test_gateway_tunnel_belongs_to_the_tenant_named_on_the_connect(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path, gateway=True, watch_loopback=False) as s:
        store = s.broker.state.store
        keys = {}
        for tenant in ("acme", "globex"):
            key = new_api_key()
            await store.add_api_key(tenant, key.key_id, key.secret_hash)
            keys[tenant] = key.api_key

        def auth(tenant: str, secret: str) -> str:
            token = base64.b64encode(f"{tenant}:{secret}".encode()).decode()
            return f"Proxy-Authorization: Basic {token}\r\n"

        for headers in (
            "",
            auth("acme", keys["acme"] + "x"),
            auth("globex", keys["acme"]),
        ):
            _, writer, head = await connect_raw(s.proxy, "api.test:443", headers=headers)
            writer.close()
            assert head.startswith(b"HTTP/1.1 407"), head
            assert b"Proxy-Authenticate: Basic" in head

        answers = {}
        for tenant in ("acme", "globex", "acme"):
            tunnel = await open_tunnel(
                s.proxy,
                "api.test:443",
                s.world.client_context(),
                server_hostname="api.test",
                headers=auth(tenant, keys[tenant]),
            )
            try:
                raw = await tunnel.exchange(charge_request("order-7:charge"))
            finally:
                await tunnel.close()
            status, headers_, body = split(raw)
            assert status == 200, raw
            answers.setdefault(tenant, []).append((headers_["effect-id"], body))
        # One effect per tenant for the same key; the second acme call is its replay.
        assert answers["acme"][0] == answers["acme"][1]
        assert answers["acme"][0][0] != answers["globex"][0][0]
        keyring = s.broker.state.keyring
        assert sorted(p.headers["idempotency-key"] for p in s.target.posts()) == sorted(
            downstream_key(keyring.tenant_hmac_key(t), t, "order-7:charge")
            for t in ("acme", "globex")
        )

        # A gateway still never tunnels blind, credentials or not.
        _, writer, head = await connect_raw(
            s.proxy, f"127.0.0.1:{s.port}", headers=auth("acme", keys["acme"])
        )
        writer.close()
        assert head.startswith(b"HTTP/1.1 403"), head


async def test_bytes_before_the_200_are_refused_not_guessed_at(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        reader, writer = await asyncio.open_connection(*s.proxy)
        writer.write(
            b"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n\x16\x03"
        )
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 400"), answer
        assert b"wait for" in answer


async def test_one_tunnel_carries_many_requests(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        tunnel = await open_tunnel(
            s.proxy, "api.test:443", s.world.client_context(), server_hostname="api.test"
        )
        answers = []
        try:
            for key in ("k-1", "k-1", "k-2"):
                raw = charge_request(key).replace(b"Connection: close\r\n", b"")
                tunnel.writer.write(raw)
                head = await tunnel.reader.readuntil(b"\r\n\r\n")
                status, headers, _ = split(head)
                body = await tunnel.reader.readexactly(int(headers["content-length"]))
                answers.append((status, headers.get("idempotent-replayed"), body))
        finally:
            await tunnel.close()
        assert [(status, replayed) for status, replayed, _ in answers] == [
            (200, None),
            (200, "true"),
            (200, None),
        ]
        assert answers[0][2] == answers[1][2] != answers[2][2]
        assert len(s.target.posts()) == len(s.target.charges) == 2


async def exchange_in_tunnel(s: Setup, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    tunnel = await open_tunnel(
        s.proxy, "api.test:443", s.world.client_context(), server_hostname="api.test"
    )
    try:
        return split(await tunnel.exchange(raw))
    finally:
        await tunnel.close()


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{other}/secret",
        "https://127.0.0.1:{other}/secret",
        "http://api.test/secret",  # the tunnel's host, another scheme and port
        "https://api.test:8443/secret",
    ],
)
async def test_absolute_form_to_another_origin_inside_a_tunnel_is_421(
    database_url: str, tmp_path: Path, target: str
) -> None:
    hits: list[str] = []

    async def other_origin(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="leaked")

    async with (
        serve_handler(other_origin) as other_url,
        setup(database_url, tmp_path) as s,
    ):
        written = target.format(other=address(other_url)[1])
        status, headers, body = await exchange_in_tunnel(
            s,
            f"GET {written} HTTP/1.1\r\nHost: api.test\r\n"
            "Connection: close\r\n\r\n".encode(),
        )
        assert status == 421, body
        assert headers["content-type"] == "application/problem+json"
        problem = json.loads(body)
        assert problem["type"] == PROBLEMS + "misdirected-request"
        assert "api.test:443" in problem["detail"]
        assert hits == [] and s.target.seen == []
        assert await ledger_rows(database_url) == []


@pytest.mark.parametrize(
    "target", ["https://api.test/v1/charges", "https://API.test:443/v1/charges"]
)
async def test_absolute_form_naming_the_tunnels_own_origin_is_recorded(
    database_url: str, tmp_path: Path, target: str
) -> None:
    async with setup(database_url, tmp_path) as s:
        raw = charge_request("abs-1").replace(b"/v1/charges", target.encode(), 1)
        status, headers, _ = await exchange_in_tunnel(s, raw)
        assert status == 200 and headers["effect-status"] == "succeeded"
        assert [seen.path for seen in s.target.posts()] == ["/v1/charges"]
        rows = await ledger_rows(database_url)
        assert [(r["operation_key"], r["status"]) for r in rows] == [
            ("abs-1", "succeeded")
        ]


def unchecked_client(world: TlsWorld) -> ssl.SSLContext:
    """A client that trusts the proxy's CA but does not match names itself, so what
    the proxy would sign for a name shows in the certificate it presents."""
    context = world.client_context()
    context.check_hostname = False
    return context


@pytest.mark.parametrize("sni", ["localhost", "elsewhere.test", "*.test", "*.api.test"])
async def test_a_leaf_is_signed_only_for_the_connect_host(
    database_url: str, tmp_path: Path, sni: str
) -> None:
    async with setup(database_url, tmp_path) as s:
        _, writer, head = await connect_raw(s.proxy, "api.test:443")
        assert head.startswith(b"HTTP/1.1 200"), head
        try:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                await writer.start_tls(unchecked_client(s.world), server_hostname=sni)
                cert = writer.get_extra_info("ssl_object").getpeercert()
                pytest.fail(f"the proxy signed {cert['subjectAltName']} for SNI {sni}")
        finally:
            writer.close()


async def test_the_connect_host_in_another_spelling_gets_its_leaf(
    database_url: str, tmp_path: Path
) -> None:
    async with setup(database_url, tmp_path) as s:
        tunnel = await open_tunnel(
            s.proxy,
            "api.test:443",
            unchecked_client(s.world),
            server_hostname="API.Test.",
        )
        try:
            cert = tunnel.peer.getpeercert()
            assert cert is not None
            assert cert["subjectAltName"] == (("DNS", "api.test"),)
        finally:
            await tunnel.close()
