"""``effect-broker routes ...``: check a routes file before a proxy ever loads it."""

from __future__ import annotations

import typer

routes_app = typer.Typer(help="Inspect and validate routes.yaml.", no_args_is_help=True)
