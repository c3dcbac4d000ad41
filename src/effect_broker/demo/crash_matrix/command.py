"""``python -m effect_broker.demo.crash_matrix``: the matrix with every option.

``effect-broker demo crash-matrix`` is the same run from the main CLI.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from effect_broker.demo.crash_matrix.matrix import SABOTAGES, run_matrix
from effect_broker.demo.crash_matrix.report import report
from effect_broker.demo.crash_matrix.verdicts import MODES, SCENARIOS, MatrixResult
from effect_broker.embedded import embedded_postgres

# --------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m effect_broker.demo.crash_matrix",
        description="Run effect-broker's crash matrix.",
    )
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server DSN on which databases may be created and dropped "
        "(default: an embedded PostgreSQL in a temporary directory)",
    )
    parser.add_argument("--workdir", type=Path, help="keep cell logs here")
    parser.add_argument("--mode", action="append", choices=MODES, dest="modes")
    parser.add_argument(
        "--scenario", action="append", choices=SCENARIOS, dest="scenarios"
    )
    parser.add_argument("--parallel", type=int, default=3, help="cells run at once")
    parser.add_argument(
        "--sabotage",
        choices=SABOTAGES,
        help="break the proxy on purpose, to see the matrix catch it",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: room for the table's verdicts
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="crash-matrix-"))

    def run(dsn: str) -> MatrixResult:
        return run_matrix(
            dsn,
            workdir / "cells",
            progress=lambda line: console.print(line, highlight=False),
            modes=args.modes or MODES,
            scenarios=args.scenarios or SCENARIOS,
            parallel=args.parallel,
            sabotage=args.sabotage,
        )

    if args.database_url:
        result = run(args.database_url)
    else:
        console.print("starting an embedded PostgreSQL ...")
        with embedded_postgres(
            workdir / "postgres", durable=False, keep_data=False
        ) as dsn:
            result = run(dsn)
    report(console, result)
    if result.ok and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    elif not result.ok:
        console.print(f"cell logs kept in {workdir / 'cells'}", highlight=False)
    return 0 if result.ok else 1
