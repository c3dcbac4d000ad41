"""``effect-broker contracts verify``: honest targets hold, lying ones are caught.

Every check sends real HTTP requests to a real server: the demo payment target in its
idempotent and reconcilable modes, and fakes that each break one claim on purpose.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from effect_broker.config.routes_file import load_routes
from effect_broker.conformance import SandboxRequest, Verdict, VerifyOptions, sandbox_for
from effect_broker.conformance import verify as run_verify
from effect_broker.conformance.verdicts import (
    DRIFT_REFUSED,
    KEY_RETENTION,
    KIT_BLOCKS_TOMBSTONED,
    KIT_FINDS_COMMITTED,
    KIT_REFUSES_TOMBSTONE_AFTER_COMMIT,
    PROBE_ABSENT_FOR_UNSENT,
    PROBE_FINDS_COMMITTED,
    SAME_KEY_ONE_EFFECT,
)
from effect_broker.demo.payment_target import build_app
from tests.integration.lying_targets import (
    expires_early,
    ignores_key,
    kit_ignores_tombstones,
    lagging_lookup,
    serving,
    stripe_shaped,
)

EFFECT_BROKER = Path(sys.executable).with_name("effect-broker")
BODY = b'{"amount": 100, "currency": "usd", "order_id": "contract-check"}'
DRIFT = b'{"amount": 101, "currency": "usd", "order_id": "contract-check"}'


def routes_file(tmp_path: Path, upstream: str) -> Path:
    """Two routes on ``upstream``: idempotent (24h) and reconcilable (300ms bound)."""
    path = tmp_path / "routes.yaml"
    path.write_text(
        f"""version: 1
contracts:
  - name: pay.idem
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 24h
    timeout: 5s
  - name: pay.recon
    version: "1"
    safety: reconcilable
    correlation_header: X-Correlation-Id
    settlement_bound: 300ms
    timeout: 5s
    probe:
      method: GET
      path: /v1/charges?correlation_id={{downstream_key}}
      found: {{status: [200], external_id: /id}}
      absent: {{status: [404]}}
routes:
  - name: idem
    match: {{method: POST, path: /idem/v1/charges}}
    strip_prefix: /idem
    upstream: {upstream}/idempotent
    contract: pay.idem
  - name: recon
    match: {{method: POST, path: /recon/v1/charges}}
    strip_prefix: /recon
    upstream: {upstream}/reconcilable
    contract: pay.recon
  - name: plain-idem
    match: {{method: POST, path: /plain/v1/charges}}
    strip_prefix: /plain
    upstream: {upstream}
    contract: pay.idem
  - name: plain-recon
    match: {{method: POST, path: /plainr/v1/charges}}
    strip_prefix: /plainr
    upstream: {upstream}
    contract: pay.recon
