"""tests/unit is pure: no process, no network, no database (all of which need a socket
or a child process). A unit test that tries one fails at once, saying where such a
test belongs, so the folder stays fast and trustworthy on a busy machine."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

WHERE = "tests/unit is pure; a test that needs this belongs in tests/integration"


@pytest.fixture(autouse=True)
def _pure(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"a unit test tried to {what}: {WHERE}")

        return refused

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("start a process"))
    monkeypatch.setattr(socket.socket, "connect", refuse("connect a socket"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connect a socket"))
    monkeypatch.setattr(socket.socket, "bind", refuse("bind a socket"))
    yield
