"""The operator console in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven by Selenium, against a real broker.

An unsafe target hangs after committing, so the effect is ``outcome_unknown``; the
operator logs in (a wrong token first), finds it, inspects it, has a stale form refused,
resolves it with evidence using the keyboard, and the agent's retry gets the receipt.
Screenshots of the three main pages live under ``docs/images/``: they are taken again
when ``EFFECT_BROKER_UPDATE_SCREENSHOTS=1``, and otherwise only checked to exist.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.integration.admin_support import (
    TOKEN,
    UNSAFE,
    admin_broker,
    send,
    unknown,
)

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = {
    name: ROOT / "docs" / "images" / f"console-{name}.png"
    for name in ("login", "effects", "effect")
}
UPDATE = os.environ.get("EFFECT_BROKER_UPDATE_SCREENSHOTS") == "1"
CHROMIUM = (
    shutil.which("chromium")
    or shutil.which("chromium-browser")
    or shutil.which("google-chrome")  # what hosted Ubuntu runners carry instead
)
CHROMEDRIVER = shutil.which("chromedriver")
WAIT = 10.0  # seconds: the longest a page may take to appear


def test_the_console_screenshots_exist() -> None:
    """The operator guide (docs/how-to/unknown-effects.md) shows these; the browser
    test below retakes them on request."""
    for path in SCREENSHOTS.values():
        assert path.is_file(), f"{path} is missing: run the browser test with " + (
            "EFFECT_BROKER_UPDATE_SCREENSHOTS=1"
        )
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path


@pytest.fixture
def driver() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(
            "no browser: install Debian's chromium and chromium-driver to run this "
            "(apt-get install -y chromium chromium-driver)"
        )
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # tests may run as root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--force-device-scale-factor=1",
        "--no-proxy-server",  # a developer's http_proxy must not see the console
    ):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    browser.implicitly_wait(0)
    try:
        yield browser
    finally:
        browser.quit()


def wait_for(browser: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def shoot(browser: Any, name: str) -> None:
    if UPDATE:
        SCREENSHOTS[name].parent.mkdir(parents=True, exist_ok=True)
        height = browser.execute_script("return document.body.scrollHeight")
        browser.set_window_size(1280, min(max(height + 40, 600), 2400))
        browser.save_screenshot(str(SCREENSHOTS[name]))
        browser.set_window_size(1280, 900)


def fits_a_phone(browser: Any) -> bool:
    """No sideways scrolling of the page at a phone's width (tables scroll inside)."""
    browser.set_window_size(390, 844)
    try:
        return bool(
            browser.execute_script(
                "return document.documentElement.scrollWidth <= window.innerWidth"
            )
        )
    finally:
        browser.set_window_size(1280, 900)


def log_in(browser: Any, url: str, effect_id: str) -> None:
    """Wrong token refused, right token admitted, the effect found and opened."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(url + "/console/effects")
    token = wait_for(browser, "input#token")  # sent to the login form first
    shoot(browser, "login")
    token.send_keys("not-the-token", Keys.ENTER)
    error = wait_for(browser, "#login-error")
    assert "That is not the admin token" in error.text
    browser.find_element(By.ID, "token").send_keys(TOKEN, Keys.ENTER)
    wait_for(browser, "ul.counts")
    assert (
        "email: 1 outcome_unknown, 0 manual_review"
        in browser.find_element(By.CSS_SELECTOR, "ul.counts").text
    )
    assert fits_a_phone(browser)
    shoot(browser, "effects")
    browser.find_element(
        By.CSS_SELECTOR, f'a[aria-label="Inspect effect {effect_id}"]'
    ).click()
    wait_for(browser, "form[action$='/resolve']")
    assert browser.find_element(By.ID, "status").text == "outcome_unknown"


def fill(browser: Any, choice: str, *, evidence: str, reason: str, external: str) -> None:
    """Pick and type with the keyboard only, as an operator without a mouse would."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    form = browser.find_element(By.CSS_SELECTOR, "form[action$='/resolve']")
    browser.find_element(By.ID, f"choice-{choice}").send_keys(Keys.SPACE)
    assert browser.find_element(By.ID, f"choice-{choice}").is_selected()
    browser.find_element(By.ID, "evidence").send_keys(evidence)
    browser.find_element(By.ID, "reason").send_keys(reason)
    browser.find_element(By.ID, "external_id").send_keys(external, Keys.ENTER)
    # The answer is a new page: wait until the one with the form is gone.
    WebDriverWait(browser, WAIT).until(expected_conditions.staleness_of(form))


def refused_as_stale(browser: Any) -> str:
    from selenium.webdriver.common.by import By

    fill(
        browser,
        "abandoned",
        evidence="looked nowhere",
        reason="tired",
        external="",
    )
    heading = wait_for(browser, "main h1").text
    browser.find_element(By.LINK_TEXT, "Continue").click()
    wait_for(browser, "form[action$='/resolve']")
    return str(heading)


def resolve_with_evidence(browser: Any) -> str:
    from selenium.webdriver.common.by import By

    assert fits_a_phone(browser)
    shoot(browser, "effect")
    fill(
        browser,
        "succeeded",
        evidence="mail log: 250 OK queued as msg-77 for mail-browser",
        reason="the mail server accepted it",
        external="msg-77",
    )
    wait_for(browser, "p.notice[role=status]")
    return str(browser.find_element(By.ID, "status").text)


async def test_an_operator_resolves_an_unknown_effect_in_the_browser(
    driver: Any, database_url: str, tmp_path: Path
) -> None:
    async with admin_broker(database_url, tmp_path) as admin:
        [effect_id] = await unknown(admin.broker, UNSAFE, "mail-browser")

        await asyncio.to_thread(log_in, driver, admin.url, effect_id)
        # Another operator acts while this form is open: the effect's version moves.
        store = admin.broker.state.store
        effect = await store.get("acme", UUID(effect_id))
        await store.reschedule(effect, delay=timedelta(0), actor="operator:someone")
        stale = await asyncio.to_thread(refused_as_stale, driver)
        unchanged = await admin.effect(effect_id)
        status = await asyncio.to_thread(resolve_with_evidence, driver)
        retry = await send(admin.broker, UNSAFE, "mail-browser")
        history = (await admin.effect(effect_id))["history"]

    assert stale == "This effect changed since the form was shown"
    assert unchanged["status"] == "outcome_unknown"
    assert status == "succeeded"
    assert retry.status == 409
    assert retry.headers["Effect-Id"] == effect_id
    problem = retry.problem
    assert (problem["resolution"], problem["external_id"]) == ("succeeded", "msg-77")
    assert "this effect happened (msg-77)" in problem["message"]
    assert history[-1]["details"]["evidence"]["finding"].startswith("mail log: 250 OK")
    assert len(admin.broker.charges("mail-browser")) == 1  # never sent twice
