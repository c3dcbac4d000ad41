"""What a fresh Python interpreter sees: the imports the client and the target kit
really pull in, and keys computed in another process. These start processes, so they
live here rather than in tests/unit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from effect_broker.client import operation_key

SERVER_MODULES = ("aiohttp", "asyncpg", "pydantic", "effect_broker.engine", "yaml")


def test_importing_the_client_pulls_in_none_of_the_proxy() -> None:
    code = (
        "import sys, effect_broker.client; "
        f"print([m for m in {SERVER_MODULES!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_same_parts_give_the_same_key_in_another_process() -> None:
    key = operation_key("order-42", "charge", 3)
    code = (
        "from effect_broker.client import operation_key; "
        "print(operation_key('order-42', 'charge', 3))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert key == other == "order-42:charge:3"


HEAVY = ("aiohttp", "asyncpg", "psycopg", "starlette", "httpx", "yarl", "multidict")


@pytest.mark.parametrize(
    "modules",
    [
        "effect_broker.target",
        "effect_broker.target.protocol",
        "effect_broker.target.outcomes, effect_broker.target.schema",
        "effect_broker.target.endpoints, effect_broker.target.asgi",
    ],
)
def test_the_pure_modules_import_no_driver_or_framework(modules: str) -> None:
    """The proxy and services on other stacks import these; a fresh interpreter shows
    what importing them really pulls in."""
    code = (
        f"import json, sys, {modules}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(result.stdout))
    assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)
