"""doctor's verdicts against deliberately broken set-ups, compared with what the proxy
itself would do. It said "upstream TLS ok" and "reachable" while every request to that
upstream failed 502 upstream-tls, and "CA ok - none" next to an ``up`` that intercepts
with its own CA."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest
from aiohttp import web
from typer.testing import CliRunner, Result

from effect_broker.cli import _register, app
from effect_broker.cli.ca import ensure_ca
from effect_broker.cli.local_state import RunningUp
from effect_broker.crypto import MasterKey
from tests.integration.tls_support import ChargeTarget, TlsWorld, serve_tls

ROUTES = """\
version: 1
contracts:
  - {{name: payments.charge, version: "1", safety: idempotent,
     idempotency_header: Idempotency-Key, key_retention: 1h, timeout: 5s}}
routes:
  - name: charge
    match: {{method: POST, host: api.test, path: /v1/charges}}
    upstream: {upstream}
    contract: payments.charge
"""


async def doctor(tmp_path: Path, upstream: str, **env: str | None) -> Result:
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES.format(upstream=upstream))
    _register()
    return await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["doctor", "--routes", str(routes), "--data-dir", str(tmp_path / "up")],
        env={
            "EFFECT_BROKER_MASTER_KEY": MasterKey.generate().to_base64(),
            "EFFECT_BROKER_DATABASE_URL": None,
            "EFFECT_BROKER_DATA_DIR": None,
            "EFFECT_BROKER_CA_CERT": None,
            "EFFECT_BROKER_CA_KEY": None,
            "EFFECT_BROKER_UPSTREAM_CA_FILE": None,
            "COLUMNS": "1000",
            **env,
        },
    )


def row(result: Result, check: str) -> str:
    """The table row of one check, blanks folded."""
    [line] = [
        line for line in result.output.splitlines() if re.search(rf"│ {check}\s+│", line)
    ]
    return re.sub(r"\s+", " ", line)


async def test_an_upstream_certificate_the_proxy_does_not_trust_fails(
    tmp_path: Path,
) -> None:
    world = TlsWorld(tmp_path / "tls")
    async with serve_tls(ChargeTarget().handle, world.server_context()) as port:
        untrusted = await doctor(tmp_path, f"https://127.0.0.1:{port}")
        trusted = await doctor(
            tmp_path,
            f"https://127.0.0.1:{port}",
            EFFECT_BROKER_UPSTREAM_CA_FILE=str(world.target_ca_file),
        )

    failing = row(untrusted, f"upstream 127.0.0.1:{port}")
    assert "FAIL" in failing, untrusted.output
    assert "certificate" in failing and "502 upstream-tls" in failing
    assert "EFFECT_BROKER_UPSTREAM_CA_FILE" in failing and "routes charge" in failing
    assert untrusted.exit_code == 1
    passing = row(trusted, f"upstream 127.0.0.1:{port}")
    assert "ok" in passing and "TLS verified, HEAD answered 200" in passing, passing


async def test_an_upstream_that_does_not_answer_is_a_warning(tmp_path: Path) -> None:
    app_ = web.Application()
    runner = web.AppRunner(app_)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await runner.cleanup()  # nothing listens there any more

    result = await doctor(tmp_path, f"http://127.0.0.1:{port}")

    line = row(result, f"upstream 127.0.0.1:{port}")
    assert "warning" in line and "cannot reach it now" in line


async def test_next_to_up_the_ca_is_ups_own(tmp_path: Path) -> None:
    """up intercepts with ./.effect-broker/ca.pem; doctor must not say "no CA"."""
    alone = await doctor(tmp_path, "http://127.0.0.1:9")
    cert, _, _ = ensure_ca(tmp_path / "up")  # what up makes on its first start
    beside_up = await doctor(tmp_path, "http://127.0.0.1:9")

    assert "none configured, and no CA of `effect-broker up`" in row(alone, "CA")
    line = row(beside_up, "CA")
    assert f"{cert}: CONNECT to watched hosts is intercepted" in line, line
    assert "none" not in line
    assert (
        f"using {cert}" in beside_up.output.replace("\n", " ")
        or str(cert) in (beside_up.output.splitlines()[0])
    )


async def test_beside_up_without_a_routes_file_doctor_checks_the_routes_up_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up --demo` in a folder without routes.yaml serves the packaged demo routes;
    doctor beside it said "routes.yaml: no such file"."""
    served = tmp_path / "up" / "demo-routes.yaml"
    served.parent.mkdir()
    served.write_text(ROUTES.format(upstream="http://127.0.0.1:9"))
    RunningUp(os.getpid(), "http://127.0.0.1:1", "http://127.0.0.1:2", str(served)).write(
        served.parent
    )
    folder = tmp_path / "empty"
    folder.mkdir()
    monkeypatch.chdir(folder)
    _register()

    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["doctor", "--data-dir", str(tmp_path / "up")],
        env={
            "EFFECT_BROKER_MASTER_KEY": MasterKey.generate().to_base64(),
            "EFFECT_BROKER_ROUTES": None,
            "EFFECT_BROKER_DATABASE_URL": None,
            "COLUMNS": "1000",
        },
    )

    assert f"using {served}" in result.output.splitlines()[0]
    line = row(result, "routes")
    assert "ok" in line and f"{served}: 1 route" in line, line


async def test_a_missing_secret_is_its_own_failure_not_a_broken_routes_file(
    tmp_path: Path,
) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        ROUTES.format(upstream="http://127.0.0.1:9")
        + '    inject_headers: {Authorization: "Bearer ${env:PAYMENTS_TOKEN_X}"}\n'
    )
    _register()

    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["doctor", "--routes", str(routes), "--data-dir", str(tmp_path / "up")],
        env={
            "EFFECT_BROKER_MASTER_KEY": MasterKey.generate().to_base64(),
            "EFFECT_BROKER_DATABASE_URL": None,
            "PAYMENTS_TOKEN_X": None,
            "COLUMNS": "1000",
        },
    )

    assert "ok" in row(result, "routes")
    line = row(result, "secrets")
    assert "FAIL" in line and "PAYMENTS_TOKEN_X is not set" in line, line
    assert "upstream 127.0.0.1:9" in result.output  # the routes are still checked
    assert result.exit_code == 1
