"""The console script on a bare install: one line naming the extra, not a traceback."""

from __future__ import annotations

import pytest

from effect_broker import console


def test_nothing_is_missing_where_the_server_is_installed() -> None:
    assert console.missing_modules(console.SERVER_MODULES, console.find_spec) == []


def test_a_bare_install_is_told_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    absent = {"aiohttp", "asyncpg"}
    monkeypatch.setattr(
        console, "find_spec", lambda name: None if name in absent else object()
    )
    with pytest.raises(SystemExit) as stopped:
        console.main()
    message = str(stopped.value.code)
    assert "pip install 'effect-broker[server]'" in message
    assert "Missing: aiohttp, asyncpg." in message
