"""The operator console over plain HTTP: login, the waiting list, the effect page and
the guided resolution, against a real broker (the browser test drives the same pages
in Chromium). Unknown effects come from the demo target's ``hang_after_commit`` fault.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import aiohttp
import pytest

from effect_broker.admin.app import build_admin_app
from effect_broker.admin.console.session import COOKIE
from effect_broker.server import admin_state
from effect_broker.tenancy import new_api_key
from tests.integration.admin_support import (
    IDEMPOTENT,
    TOKEN,
    UNSAFE,
    Admin,
    admin_broker,
    order,
    send,
    unknown,
)
from tests.integration.harness import arm_faults, request, serve_app


@pytest.fixture
async def admin(database_url: str, tmp_path: Path) -> AsyncIterator[Admin]:
    async with admin_broker(database_url, tmp_path) as running:
        yield running


@pytest.fixture
async def browser(admin: Admin) -> AsyncIterator[aiohttp.ClientSession]:
    """A client that keeps cookies, logged in to the console."""
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
    async with aiohttp.ClientSession(base_url=admin.url, cookie_jar=jar) as session:
        async with session.post("/console/login", data={"token": TOKEN}) as answer:
            assert answer.status == 200, await answer.text()
            assert answer.url.path == "/console/effects"
        yield session


async def page(session: aiohttp.ClientSession, path: str) -> tuple[int, str]:
    async with session.get(path) as answer:
        return answer.status, await answer.text()


def field(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match, name
    return match.group(1)


def text_of(html: str) -> str:
    """The page's words, tags dropped, blanks folded (for assertions on sentences)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


async def test_login_sets_a_strict_httponly_cookie_and_a_wrong_token_is_refused(
    admin: Admin,
) -> None:
    wrong = await request("POST", admin.url + "/console/login", data={"token": "nope"})
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            admin.url + "/console/login",
            data={"token": TOKEN},
            allow_redirects=False,
        ) as right,
    ):
        cookie = right.headers["Set-Cookie"]
        location = right.headers["Location"]
    anonymous = await request("GET", admin.url + "/console/effects")

    assert wrong.status == 401
    assert "That is not the admin token" in wrong.body.decode()
    assert COOKIE not in wrong.headers.get("Set-Cookie", "")
    assert right.status == 303 and location == "/console/effects"
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Path=/console" in cookie
    assert TOKEN not in cookie
    assert anonymous.status == 200  # followed the redirect to the login form
    assert "Admin token" in anonymous.body.decode()


async def test_a_forged_cookie_is_not_a_session(admin: Admin) -> None:
    async with (
        aiohttp.ClientSession(cookies={COOKIE: "9999999999.x.YWNtZQ.forged"}) as s,
        s.get(admin.url + "/console/effects", allow_redirects=False) as answer,
    ):
        assert answer.status == 303
        assert answer.headers["Location"] == "/console/login"


async def test_the_list_counts_waiting_effects_by_route_newest_and_oldest_first(
    admin: Admin, browser: aiohttp.ClientSession
) -> None:
    [first] = await unknown(admin.broker, UNSAFE, "mail-old")
    [second] = await unknown(admin.broker, UNSAFE, "mail-new")
    [charge] = await unknown(admin.broker, IDEMPOTENT, "order-1:charge")

    status, newest = await page(browser, "/console/effects")
    _, oldest = await page(browser, "/console/effects?order=oldest")

    assert status == 200
    words = text_of(newest)
    assert "email: 2 outcome_unknown, 0 manual_review" in words
    assert "payments: 1 outcome_unknown, 0 manual_review" in words
    assert newest.index(charge) < newest.index(second) < newest.index(first)
    assert oldest.index(first) < oldest.index(second) < oldest.index(charge)


