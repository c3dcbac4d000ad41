"""``serve`` and ``up`` run on uvloop where installed, asyncio's loop when asked."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from effect_broker.cli.serve import resolved_event_loop, run_on_fastest_loop
from effect_broker.errors import EffectBrokerError


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_is_the_default_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv("EFFECT_BROKER_EVENT_LOOP", raising=False)
    assert run_on_fastest_loop(loop_module()).startswith("uvloop")


def test_the_standard_loop_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EFFECT_BROKER_EVENT_LOOP", "asyncio")
    assert run_on_fastest_loop(loop_module()).startswith("asyncio")


def test_the_standard_loop_where_uvloop_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EFFECT_BROKER_EVENT_LOOP", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)
    assert resolved_event_loop() == "asyncio"
    assert run_on_fastest_loop(loop_module()).startswith("asyncio")


def test_an_unknown_loop_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EFFECT_BROKER_EVENT_LOOP", "uvlop")
    main = loop_module()
    with pytest.raises(EffectBrokerError, match="'uvlop' is not one of uvloop, asyncio"):
        run_on_fastest_loop(main)
    main.close()
