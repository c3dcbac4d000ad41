"""Real HTTPS clients through the intercepting proxy, configured the way an agent's
container is: ``HTTPS_PROXY`` names the proxy, and the proxy's CA is trusted through
each ecosystem's usual variable (``CURL_CA_BUNDLE``, ``REQUESTS_CA_BUNDLE``,
``SSL_CERT_FILE``, ``NODE_EXTRA_CA_CERTS``). Each client runs in its own process with
only that environment, and calls ``https://api.test/v1/charges``; the route sends it on
to a TLS target whose certificate comes from a separate test CA that only the proxy
trusts (``EFFECT_BROKER_UPSTREAM_CA_FILE``).

For every client: one effect at the target, the retry replayed byte for byte, a drifted
payload refused with 422, and the client's own ``Idempotency-Key`` replaced by the
derived key. stripe-python is used unchanged except for ``HTTPS_PROXY``, the CA bundle
and ``idempotency_key=``, against a fake charges endpoint standing in for
api.stripe.com.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from effect_broker.canonical import downstream_key
from effect_broker.proxy.tls_ca import trust_bundle
from tests.integration.harness import Broker, ledger_rows, running_broker
from tests.integration.node_support import NODE_DIR, node_binary, node_ready
from tests.integration.tls_support import ChargeTarget, TlsWorld, serve_tls

ROOT = Path(__file__).parents[2]
PY_CLIENT = Path(__file__).parent / "clients" / "py_client.py"
CHARGE = b'{"amount": 1000, "currency": "usd", "order_id": "order-42"}'
DRIFTED = b'{"amount": 9999, "currency": "usd", "order_id": "order-42"}'
OPERATION_KEY = "order-42:charge"
CLIENT_KEY = "client-chosen-key"
URL = "https://api.test/v1/charges"


def routes(port: int) -> str:
    return f"""\
version: 1
contracts:
  - name: payments.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 5s
  - name: stripe.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    operation_key_header: Idempotency-Key
    key_retention: 24h
    timeout: 5s
routes:
  - name: charge
    match: {{method: POST, host: api.test, path: /v1/charges}}
    upstream: https://127.0.0.1:{port}
    contract: payments.charge
  - name: stripe-charges
    match: {{method: POST, host: api.stripe.com, path: /v1/charges}}
    upstream: https://127.0.0.1:{port}
    contract: stripe.charge