"""
    )
    return path


async def verdicts(
    routes: Path, route_name: str, retention_wait: timedelta | None = None
) -> dict[str, Verdict]:
    route = next(r for r in load_routes(routes).routes if r.name == route_name)
    request = SandboxRequest("POST", route.match.path, BODY, drift_body=DRIFT)
    report = await run_verify(
        route, sandbox_for(route, request, {}), VerifyOptions(retention_wait)
    )
    return {claim.claim: claim.verdict for claim in report.claims}


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(EFFECT_BROKER),
        "contracts",
        "verify",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_demo_target_holds_every_claim_it_can_be_checked_on(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path / "t.sqlite3", settlement_delay=0.1, key_retention=86400)
    async with serving(app) as url:
        routes = routes_file(tmp_path, url)
        idem = await verdicts(routes, "idem", retention_wait=timedelta(milliseconds=200))
        recon = await verdicts(routes, "recon")
        code, out, err = await run_cli(
            "idem",
            "--routes",
            str(routes),
            "--i-understand-this-sends-requests",
            "--json",
        )
    assert idem == {
        SAME_KEY_ONE_EFFECT: Verdict.HELD,
        DRIFT_REFUSED: Verdict.HELD,
        KEY_RETENTION: Verdict.HELD,
    }
    assert recon[PROBE_FINDS_COMMITTED] is Verdict.HELD
    assert recon[PROBE_ABSENT_FOR_UNSENT] is Verdict.HELD
    assert Verdict.BROKEN not in recon.values()
    assert code == 0, err
    document = json.loads(out)
    assert document["ok"] is True
    assert document["contract"] == "pay.idem@1"
    assert {c["claim"]: c["verdict"] for c in document["claims"]}[KEY_RETENTION] == (
        "not checkable"
    )


async def test_a_target_that_ignores_the_key_is_broken_on_one_effect(
    tmp_path: Path,
) -> None:
    async with serving(ignores_key()) as url:
        routes = routes_file(tmp_path, url)
        seen = await verdicts(routes, "plain-idem")
        code, out, _ = await run_cli(
            "plain-idem", "--routes", str(routes), "--i-understand-this-sends-requests"
        )
    assert seen[SAME_KEY_ONE_EFFECT] is Verdict.BROKEN
    assert seen[DRIFT_REFUSED] is Verdict.BROKEN
    assert code == 1
    assert "broken" in out and "ignores the key" in out


async def test_a_target_that_expires_keys_early_is_broken_on_retention(
    tmp_path: Path,
) -> None:
    async with serving(expires_early(forget_after=0.3)) as url:
        routes = routes_file(tmp_path, url)
        seen = await verdicts(routes, "plain-idem", retention_wait=timedelta(seconds=1))
    assert seen == {
        SAME_KEY_ONE_EFFECT: Verdict.HELD,
        DRIFT_REFUSED: Verdict.HELD,
        KEY_RETENTION: Verdict.BROKEN,
    }


async def test_a_lookup_that_lags_past_the_bound_is_broken(tmp_path: Path) -> None:
    async with serving(lagging_lookup(lag=1.5)) as url:
        routes = routes_file(tmp_path, url)
        seen = await verdicts(routes, "plain-recon")
    assert seen[PROBE_FINDS_COMMITTED] is Verdict.BROKEN
    assert seen[PROBE_ABSENT_FOR_UNSENT] is Verdict.HELD


async def test_without_the_confirmation_nothing_is_sent(tmp_path: Path) -> None:
    async with serving(ignores_key()) as url:
        routes = routes_file(tmp_path, url)
        code, out, err = await run_cli("plain-idem", "--routes", str(routes))
    assert code == 2
    assert "--i-understand-this-sends-requests" in err
    assert out == ""


async def test_an_unreachable_target_is_one_error_line(tmp_path: Path) -> None:
    routes = routes_file(tmp_path, "http://127.0.0.1:9")
    code, out, err = await run_cli(
        "plain-idem", "--routes", str(routes), "--i-understand-this-sends-requests"
    )
    assert code == 2
    assert "could not talk to http://127.0.0.1:9/v1/charges" in err
    assert "Traceback" not in err + out


async def test_an_unknown_route_names_the_known_ones(tmp_path: Path) -> None:
    routes = routes_file(tmp_path, "http://127.0.0.1:9")
    code, _, err = await run_cli(
        "nope", "--routes", str(routes), "--i-understand-this-sends-requests"
    )
    assert code == 2
    assert "no route named 'nope'" in err and "plain-idem" in err


def stripe_routes(tmp_path: Path, upstream: str | None) -> Path:
    """A forward route to api.stripe.com naming the preset; ``upstream`` redirects it."""
    path = tmp_path / "stripe-routes.yaml"
    redirect = f"\n    upstream: {upstream}" if upstream else ""
    path.write_text(
        f"""version: 1
routes:
  - name: stripe
    match: {{method: POST, host: api.stripe.com, path: /v1/payment_intents}}{redirect}
    contract: stripe@1
    inject_headers: {{Authorization: "Bearer ${{env:STRIPE_SECRET_KEY}}"}}
