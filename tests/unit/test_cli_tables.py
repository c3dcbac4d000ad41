"""Tables fit 80 columns without cutting or folding what a person reads or copies."""

from __future__ import annotations

import io

from rich.console import Console

from effect_broker.cli.keys import status_table
from effect_broker.cli.routes import print_tables
from effect_broker.config.routes_file import load_routes
from effect_broker.store.keys import RECEIPT, REQUEST, ROOT, KeyUsage
from tests.support import ROOT as REPOSITORY

OLD, NEW = "k1-5be3056c0231e536", "k1-aaaa056c0231e536"


def test_keys_status_shows_whole_key_ids_at_80_columns() -> None:
    """The key id column was cut to `k1-5be3056c0…`: the one value to copy."""
    usage = [
        KeyUsage(NEW, REQUEST, 120345, None),
        KeyUsage(NEW, RECEIPT, 120000, None),
        KeyUsage(OLD, REQUEST, 3, "e1"),
        KeyUsage(NEW, ROOT, 1, None),
    ]
    out = io.StringIO()
    Console(file=out, width=80).print(status_table(usage, [OLD, NEW], (NEW, OLD)))
    text = out.getvalue()

    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    new_row = next(line for line in text.splitlines() if NEW in line)
    assert "encrypts" in new_row and "120345" in new_row and "120000" in new_row
    assert OLD in text


def test_routes_validate_in_an_80_column_terminal_prints_whole_values() -> None:
    """The routes table folded cells mid-word at 80 columns ("paymen/ts.internal")."""
    config = load_routes(REPOSITORY / "routes.yaml")

    def shown(width: int) -> str:
        out = io.StringIO()
        console = Console(file=out, width=width, force_terminal=True, color_system=None)
        print_tables(console, config)
        return out.getvalue()

    narrow, wide = shown(80), shown(200)

    assert max(len(line) for line in narrow.splitlines()) <= 80
    for route in config.routes:
        assert f"  {route.name}\n" in narrow
        assert f"upstream: {route.upstream}\n" in narrow
    assert "host: payments.internal" in narrow and "retry limit: 5" in narrow
    assert "┃ name" in wide  # wide enough: the table itself