async def test_the_effect_page_shows_the_contract_and_the_request_with_secrets_hidden(
    admin: Admin, browser: aiohttp.ClientSession
) -> None:
    await arm_faults(admin.broker, hang_after_commit=1)
    sent = await request(
        "POST",
        f"{admin.broker.proxy_url}/email/v1/charges",
        data=json.dumps(
            {**order("mail-9"), "to": "ada@example.com", "api_key": "sk_live_123"}
        ).encode(),
        headers={
            "Content-Type": "application/json",
            "Operation-Key": "mail-9",
            "X-Api-Key": "hunter2",
            "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        },
    )
    assert sent.status == 504, sent
    effect_id = sent.headers["Effect-Id"]

    status, html = await page(browser, f"/console/effects/{effect_id}")

    words = text_of(html)
    assert status == 200
    assert "email.send@1" in words and "safety class unsafe" in words
    assert "ada@example.com" in html  # what to look for in the target's records
    assert "sk_live_123" not in html and "hunter2" not in html
    assert "Hidden: header X-Api-Key, body /api_key" in words
    assert "a" * 32 in html  # the trace id
    assert "outcome_unknown" in words
    # What the attempt got back, from the history: the contract's timeout ran out.
    assert "outcome_unknown: reason no complete answer within 0.5s" in words
    # Exactly what an unsafe contract permits: no resend with the same key.
    assert 'value="succeeded"' in html and 'value="did_not_happen"' in html
    assert 'value="abandoned"' in html and 'value="not_committed"' not in html
    assert "the agent will be told it may have happened" in words
    assert html.count("reserved") >= 1 and "proxy" in words  # history with its actors


async def test_resolving_in_the_console_gives_the_retry_the_receipt(
    admin: Admin, browser: aiohttp.ClientSession
) -> None:
    [effect_id] = await unknown(admin.broker, UNSAFE, "mail-1")
    _, html = await page(browser, f"/console/effects/{effect_id}")
    form = {
        "csrf": field(html, "csrf"),
        "version": field(html, "version"),
        "resolution": "succeeded",
        "reason": "found it in the mail log",
        "evidence": "smtp log: 250 OK for mail-1",
        "external_id": "msg-1",
    }

    async with browser.post(f"/console/effects/{effect_id}/resolve", data=form) as done:
        shown = await done.text()
    retry = await send(admin.broker, UNSAFE, "mail-1")

    assert done.status == 200 and done.url.query.get("resolved") == "1"
    assert "Resolved." in text_of(shown)
    assert retry.status == 409
    problem = retry.problem
    assert (problem["resolution"], problem["external_id"]) == ("succeeded", "msg-1")
    assert problem["evidence"] == {
        "finding": "smtp log: 250 OK for mail-1",
        "via": "console",
    }
    last = (await admin.effect(effect_id))["history"][-1]
    assert (last["kind"], last["actor"]) == ("operator_succeeded", "operator:acme")
    assert len(admin.broker.charges("mail-1")) == 1


async def test_a_stale_form_a_missing_csrf_token_and_missing_evidence_change_nothing(
    admin: Admin, browser: aiohttp.ClientSession
) -> None:
    [effect_id] = await unknown(admin.broker, UNSAFE, "mail-2")
    _, html = await page(browser, f"/console/effects/{effect_id}")
    form = {
        "csrf": field(html, "csrf"),
        "version": field(html, "version"),
        "resolution": "abandoned",
        "reason": "no time",
        "evidence": "checked nothing",
    }
    path = f"/console/effects/{effect_id}/resolve"

    async with browser.post(path, data={**form, "csrf": "x"}) as forged:
        assert forged.status == 403
    async with browser.post(path, data={**form, "evidence": " "}) as bare:
        assert bare.status == 400
        assert "Evidence is required" in await bare.text()
    async with browser.post(path, data={**form, "resolution": "not_committed"}) as odd:
        assert odd.status == 400
    # The effect changes while this form is open (a new version in the ledger).
    store = admin.broker.state.store
    effect = await store.get("acme", UUID(effect_id))
    await store.reschedule(effect, delay=timedelta(0), actor="another operator")
    async with browser.post(path, data=form) as stale:
        stale_text = await stale.text()

    assert stale.status == 409
    assert "changed since the form was shown" in stale_text
    after = await admin.effect(effect_id)
    assert after["status"] == "outcome_unknown"
    assert [e["kind"] for e in after["history"]][-1] != "operator_abandoned"


async def test_the_trace_id_links_to_the_configured_trace_ui(admin: Admin) -> None:
    app = build_admin_app(
        admin_state(admin.broker.state),
        admin_token=TOKEN,
        trace_url="https://traces.example/trace/{trace_id}",
    )
    await arm_faults(admin.broker, hang_after_commit=1)
    sent = await request(
        "POST",
        f"{admin.broker.proxy_url}/email/v1/charges",
        data=json.dumps(order("mail-t")).encode(),
        headers={
            "Content-Type": "application/json",
            "Operation-Key": "mail-t",
            "traceparent": "00-" + "c" * 32 + "-" + "d" * 16 + "-01",
        },
    )
    async with (
        serve_app(app) as url,
        aiohttp.ClientSession(
            base_url=url, cookie_jar=aiohttp.CookieJar(unsafe=True)
        ) as session,
    ):
        async with session.post("/console/login", data={"token": TOKEN}):
            pass
        status, html = await page(
            session, f"/console/effects/{sent.headers['Effect-Id']}"
        )

    assert status == 200
    assert f'href="https://traces.example/trace/{"c" * 32}"' in html


async def test_a_login_posted_from_another_site_is_refused(admin: Admin) -> None:
    refused = await request(
        "POST",
        admin.url + "/console/login",
        data={"token": TOKEN},
        headers={"Origin": "https://evil.example"},
    )
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            admin.url + "/console/login",
            data={"token": TOKEN},
            headers={"Origin": admin.url},
            allow_redirects=False,
        ) as same_site,
    ):
        cookie = same_site.headers.get("Set-Cookie", "")

    assert refused.status == 403
    assert COOKIE not in refused.headers.get("Set-Cookie", "")
    assert same_site.status == 303 and COOKIE in cookie