"""
    )
    return path


async def test_the_stripe_preset_holds_against_a_stripe_shaped_fake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setenv("STRIPE_SECRET_KEY", "sk_test_fake")
    async with serving(stripe_shaped(seen)) as url:
        routes = stripe_routes(tmp_path, url)
        code, out, err = await run_cli(
            "stripe",
            "--routes",
            str(routes),
            "--i-understand-this-sends-requests",
            "--json",
        )
    assert code == 0, err
    document = json.loads(out)
    assert document["contract"] == "stripe@1"
    claims = {c["claim"]: c for c in document["claims"]}
    assert claims[SAME_KEY_ONE_EFFECT]["verdict"] == "held"
    assert claims[DRIFT_REFUSED]["verdict"] == "held"
    assert "idempotency_error" in claims[DRIFT_REFUSED]["evidence"]
    assert claims[KEY_RETENTION]["verdict"] == "not checkable"
    first = seen[0]
    assert first["headers"]["Authorization"] == "Bearer sk_test_fake"
    assert first["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert first["form"]["amount"] == "100"
    assert first["headers"]["Idempotency-Key"] == seen[1]["headers"]["Idempotency-Key"]


@pytest.mark.skipif(
    not os.environ.get("STRIPE_TEST_SECRET_KEY", "").startswith("sk_test_"),
    reason="live Stripe test mode: set STRIPE_TEST_SECRET_KEY=sk_test_... to run it",
)
async def test_the_stripe_preset_against_stripe_test_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRIPE_SECRET_KEY", os.environ["STRIPE_TEST_SECRET_KEY"])
    code, out, err = await run_cli(
        "stripe",
        "--routes",
        str(stripe_routes(tmp_path, None)),
        "--i-understand-this-sends-requests",
        "--json",
    )
    assert code == 0, out + err
    claims = {c["claim"]: c["verdict"] for c in json.loads(out)["claims"]}
    assert claims[SAME_KEY_ONE_EFFECT] == "held"
    assert claims[DRIFT_REFUSED] == "held"


async def test_the_demo_target_keeps_the_kits_promises(
    tmp_path: Path, empty_database_url: str
) -> None:
    """Transactional mode: lookup, tombstone refused after a commit, and a late
    attempt under a tombstoned key refused; the target's table shows one charge."""
    secret = "kit-secret-for-verify-0123456789"
    app = build_app(
        tmp_path / "t.sqlite3",
        settlement_delay=0.0,
        key_retention=86400,
        database_url=empty_database_url,
        kit_secret=secret,
    )
    routes = tmp_path / "kit-routes.yaml"
    async with serving(app) as url:
        routes.write_text(
            f"""version: 1
contracts:
  - name: pay.kit
    version: "1"
    safety: transactional
    timeout: 5s
routes:
  - name: kit
    match: {{method: POST, path: /kit/v1/charges}}
    strip_prefix: /kit
    upstream: {url}/transactional
    contract: pay.kit
    inject_headers: {{Effect-Broker-Secret: "${{env:KIT_SECRET}}"}}
"""
        )
        route = load_routes(routes).routes[0]
        request = SandboxRequest("POST", route.match.path, BODY)
        report = await run_verify(
            route, sandbox_for(route, request, {"KIT_SECRET": secret}), VerifyOptions()
        )
        without_secret = await run_verify(
            route, sandbox_for(route, request, {"KIT_SECRET": "wrong"}), VerifyOptions()
        )
        async with aiohttp.ClientSession() as session:
            counted = await session.get(f"{url}/charges/count?order_id=contract-check")
            charges = (await counted.json())["count"]
    assert {c.claim: c.verdict for c in report.claims} == {
        KIT_FINDS_COMMITTED: Verdict.HELD,
        KIT_REFUSES_TOMBSTONE_AFTER_COMMIT: Verdict.HELD,
        KIT_BLOCKS_TOMBSTONED: Verdict.HELD,
    }, report
    # The wrong secret proves nothing: not checkable, never "held" nor "broken".
    assert {c.verdict for c in without_secret.claims} == {Verdict.NOT_CHECKABLE}
    assert charges == 2  # one per run's committed attempt; the tombstoned ones: none


async def test_a_kit_that_lets_a_tombstoned_attempt_commit_is_broken(
    tmp_path: Path,
) -> None:
    secret = "kit-secret-for-verify-0123456789"
    async with serving(kit_ignores_tombstones(secret)) as url:
        routes = tmp_path / "kit-routes.yaml"
        routes.write_text(
            f"""version: 1
contracts:
  - name: pay.kit
    version: "1"
    safety: transactional
    timeout: 5s
routes:
  - name: kit
    match: {{method: POST, path: /kit/v1/charges}}
    strip_prefix: /kit
    upstream: {url}
    contract: pay.kit
    inject_headers: {{Effect-Broker-Secret: "${{env:KIT_SECRET}}"}}
"""
        )
        route = load_routes(routes).routes[0]
        request = SandboxRequest("POST", route.match.path, BODY)
        report = await run_verify(
            route, sandbox_for(route, request, {"KIT_SECRET": secret}), VerifyOptions()
        )
    assert {c.claim: c.verdict for c in report.claims} == {
        KIT_FINDS_COMMITTED: Verdict.HELD,
        KIT_REFUSES_TOMBSTONE_AFTER_COMMIT: Verdict.HELD,
        KIT_BLOCKS_TOMBSTONED: Verdict.BROKEN,
    }, report