"""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclass
class Setup:
    world: TlsWorld
    target: ChargeTarget
    port: int
    broker: Broker
    environ: dict[str, str]

    def derived(self, operation_key: str) -> str:
        tenant = self.broker.state.tenant
        return downstream_key(
            self.broker.state.keyring.tenant_hmac_key(tenant), tenant, operation_key
        )


@asynccontextmanager
async def setup(database_url: str, tmp_path: Path) -> AsyncIterator[Setup]:
    world = TlsWorld(tmp_path)
    target = ChargeTarget()
    bundle = tmp_path / "ca-bundle.pem"  # what `effect-broker ca bundle` writes
    bundle.write_bytes(trust_bundle(world.ca_cert.read_bytes()))
    async with (
        serve_tls(target.handle, world.server_context()) as port,
        running_broker(
            database_url, tmp_path, routes=lambda _: routes(port), **world.settings()
        ) as broker,
    ):
        environ = {
            name: value
            for name, value in os.environ.items()
            if name.lower() not in ("no_proxy", "all_proxy", "http_proxy", "https_proxy")
        }
        environ.update(
            HTTPS_PROXY=broker.proxy_url,
            https_proxy=broker.proxy_url,
            HTTP_PROXY=broker.proxy_url,
            http_proxy=broker.proxy_url,
            SSL_CERT_FILE=str(bundle),
            REQUESTS_CA_BUNDLE=str(bundle),
            CURL_CA_BUNDLE=str(bundle),
            NODE_EXTRA_CA_CERTS=str(world.ca_cert),
        )
        yield Setup(world, target, port, broker, environ)


async def run(args: list[str], environ: dict[str, str], stdin: bytes) -> bytes:
    process = await asyncio.create_subprocess_exec(
        *args,
        env=environ,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    assert process.returncode == 0, err.decode(errors="replace")
    return out


def _reply(out: bytes) -> Reply:
    answer = json.loads(out)
    return Reply(
        answer["status"],
        {name.lower(): value for name, value in answer["headers"]},
        base64.b64decode(answer["body_b64"]),
    )


async def call_python(
    client: str, s: Setup, headers: dict[str, str], body: bytes
) -> Reply:
    args = [sys.executable, str(PY_CLIENT), client, URL, json.dumps(headers)]
    return _reply(await run(args, s.environ, body))


async def call_curl(s: Setup, headers: dict[str, str], body: bytes, tmp: Path) -> Reply:
    head, out = tmp / "curl-head", tmp / "curl-out"
    args = ["curl", "-sS", "-X", "POST", "--data-binary", "@-", "-D", str(head)]
    args += ["-o", str(out)]
    for name, value in headers.items():
        args += ["-H", f"{name}: {value}"]
    await run([*args, URL], s.environ, body)
    block = head.read_bytes().decode("latin-1").strip().split("\r\n\r\n")[-1]
    status_line, *lines = block.split("\r\n")
    pairs = [line.split(":", 1) for line in lines]
    return Reply(
        int(status_line.split()[1]),
        {name.strip().lower(): value.strip() for name, value in pairs},
        out.read_bytes(),
    )


async def call_node(
    s: Setup, headers: dict[str, str], body: bytes, url: str = URL
) -> Reply:
    args = ["node", str(NODE_DIR / "fetch_client.mjs"), url, json.dumps(headers)]
    return _reply(await run(args, s.environ, body))


CLIENTS = ["curl", "requests", "httpx", "aiohttp", "urllib", "node"]


@pytest.mark.parametrize("client", CLIENTS)
async def test_client_through_https_proxy_gets_one_effect_and_replays(
    database_url: str, tmp_path: Path, client: str
) -> None:
    if client == "curl" and shutil.which("curl") is None:
        pytest.skip("curl is not installed on this machine")
    if client == "node":
        node_ready()

    async with setup(database_url, tmp_path) as s:

        async def call(body: bytes) -> Reply:
            headers = {
                "Content-Type": "application/json",
                "Operation-Key": OPERATION_KEY,
                "Idempotency-Key": CLIENT_KEY,
            }
            if client == "curl":
                return await call_curl(s, headers, body, tmp_path)
            if client == "node":
                return await call_node(s, headers, body)
            return await call_python(client, s, headers, body)

        first = await call(CHARGE)
        assert first.status == 200, first
        assert first.headers["effect-status"] == "succeeded"
        assert json.loads(first.body)["id"] == "ch_1"
        assert "idempotent-replayed" not in first.headers

        retry = await call(CHARGE)
        assert retry.status == 200, retry
        assert retry.headers["idempotent-replayed"] == "true"
        assert retry.headers["effect-id"] == first.headers["effect-id"]
        assert retry.body == first.body

        drift = await call(DRIFTED)
        assert drift.status == 422, drift
        assert json.loads(drift.body)["type"].endswith("/payload-mismatch")

        posts = s.target.posts()
        assert len(posts) == 1 and len(s.target.charges) == 1
        assert posts[0].headers["idempotency-key"] == s.derived(OPERATION_KEY)
        assert CLIENT_KEY not in posts[0].headers.values()
        assert "operation-key" not in posts[0].headers
        assert posts[0].body == CHARGE
        rows = await ledger_rows(database_url)
        assert [(r["operation_key"], r["status"]) for r in rows] == [
            (OPERATION_KEY, "succeeded")
        ]


@pytest.mark.parametrize("url", ["http://api.test/v1/charges", URL])
async def test_node_proxy_agent_records_once_over_http_and_https(
    database_url: str, tmp_path: Path, url: str
) -> None:
    """undici's EnvHttpProxyAgent tunnels http:// as well (CONNECT api.test:80): the
    plain HTTP inside is served through the flow, recorded once and replayed."""
    node_ready()
    async with setup(database_url, tmp_path) as s:
        headers = {"Content-Type": "application/json", "Operation-Key": "node-key"}
        first = await call_node(s, headers, CHARGE, url)
        retry = await call_node(s, headers, CHARGE, url)
        assert first.status == 200, first
        assert first.headers["effect-status"] == "succeeded"
        assert retry.headers["idempotent-replayed"] == "true"
        assert retry.headers["effect-id"] == first.headers["effect-id"]
        assert retry.body == first.body
        assert len(s.target.posts()) == 1
        rows = await ledger_rows(database_url)
        assert [(r["operation_key"], r["status"]) for r in rows] == [
            ("node-key", "succeeded")
        ]


@pytest.mark.parametrize(
    ("major", "script", "extra"),
    [
        ("22", "fetch_client.mjs", {}),
        ("24", "fetch_client.mjs", {}),
        ("24", "fetch_env_proxy.mjs", {"NODE_USE_ENV_PROXY": "1"}),
    ],
    ids=["node22-agent", "node24-agent", "node24-env-proxy"],
)
@pytest.mark.parametrize("url", ["http://api.test/v1/charges", URL])
async def test_other_node_versions_record_once_over_http_and_https(
    database_url: str,
    tmp_path: Path,
    major: str,
    script: str,
    extra: dict[str, str],
    url: str,
) -> None:
    """Node 22 and 24 with undici's EnvHttpProxyAgent, and Node 24's own fetch with
    NODE_USE_ENV_PROXY=1: one effect, the retry replayed, over http:// and https://."""
    binary = node_binary(major)
    async with setup(database_url, tmp_path) as s:
        environ = {**s.environ, **extra}
        headers = {"Content-Type": "application/json", "Operation-Key": "node-key"}
        args = [str(binary), str(NODE_DIR / script), url, json.dumps(headers)]
        first = _reply(await run(args, environ, CHARGE))
        retry = _reply(await run(args, environ, CHARGE))
        assert first.status == 200, first
        assert first.headers["effect-status"] == "succeeded"
        assert retry.headers["idempotent-replayed"] == "true"
        assert retry.body == first.body
        assert len(s.target.posts()) == 1


