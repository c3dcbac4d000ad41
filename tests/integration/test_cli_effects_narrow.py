"""``effects list`` on an 80-column terminal or a pipe, and as JSON for programs."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.admin_support import (
    IDEMPOTENT,
    UNSAFE,
    Admin,
    admin_broker,
    cli,
    settled,
    unknown,
)

PIPE = {"COLUMNS": "80", "FORCE_COLOR": None, "NO_COLOR": "1"}
HEADERS = ("ID", "STATUS", "SAFETY", "ROUTE", "OPERATION", "KEY", "TRIES", "AGE", "LAST")
LONG_KEY = "newsletter-june:send-welcome-email-to-every-subscriber"


@pytest.fixture
async def admin(database_url: str, tmp_path: Path) -> AsyncIterator[Admin]:
    async with admin_broker(database_url, tmp_path) as running:
        yield running


async def test_eighty_columns_keep_every_column_and_whole_words(admin: Admin) -> None:
    charge_id = await settled(admin.broker, IDEMPOTENT, "order-2024-000123:charge-card")
    [mail_id] = await unknown(admin.broker, UNSAFE, LONG_KEY)
    last_error = (await admin.effect(mail_id))["last_error"]
    assert last_error and " " in last_error

    result = await cli(admin, "list", env=PIPE)

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "\x1b[" not in result.stdout
    assert all(len(line) <= 80 for line in lines), result.stdout
    header = " ".join(lines[:2])
    assert all(name in header.split() for name in HEADERS), header
    for effect_id in (charge_id, mail_id):
        assert sum(line.startswith(effect_id[:8] + " ") for line in lines) == 1
        assert effect_id not in result.stdout
    assert "outcome_unknown" in result.stdout and "unsafe" in result.stdout
    cells = {piece for line in lines for piece in line.split()}
    for word in last_error.split():
        assert word in cells, (word, result.stdout)
    for piece in re.split(r"(?<=[-:])", LONG_KEY):  # wrapped only after - and :
        assert any(piece in cell for cell in cells), (piece, result.stdout)
    assert lines[-1] == "2 effects, 1 unknown"


async def test_output_json_is_the_apis_effects_as_one_array(admin: Admin) -> None:
    await settled(admin.broker, IDEMPOTENT, "order-7:charge")
    await unknown(admin.broker, UNSAFE, "mail-7")
    page = (await admin.get("/v1/effects")).json

    result = await cli(admin, "list", "--output", "json", "--limit", "1", env=PIPE)
    everything = await cli(admin, "list", "-o", "json", env=PIPE)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == page["effects"][:1]
    assert "more: add --cursor" in result.stderr
    assert json.loads(everything.stdout) == page["effects"]
    assert everything.stderr == ""


async def test_inspect_takes_the_short_id_and_shows_the_whole_one(admin: Admin) -> None:
    [mail_id] = await unknown(admin.broker, UNSAFE, "mail-8")

    result = await cli(admin, "inspect", mail_id[:8], env=PIPE)
    missing = await cli(admin, "inspect", "00000000", env=PIPE)

    assert result.exit_code == 0, result.output
    assert mail_id in result.stdout
    assert missing.exit_code == 2
    assert "matches no recent effect" in re.sub(r"\s+", " ", missing.output)


async def test_inspect_history_fits_eighty_columns_with_its_details(admin: Admin) -> None:
    [mail_id] = await unknown(admin.broker, UNSAFE, "mail-9")

    result = await cli(admin, "inspect", mail_id, env=PIPE)

    assert result.exit_code == 0, result.output
    history = result.stdout[result.stdout.index("History") :]
    assert all(len(line.rstrip()) <= 80 for line in history.splitlines())
    # Each event on one line, its writer and details beneath (not cut off).
    assert re.search(r"^\s+2\s+\S+\s+dispatch\s+prepared -> dispatching$", history, re.M)
    assert re.search(r"^\s+by proxy\S*\s+\{\"attempt\": 1\}\s*$", history, re.M)
