"""``serve`` and ``up`` run on asyncio's loop, or on uvloop when asked and installed."""

from __future__ import annotations

import asyncio

import pytest

from effect_broker.cli.serve import run_on_fastest_loop


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_runs_the_proxy_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.setenv("EFFECT_BROKER_EVENT_LOOP", "uvloop")
    assert run_on_fastest_loop(loop_module()).startswith("uvloop")


def test_the_standard_loop_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EFFECT_BROKER_EVENT_LOOP", raising=False)
    assert run_on_fastest_loop(loop_module()).startswith("asyncio")
