"""``effect-broker bench``: run the benchmark harness of a source checkout.

The harness (``bench/run.py``) is not part of the installed package: it starts an
upstream, a bare proxy and ``effect-broker serve`` as processes of their own and needs
the repository around it. This command finds it relative to the current directory and
runs it with the same interpreter, passing the options through.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

HARNESS = Path("bench") / "run.py"

console = Console(stderr=True, soft_wrap=True, highlight=False)


def bench(
    quick: Annotated[
        bool, typer.Option("--quick", help="A ~1 minute smoke run: one 2 s run each.")
    ] = False,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="PostgreSQL server DSN; the bench creates and drops its own database "
            "there (default: the system server on 127.0.0.1:5432, else an embedded one).",
            show_default=False,
        ),
    ] = None,
    generator: Annotated[
        str,
        typer.Option("--generator", help="auto (wrk when installed), wrk or python."),
    ] = "auto",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", help="Where results.json goes \\[default: bench/results.json]."
        ),
    ] = None,
    extra: Annotated[
        list[str] | None,
        typer.Argument(
            help="Further bench/run.py options after `--`, e.g. "
            "`effect-broker bench -- --runs 5 --configs bare,new`.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Benchmark effect-broker against a bare proxy (runs bench/run.py from here)."""
    harness = Path.cwd() / HARNESS
    if not harness.is_file():
        console.print(
            f"[red]error:[/] {HARNESS} not found under {Path.cwd()}. The benchmark "
            "lives in the effect-broker source repository: run this command from the "
            "root of a checkout (or run `python bench/run.py` there)."
        )
        raise typer.Exit(2)
    args = [sys.executable, str(harness), "--generator", generator]
    if quick:
        args.append("--quick")
    if database_url:
        args += ["--database-url", database_url]
    if output is not None:
        args += ["--output", str(output)]
    args += extra or []
    raise typer.Exit(subprocess.call(args))
