"""Architecture rules that code review alone would let slip."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "src" / "effect_broker"

# Pure logic: decisions a test can check with no socket, database or file.
PURE_MODULES = [
    "canonical.py",
    "state_machine.py",
    "config/routing.py",
    "config/contracts.py",
    "config/durations.py",
    "history.py",
    "crypto.py",
    "engine/policy.py",
    "engine/outcomes.py",
]
IO_MODULES = {"asyncpg", "aiohttp", "socket", "subprocess", "requests", "httpx"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_only_the_store_imports_asyncpg() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "store" not in path.relative_to(PACKAGE).parts
        and any(name.split(".")[0] == "asyncpg" for name in imported_modules(path))
    ]
    assert offenders == []


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_do_no_io(module: str) -> None:
    imports = {name.split(".")[0] for name in imported_modules(PACKAGE / module)}
    assert imports & IO_MODULES == set()
