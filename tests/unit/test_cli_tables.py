"""Tables a person copies from fit 80 columns without cutting what they copy."""

from __future__ import annotations

import io

from rich.console import Console

from effect_broker.cli.keys import status_table
from effect_broker.store.keys import RECEIPT, REQUEST, ROOT, KeyUsage

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
