"""Architecture rules that code review alone would let slip."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "src" / "effect_broker"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

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
    "answers/table.py",
    "demo/explorer/schedule.py",
    "demo/explorer/oracle.py",
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
    """``demo/`` is exempt: the crash matrix audits the ledger from outside, with SQL of
    its own, so that a bug in the store's queries cannot also hide from the proof.
    ``target/`` is exempt: the target kit runs inside another service, on that
    service's database, and never touches the ledger."""
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if not {"store", "demo", "target"} & set(path.relative_to(PACKAGE).parts)
        and any(name.split(".")[0] == "asyncpg" for name in imported_modules(path))
    ]
    assert offenders == []


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_do_no_io(module: str) -> None:
    imports = {name.split(".")[0] for name in imported_modules(PACKAGE / module)}
    assert imports & IO_MODULES == set()


def _function_level_imports(path: Path) -> list[int]:
    """Lines of ``effect_broker`` imports inside functions or ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.If):
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.ImportFrom)
                    and (inner.module or "").startswith("effect_broker")
                ) or (
                    isinstance(inner, ast.Import)
                    and any(a.name.startswith("effect_broker") for a in inner.names)
                ):
                    lines.append(inner.lineno)
    return lines


def test_no_import_hides_in_a_function_or_behind_type_checking() -> None:
    """Such imports hide layer violations and cycles from a reader (import-linter still
    sees them). The exceptions: the CLI attaches its command groups lazily so that
    ``effect-broker --help`` does not import the whole server, and the console script
    imports the CLI only once it knows the server's libraries are installed."""
    offenders = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := _function_level_imports(path))
        and path.relative_to(PACKAGE) not in {Path("cli/__init__.py"), Path("console.py")}
    }
    assert offenders == {}


def _lint_imports(src: Path) -> subprocess.CompletedProcess[str]:
    # Wide enough that no refusal is wrapped mid-sentence, whatever the terminal.
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "300"}
    return subprocess.run(
        [str(LINT_IMPORTS), str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=src.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_import_contracts_hold() -> None:
    result = _lint_imports(ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_import_contracts_refuse_an_engine_that_imports_the_proxy(
    tmp_path: Path,
) -> None:
    """The contracts are not vacuous: a deliberate violation breaks the check."""
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "effect_broker")
    policy = src / "effect_broker" / "engine" / "policy.py"
    policy.write_text(policy.read_text() + "\nimport effect_broker.proxy.flow\n")

    result = _lint_imports(src)

    assert result.returncode == 1, result.stdout
    assert "effect_broker.engine is not allowed to import effect_broker.proxy" in (
        result.stdout
    )


def test_the_import_contracts_keep_the_demo_out_of_the_proxy(tmp_path: Path) -> None:
    """The demo applications sit on top of the package; the proxy never imports them."""
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "effect_broker")
    flow = src / "effect_broker" / "proxy" / "flow.py"
    flow.write_text(flow.read_text() + "\nimport effect_broker.demo.payment_target\n")

    result = _lint_imports(src)

    assert result.returncode == 1, result.stdout
    assert "effect_broker.proxy is not allowed to import effect_broker.demo" in (
        result.stdout
    )


@pytest.mark.parametrize(
    ("module", "violation", "refusal"),
    [
        (
            "admin/app.py",
            "import effect_broker.store",
            "effect_broker.admin is not allowed to import effect_broker.store",
        ),
        (
            "mcp/handler.py",
            "import effect_broker.store.postgres",
            "effect_broker.mcp is not allowed to import effect_broker.store",
        ),
        (
            "engine/engine.py",
            "import asyncpg",
            "effect_broker.engine is not allowed to import asyncpg",
        ),
        (
            "proxy/flow.py",
            "import asyncpg",
            "effect_broker.proxy is not allowed to import asyncpg",
        ),
        (
            "proxy/flow.py",
            "import effect_broker.engine.dispatch",
            "effect_broker.proxy is not allowed to import effect_broker.engine.dispatch",
        ),
        (
            "admin/app.py",
            "from effect_broker.engine.policy import decide",
            "effect_broker.admin is not allowed to import effect_broker.engine.policy",
        ),
        (
            "answers/table.py",
            "import effect_broker.proxy.flow",
            "effect_broker.answers is not allowed to import effect_broker.proxy",
        ),
        (
            "answers/intake.py",
            "import effect_broker.engine.dispatch",
            "effect_broker.answers is not allowed to import "
            "effect_broker.engine.dispatch",
        ),
    ],
    ids=[
        "admin->store",
        "mcp->store",
        "engine->asyncpg",
        "proxy->asyncpg",
        "proxy->engine.dispatch",
        "admin->engine.policy",
        "answers->proxy",
        "answers->engine.dispatch",
    ],
)
def test_the_port_contracts_refuse_a_deliberate_violation(
    tmp_path: Path, module: str, violation: str, refusal: str
) -> None:
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "effect_broker")
    broken = src / "effect_broker" / module
    broken.write_text(broken.read_text() + f"\n{violation}\n")

    result = _lint_imports(src)

    assert result.returncode == 1, result.stdout
    assert refusal in result.stdout, result.stdout
