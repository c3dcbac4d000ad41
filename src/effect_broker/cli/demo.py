"""``effect-broker demo crash-matrix``: the proof, run on this machine by one command.

The matrix itself lives in ``examples/crash_matrix/`` next to the demo payment target
and the scripted agent, as readable example code rather than package internals: it is
what a user reads to check the claims. So this command finds it relative to the current
directory (run it from a checkout) and imports it by path.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer
from rich.console import Console

from effect_broker.embedded import embedded_postgres

RUNNER = Path("examples") / "crash_matrix" / "runner.py"
MODULE_NAME = "crash_matrix_runner"

demo_app = typer.Typer(
    help="Demonstrations that run real processes against a real PostgreSQL.",
    no_args_is_help=True,
)


def load_runner(path: Path) -> ModuleType:
    """Import the runner from ``path``; a clear error when this is not a checkout."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: run this from a checkout of effect-broker (the matrix "
            "lives in examples/crash_matrix/, beside the demo payment target)"
        )
    if (loaded := sys.modules.get(MODULE_NAME)) is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path.resolve())
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module  # its dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


@contextmanager
def postgres_server(database_url: str | None, scratch: Path) -> Iterator[str]:
    """The given server, or a throwaway embedded one (fsync off: nothing here is kept)."""
    if database_url:
        yield database_url
        return
    with embedded_postgres(scratch / "postgres", durable=False, keep_data=False) as dsn:
        yield dsn


@demo_app.command("crash-matrix")
def crash_matrix(
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="a PostgreSQL server on which the matrix may create and drop "
            "databases [default: an embedded PostgreSQL in a temporary directory]",
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(help="keep every cell's logs and ledger history here"),
    ] = None,
    parallel: Annotated[int, typer.Option(min=1, help="cells run at once")] = 3,
) -> None:
    """Kill the proxy at every failpoint, freeze it, race it; count the target's charges.

    Exits 1 if any cell breaks its rule (see examples/crash_matrix/runner.py).
    """
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: room for the table's verdicts
    try:
        runner = load_runner(Path.cwd() / RUNNER)
    except (OSError, ImportError) as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    scratch = Path(tempfile.mkdtemp(prefix="effect-broker-crash-matrix-"))
    cells = workdir or scratch / "cells"
    try:
        with postgres_server(database_url, scratch) as server:
            if database_url is None:
                console.print("embedded PostgreSQL started", highlight=False)
            result: Any = runner.run_matrix(
                server,
                cells,
                progress=lambda line: console.print(line, highlight=False),
                parallel=parallel,
            )
        runner.report(console, result)
    finally:
        shutil.rmtree(scratch / "postgres", ignore_errors=True)
    if result.ok:
        if workdir is None:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    console.print(f"cell logs and ledger histories kept in {cells}", highlight=False)
    raise typer.Exit(1)
