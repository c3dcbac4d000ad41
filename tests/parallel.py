"""The suite's parallel run (pytest-xdist, ``-n`` in pyproject.toml's ``addopts``): what
a worker must tell the controller, hooked in by tests/conftest.py.

Each worker is a pytest session of its own, with its own session fixtures: its own
embedded PostgreSQL, or its own template database on ``EFFECT_BROKER_TEST_DATABASE_URL``.
``--dist loadfile`` keeps a module's tests in one worker, so a module-scoped fixture
(the crash matrix, the conformance suite's direct runs) is made once, as in a serial run.

A worker whose test server dies stops its session with exit status 7, and one told to
use an unknown database source with status 4 (``stop_session`` in tests/database.py).
Alone, xdist would take that for a worker that finished early, and fail on the modules
it was given and never ran. Instead the controller stops every worker, says why once,
and the run exits with that status, as a serial run does.

A worker sends each test's report to the controller as UTF-8. A report may quote a
string holding a lone surrogate (the hostile-header tests decode odd bytes with
``surrogateescape``), which UTF-8 cannot carry: xdist would fail the whole run on it, and
lose the report. Such characters travel as backslash escapes, as ``repr`` shows them.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tests import database

#: The exit status a worker stopped the session with, as the controller heard it.
_stopped: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    output: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if output is not None:  # a worker: pass the reason on to the controller
        for message, returncode in database.stopped_because:
            if returncode == exitstatus:
                output["stopped_because"] = message
    elif _stopped:  # the controller: the run ends as a serial one would
        session.exitstatus = _stopped[0]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    output: dict[str, Any] = getattr(node, "workeroutput", None) or {}
    message = output.get("stopped_because")
    if message is None:
        return
    _stopped.append(output["exitstatus"])
    output["shouldstop"] = message  # read by xdist next: it stops every worker


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(
    config: pytest.Config, report: Any
) -> Generator[None, dict[str, Any] | None, dict[str, Any] | None]:
    data = yield
    return None if data is None else _sendable(data)


def _sendable(value: Any) -> Any:
    """``value`` with every string encodable as UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_sendable(key): _sendable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_sendable(item) for item in value)
    return value
