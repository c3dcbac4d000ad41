"""The command line answers ``--help``, ``-h`` and ``--version`` without importing the
commands: every command took seconds to print its help because each imported the MCP
SDK, the crash matrix and the database driver first."""

from __future__ import annotations

import subprocess
import sys

import typer

from effect_broker.cli import COMMANDS, SUMMARIES, _register, app, installed_version

HEAVY = ("mcp", "asyncpg", "aiohttp", "effect_broker.runtime", "effect_broker.demo")

PROBE = """
import atexit, sys
heavy = {heavy!r}
atexit.register(lambda: print("HEAVY=" + ",".join(
    m for m in heavy if m in sys.modules), file=sys.stderr))
sys.argv = ["effect-broker", *{argv!r}]
from effect_broker.cli import main
main()
"""


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY, argv=list(argv))],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    )


def heavy_imports(result: subprocess.CompletedProcess[str]) -> list[str]:
    [line] = [x for x in result.stderr.splitlines() if x.startswith("HEAVY=")]
    return [name for name in line.removeprefix("HEAVY=").split(",") if name]


def test_the_top_level_help_imports_no_command() -> None:
    for argv in (["--help"], ["-h"], []):
        result = run(*argv)
        assert "Usage: effect-broker" in result.stdout, result
        assert "doctor" in result.stdout and "effects" in result.stdout
        assert heavy_imports(result) == [], argv


def test_version_is_printed_without_the_commands() -> None:
    result = run("--version")

    assert result.returncode == 0, result
    assert result.stdout.strip() == f"effect-broker {installed_version()}"
    assert heavy_imports(result) == []


def test_a_command_help_imports_that_command_only() -> None:
    result = run("routes", "-h")

    assert result.returncode == 0, result
    assert "Inspect and validate routes.yaml" in result.stdout
    assert "mcp" not in heavy_imports(result)
    assert "effect_broker.demo" not in heavy_imports(result)


def test_the_summaries_are_the_commands_own_help() -> None:
    _register()
    group = typer.main.get_command(app)

    assert set(SUMMARIES) == set(COMMANDS)
    for name, summary in SUMMARIES.items():
        own = group.commands[name].help or ""  # type: ignore[attr-defined]
        assert " ".join(own.split("\n\n")[0].split()) == summary, name
