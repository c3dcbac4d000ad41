"""The command that starts the demo target says what its own parser reads back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from effect_broker.demo import payment_target


def test_the_command_is_read_back_by_the_targets_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(payment_target.KIT_SECRET_ENV, "kit-secret")  # never in argv
    argv = payment_target.command(
        Path("/tmp/t.sqlite3"),
        port=8123,
        settlement_delay=0.3,
        key_retention=86400,
        database_url="postgresql://db/target",
        hang_after_commit=["/reconcilable/", "/unsafe/"],
    )
    assert argv[:3] == [sys.executable, "-m", payment_target.MODULE]
    args = payment_target.parse_args(argv[3:])
    assert (args.port, args.db, args.settlement_delay, args.key_retention) == (
        8123,
        Path("/tmp/t.sqlite3"),
        0.3,
        86400.0,
    )
    assert args.database_url == "postgresql://db/target"
    assert args.hang_after_commit == ["/reconcilable/", "/unsafe/"]
    assert "kit-secret" not in argv


def test_options_left_out_keep_the_targets_defaults() -> None:
    argv = payment_target.command(Path("/tmp/t.sqlite3"))
    defaults = payment_target.parse_args(["--db", "/tmp/t.sqlite3"])
    args = payment_target.parse_args(argv[3:])
    assert args.port == 0
    assert (args.settlement_delay, args.key_retention, args.hang_after_commit) == (
        defaults.settlement_delay,
        defaults.key_retention,
        defaults.hang_after_commit,
    )
    assert args.database_url is None


def test_the_banner_names_the_targets_url() -> None:
    line = "payment target listening on http://127.0.0.1:8123 (db /tmp/t.sqlite3)"
    match = payment_target.BANNER.search(line)
    assert match is not None and match.group(1) == "http://127.0.0.1:8123"
