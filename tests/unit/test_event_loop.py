"""``serve`` and ``up`` run on uvloop where it is installed, else on asyncio's loop."""

from __future__ import annotations

import asyncio

import pytest

from effect_broker.cli.serve import run_on_fastest_loop


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_proxy_runs_on_uvloop_where_it_is_installed() -> None:
    pytest.importorskip("uvloop")
    assert run_on_fastest_loop(loop_module()).startswith("uvloop")


def test_the_standard_loop_can_be_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EFFECT_BROKER_EVENT_LOOP", "asyncio")
    assert run_on_fastest_loop(loop_module()).startswith("asyncio")
