"""``effect-broker effects ...`` against a real broker's admin API.

The CLI uses blocking urllib while the broker runs on this test's event loop, so each
invocation runs in a worker thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

import pytest
from typer.testing import CliRunner

from effect_broker.cli import _register, app
from effect_broker.cli.local_state import RunningUp
from effect_broker.models import EffectStatus
from tests.integration.admin_support import (
    IDEMPOTENT,
    TOKEN,
    UNSAFE,
    Admin,
    admin_broker,
    cli,
    order,
    settled,
    unknown,
)
from tests.integration.harness import arm_faults, request

ANSI = re.compile(r"\x1b\[[0-9;]*m")
BOLD_RED = "\x1b[1;31m"


@pytest.fixture
async def admin(database_url: str, tmp_path: Path) -> AsyncIterator[Admin]:
    async with admin_broker(database_url, tmp_path) as running:
        yield running


def plain(text: str) -> str:
    return ANSI.sub("", text)


def line_with(text: str, needle: str) -> str:
    [line] = [line for line in text.splitlines() if needle in line]
    return line


async def test_list_highlights_unknown_effects_and_sums_up(admin: Admin) -> None:
    done_id = await settled(admin.broker, IDEMPOTENT, "order-1:charge")
    [mail_id] = await unknown(admin.broker, UNSAFE, "mail-1")

    result = await cli(admin, "list")
    only_unknown = await cli(admin, "list", "--status", "outcome_unknown")

    assert result.exit_code == 0, result.output
    assert BOLD_RED in line_with(result.stdout, mail_id[:8])
    assert BOLD_RED not in line_with(result.stdout, done_id[:8])
    assert "outcome_unknown" in plain(line_with(result.stdout, mail_id[:8]))
    assert plain(result.stdout).rstrip().endswith("2 effects, 1 unknown")
    assert only_unknown.exit_code == 0, only_unknown.output
    assert done_id[:8] not in only_unknown.stdout
    assert plain(only_unknown.stdout).rstrip().endswith("1 effect, 1 unknown")


async def test_list_marks_manual_review_in_yellow(admin: Admin) -> None:
    store = admin.broker.state.store
    [effect_id] = await unknown(admin.broker, IDEMPOTENT, "order-2:charge")
    effect = await store.get("acme", UUID(effect_id))
    await store.transition(effect, EffectStatus.MANUAL_REVIEW, kind="test", actor="t")

    result = await cli(admin, "list", "--route", IDEMPOTENT)

    assert result.exit_code == 0, result.output
    assert "\x1b[33m" in line_with(result.stdout, effect_id[:8])
    assert "1 effect, 0 unknown, 1 in manual review" in plain(result.stdout)


async def test_list_reads_url_and_token_from_a_running_up_and_says_so(
    admin: Admin, tmp_path: Path
) -> None:
    await settled(admin.broker, IDEMPOTENT, "order-5:charge")
    data_dir = tmp_path / ".effect-broker"
    data_dir.mkdir()
    RunningUp(os.getpid(), "http://127.0.0.1:1", admin.url).write(data_dir)
    (data_dir / "admin.token").write_text(TOKEN + "\n")
    _register()
    env = {
        "EFFECT_BROKER_ADMIN_URL": None,
        "EFFECT_BROKER_ADMIN_TOKEN": None,
        "EFFECT_BROKER_DATA_DIR": str(data_dir),
    }

    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["effects", "list", "--json"], env=env
    )

    assert result.exit_code == 0, result.output
    assert plain(result.stderr).strip() == (
        f"using {data_dir}/up.json, {data_dir}/admin.token"
    )
    assert "order-5:charge" in result.stdout


async def test_list_reads_url_and_token_from_the_environment(admin: Admin) -> None:
    await settled(admin.broker, IDEMPOTENT, "order-3:charge")
    _register()
    env = {"EFFECT_BROKER_ADMIN_URL": admin.url, "EFFECT_BROKER_ADMIN_TOKEN": TOKEN}

    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["effects", "list", "--json"], env=env
    )

    assert result.exit_code == 0, result.output
    assert "order-3:charge" in result.stdout


async def test_inspect_prints_guarantee_and_history(admin: Admin) -> None:
    [mail_id] = await unknown(admin.broker, UNSAFE, "mail-2")

    result = await cli(admin, "inspect", mail_id, "--at-sequence", "2")

    assert result.exit_code == 0, result.output
    text = plain(result.stdout)
    assert "mail-2" in text
    assert "email.send@1 (unsafe)" in text
    assert "never retries it" in re.sub(r"\s+", " ", text)
    history = text[text.index("History") :]
    for kind in ("reserved", "dispatch", "outcome_unknown"):
        assert kind in history
    assert "event chain intact" in text
    assert "after event 2: dispatching" in text


async def test_resolve_prints_the_new_status(admin: Admin) -> None:
    [mail_id] = await unknown(admin.broker, UNSAFE, "mail-3")

    result = await cli(
        admin,
        "resolve",
        mail_id,
        "--as",
        "succeeded",
        "--reason",
        "delivered per the mail log",
        "--evidence",
        "checked_in=smtp log",
        "--evidence",
        "message_id=abc@mx",
        "--external-id",
        "abc@mx",
    )

    assert result.exit_code == 0, result.output
    assert "status now succeeded" in plain(result.stdout)
    effect = await admin.effect(mail_id)
    assert effect["status"] == "succeeded"
    assert effect["history"][-1]["details"]["evidence"] == {
        "checked_in": "smtp log",
        "message_id": "abc@mx",
    }


async def test_refusals_print_the_problem_on_stderr_and_exit_1(admin: Admin) -> None:
    [mail_id] = await unknown(admin.broker, UNSAFE, "mail-4")

    wrong_token = await cli(admin, "list", token="not-the-token")
    requeue = await cli(
        admin, "resolve", mail_id, "--as", "not_committed", "--reason", "think so"
    )
    reconcile = await cli(admin, "reconcile", mail_id)

    assert wrong_token.exit_code == 1
    assert "the bearer token is not the admin token" in plain(wrong_token.stderr)
    assert wrong_token.stdout == ""
    assert requeue.exit_code == 1
    assert "new Operation-Key" in re.sub(r"\s+", " ", plain(requeue.stderr))
    assert reconcile.exit_code == 1
    assert "resolve" in plain(reconcile.stderr)
    assert (await admin.effect(mail_id))["status"] == "outcome_unknown"


async def test_reconcile_prints_the_status(admin: Admin) -> None:
    [charge_id] = await unknown(admin.broker, IDEMPOTENT, "order-4:charge")

    result = await cli(admin, "reconcile", charge_id)

    assert result.exit_code == 0, result.output
    assert f"effect {charge_id} is outcome_unknown" in plain(result.stdout)


async def test_malformed_evidence_is_a_usage_error(admin: Admin) -> None:
    [mail_id] = await unknown(admin.broker, UNSAFE, "mail-5")

    result = await cli(
        admin, "resolve", mail_id, "--as", "succeeded", "--reason", "r", "--evidence", "x"
    )

    assert result.exit_code == 2
    assert "KEY=VALUE" in plain(result.output)
    assert (await admin.effect(mail_id))["status"] == "outcome_unknown"


async def test_a_broker_that_is_not_running_is_reported_plainly() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _register()

    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["effects", "list", "--admin-url", f"http://127.0.0.1:{port}", "--token", "t"],
    )

    assert result.exit_code == 1
    message = re.sub(r"\s+", " ", plain(result.stderr))
    assert "connection refused" in message
    assert "EFFECT_BROKER_ADMIN_URL" in message


async def test_resolve_help_names_both_ways_to_give_up_and_what_the_agent_hears(
    admin: Admin,
) -> None:
    """``failed`` was described as "give up for good" while the agent was told it did
    not happen; the help now separates proof (did_not_happen) from giving up."""
    result = await cli(admin, "resolve", "--help", token=None)

    text = re.sub(r"[\s│]+", " ", plain(result.stdout))
    assert result.exit_code == 0, result.output
    assert "give up for good" not in text
    assert "did_not_happen: it did not, with proof" in text
    assert "abandoned: give up without knowing" in text
    assert "it may have happened" in text


async def test_resolve_as_failed_is_recorded_as_abandoned(admin: Admin) -> None:
    [mail_id] = await unknown(admin.broker, UNSAFE, "mail-6")

    result = await cli(
        admin, "resolve", mail_id, "--as", "failed", "--reason", "no time to check"
    )

    assert result.exit_code == 0, result.output
    text = plain(result.stdout)
    assert "`failed` is the deprecated word for `abandoned`" in text
    assert "resolved as abandoned; status now failed_final" in text
    assert (await admin.effect(mail_id))["history"][-1]["kind"] == "operator_abandoned"


async def test_inspect_shows_the_payload_with_credentials_hidden(admin: Admin) -> None:
    """``inspect`` showed only path, method and byte count: an operator could not tell
    what to look for in the target's records."""
    await arm_faults(admin.broker, hang_after_commit=1)
    sent = await request(
        "POST",
        f"{admin.broker.proxy_url}/email/v1/charges",
        data=json.dumps({**order("mail-7"), "api_key": "sk_live_9"}).encode(),
        headers={
            "Content-Type": "application/json",
            "Operation-Key": "mail-7",
            "Authorization": "Bearer hunter2",
        },
    )
    effect_id = sent.headers["Effect-Id"]

    result = await cli(admin, "inspect", effect_id)
    api = await admin.effect(effect_id)

    text = plain(result.stdout)
    assert result.exit_code == 0, result.output
    assert '"order_id": "mail-7"' in text and '"amount": 1200' in text
    assert "sk_live_9" not in text and "hunter2" not in text
    assert "hidden: header Authorization, body /api_key" in text
    shown = api["request"]
    assert shown["method"] == "POST" and shown["url"].endswith("/unsafe/v1/charges")
    assert ["Authorization", "[redacted]"] in shown["headers"]
    assert json.loads(shown["body"])["api_key"] == "[redacted]"
    assert shown["redacted"] == ["header Authorization", "body /api_key"]
