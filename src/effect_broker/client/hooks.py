"""Put the current operation key on every request a ``requests`` or ``httpx`` client
sends, without threading it through each call.

``with operation(key):`` sets the key for the code inside (a context variable, so it
follows threads' and tasks' own contexts); a client with the hook installed adds the
``Operation-Key`` header while one is set and leaves other requests alone. Nothing is
imported from ``requests`` or ``httpx`` until a hook for it is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

HEADER = "Operation-Key"

_current: ContextVar[str | None] = ContextVar("effect_broker_operation_key", default=None)


def current_operation_key() -> str | None:
    return _current.get()


@contextmanager
def operation(key: str) -> Iterator[str]:
    """Requests sent inside the block by a hooked client carry ``key``."""
    token = _current.set(key)
    try:
        yield key
    finally:
        _current.reset(token)


def install_httpx(client: Any, *, header: str = HEADER) -> Any:
    """Add a request hook to an ``httpx.Client`` or ``httpx.AsyncClient``; returns it."""
    import httpx

    def add_key(request: httpx.Request) -> None:
        key = _current.get()
        if key is not None:
            request.headers[header] = key

    async def add_key_async(request: httpx.Request) -> None:
        add_key(request)

    hook = add_key_async if isinstance(client, httpx.AsyncClient) else add_key
    hooks = client.event_hooks
    hooks["request"] = [*hooks.get("request", []), hook]
    client.event_hooks = hooks
    return client


def install_requests(session: Any, *, header: str = HEADER) -> Any:
    """Mount an adapter on a ``requests.Session`` that adds the key; returns it."""
    from requests.adapters import HTTPAdapter

    class OperationKeyAdapter(HTTPAdapter):
        def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            key = _current.get()
            if key is not None:
                request.headers[header] = key
            return super().send(request, *args, **kwargs)

    adapter = OperationKeyAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
