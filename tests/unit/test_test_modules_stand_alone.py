"""No test module imports from another test module.

Importing a helper from ``test_x.py`` ties two test files together: moving, renaming or
deleting a test breaks a file that does not look related, and pytest collects the
imported module's tests into the importer's namespace. Shared helpers belong in a
support module (``tests/support.py``, ``*_support.py``); this test reads every test
module's imports (parsed, never imported) and names each one that breaks the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parents[1]
TREE = TESTS.name  # "tests": the package every test module lives in


def is_test_module(name: str) -> bool:
    return name.startswith("test_") or name.endswith("_test")


def imports_of_test_modules(source: str, package: str) -> list[str]:
    """The imports in ``source`` (a module of the dotted ``package``) that name one of
    this tree's test modules: ``from tests.x.test_y import ...``, ``import
    tests.x.test_y``, ``from tests.x import test_y`` and their relative spellings.
    Other packages' modules (``aiohttp.test_utils``) are not test modules of ours."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if names_a_test(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], base]).strip(".")
            if not base.startswith(f"{TREE}.") and base != TREE:
                continue
            if names_a_test(base):
                found.append(base)
            else:
                found += [
                    f"{base}.{alias.name}"
                    for alias in node.names
                    if is_test_module(alias.name)
                ]
    return found


def names_a_test(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] == TREE and any(is_test_module(part) for part in parts[1:])


def test_no_test_module_imports_another() -> None:
    offenders = []
    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 50, "the test tree was not found where expected"
    for path in modules:
        relative = path.relative_to(TESTS.parent)
        package = ".".join(relative.parent.parts)
        for name in imports_of_test_modules(path.read_text(encoding="utf-8"), package):
            offenders.append(f"{relative}: imports {name}")
    assert not offenders, (
        "test modules import other test modules; move the shared helpers into a "
        "support module (tests/support.py or a *_support.py beside them):\n"
        + "\n".join(offenders)
    )


def test_every_spelling_of_importing_a_test_module_is_seen() -> None:
    source = """
from tests.integration.test_https_intercept import setup
import tests.unit.test_fence
from tests.integration import test_plain_tunnel
from .test_reserve import charge
from . import test_writes
from ..unit.test_fence import clock
def later():
    from tests.crash.test_matrix import cases
"""
    assert imports_of_test_modules(source, "tests.integration") == [
        "tests.integration.test_https_intercept",
        "tests.unit.test_fence",
        "tests.integration.test_plain_tunnel",
        "tests.integration.test_reserve",
        "tests.integration.test_writes",
        "tests.unit.test_fence",
        "tests.crash.test_matrix",
    ]


def test_support_modules_and_the_library_are_allowed() -> None:
    source = """
from tests.integration.intercept_support import setup
from tests.support import poll
import pytest
from aiohttp.test_utils import TestClient
import tests.integration.harness
from effect_broker.engine import Engine
from . import harness
from .tls_support import TlsWorld
"""
    assert imports_of_test_modules(source, "tests.integration") == []
