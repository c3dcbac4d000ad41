"""``effect-broker init``: a commented starter ``routes.yaml`` in the current folder.

The starter is the packaged demo routes file (``effect_broker/demo/routes.yaml``), so
``init`` then ``up --demo`` works as written, and its comments say what to change to
put one's own service behind the proxy. It never overwrites the routes file: it holds a
person's contracts, and losing them silently would be worse than one more command.
Beside it goes ``routes.schema.json``, generated from this version's models, which the
routes file's first line names so that editors complete and check it offline.
"""

from __future__ import annotations

import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from effect_broker.config.routes_schema import SCHEMA_FILE, render_routes_schema

#: The starter and demo routes, shipped in the wheel as package data.
STARTER_ROUTES: Traversable = files("effect_broker.demo") / "routes.yaml"

console = Console(stderr=True, highlight=False, soft_wrap=True)


def init(
    path: Annotated[
        Path, typer.Argument(help="where to write the starter routes file")
    ] = Path("routes.yaml"),
) -> None:
    """Write a commented starter routes.yaml here (never overwrites one)."""
    text = STARTER_ROUTES.read_text("utf-8")
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        console.print(f"[red]error:[/] {path} already exists; not overwritten")
        raise typer.Exit(1) from None
    except OSError as exc:
        console.print(f"[red]error:[/] cannot write {path}: {exc.strerror or exc}")
        raise typer.Exit(1) from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    # Generated, so always refreshed: a schema from an older version would mislead.
    (path.parent / SCHEMA_FILE).write_text(render_routes_schema(), encoding="utf-8")
    console.print(
        f"wrote {path}: the demo routes, with comments on what to change, and "
        f"{SCHEMA_FILE} beside it for editors. Next:\n"
        f"  effect-broker up --demo    # these routes, the demo payment target, curl\n"
        f"  effect-broker routes validate {path}"
    )