async def test_on_a_gateway_a_tenant_logs_in_with_its_api_key_and_sees_its_own(
    database_url: str, tmp_path: Path
) -> None:
    async with admin_broker(database_url, tmp_path, token=None, gateway=True) as admin:
        store = admin.broker.state.store
        keys = {}
        for tenant in ("acme", "globex"):
            key = new_api_key()
            await store.add_api_key(tenant, key.key_id, key.secret_hash)
            keys[tenant] = key.api_key
        auth = "Basic " + base64.b64encode(f"acme:{keys['acme']}".encode()).decode()
        await arm_faults(admin.broker, hang_after_commit=1)
        sent = await send(admin.broker, UNSAFE, "mail-gw", proxy_auth=auth)
        effect_id = sent.headers["Effect-Id"]
        pages = {}
        for tenant, key in keys.items():
            jar = aiohttp.CookieJar(unsafe=True)
            async with aiohttp.ClientSession(base_url=admin.url, cookie_jar=jar) as s:
                async with s.post("/console/login", data={"token": key}) as answer:
                    assert answer.status == 200
                pages[tenant] = (
                    await page(s, "/console/effects"),
                    await page(s, f"/console/effects/{effect_id}"),
                )
        wrong = await request(
            "POST", admin.url + "/console/login", data={"token": keys["acme"] + "x"}
        )

    (_, acme_list), (acme_status, _) = pages["acme"]
    (_, globex_list), (globex_status, _) = pages["globex"]
    assert effect_id in acme_list and acme_status == 200
    assert effect_id not in globex_list and globex_status == 404
    assert "tenant <strong>globex</strong>" in globex_list
    assert wrong.status == 401