STRIPE_SCRIPT = """\
import os, sys, json
import stripe

stripe.api_key = "sk_test_effect_broker"
stripe.ca_bundle_path = os.environ["SSL_CERT_FILE"]
charge = stripe.Charge.create(
    amount=1000, currency="usd", source="tok_visa", idempotency_key="order-42:charge"
)
print(json.dumps({"id": charge.id, "amount": charge.amount}))
"""


async def test_stripe_python_unchanged_charges_once(
    database_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("stripe")
    async with setup(database_url, tmp_path) as s:
        script = [sys.executable, "-c", STRIPE_SCRIPT]
        first = json.loads(await run(script, s.environ, b""))
        second = json.loads(await run(script, s.environ, b""))
        assert first == second == {"id": "ch_1", "amount": 1000}
        posts = s.target.posts()
        assert len(posts) == 1 and len(s.target.charges) == 1
        assert posts[0].headers["idempotency-key"] == s.derived("order-42:charge")
        rows = await ledger_rows(database_url)
        assert [(r["operation_key"], r["status"]) for r in rows] == [
            ("order-42:charge", "succeeded")
        ]


async def test_curl_to_an_unwatched_host_sees_the_targets_own_certificate(
    database_url: str, tmp_path: Path
) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed on this machine")
    async with setup(database_url, tmp_path) as s:
        url = f"https://127.0.0.1:{s.port}/v1/charges"
        args = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"]
        args += ["-H", "Idempotency-Key: mine", "--data-binary", "@-", url]
        # Trusting only the proxy's CA fails: the tunnel is blind, the certificate
        # is the target's own.
        process = await asyncio.create_subprocess_exec(
            *args,
            env=s.environ,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await process.communicate(CHARGE)
        assert process.returncode == 60, err  # curl: peer certificate not trusted
        environ = {**s.environ, "CURL_CA_BUNDLE": str(s.world.target_ca_file)}
        assert await run(args, environ, CHARGE) == b"200"
        assert [p.headers["idempotency-key"] for p in s.target.posts()] == ["mine"]
        assert await ledger_rows(database_url) == []
