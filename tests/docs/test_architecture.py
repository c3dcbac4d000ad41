"""The architecture page's transition table says what ``state_machine.py`` enforces.

Both directions: every row of the page is a move the state machine allows for exactly
the classes the row names, and every move the state machine allows has its row. A
change to either without the other fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from effect_broker.models import EffectStatus, SafetyClass
from effect_broker.state_machine import is_allowed

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
TABLE_MARK = "<!-- transitions: checked by tests/docs/test_architecture.py -->"
CODE = re.compile(r"`([a-z_]+)`")


def documented() -> dict[tuple[EffectStatus, EffectStatus], frozenset[SafetyClass]]:
    text = PAGE.read_text()
    rows = text.split(TABLE_MARK, 1)[1].strip().split("\n\n", 1)[0].splitlines()
    moves = {}
    for row in rows[2:]:  # after the header and its rule
        source, target, classes = (cell.strip() for cell in row.strip("|").split("|")[:3])
        key = (
            EffectStatus(CODE.fullmatch(source)[1]),  # type: ignore[index]
            EffectStatus(CODE.fullmatch(target)[1]),  # type: ignore[index]
        )
        assert key not in moves, f"{key} is documented twice"
        moves[key] = (
            frozenset(SafetyClass)
            if classes == "all"
            else frozenset(SafetyClass(name.strip()) for name in classes.split(","))
        )
    return moves


def enforced() -> dict[tuple[EffectStatus, EffectStatus], frozenset[SafetyClass]]:
    moves = {}
    for source in EffectStatus:
        for target in EffectStatus:
            classes = frozenset(s for s in SafetyClass if is_allowed(source, target, s))
            if classes:
                moves[(source, target)] = classes
    return moves


def test_the_page_lists_every_allowed_move_with_its_classes() -> None:
    page, code = documented(), enforced()
    assert page.keys() == code.keys(), {
        "documented, not allowed": sorted(page.keys() - code.keys()),
        "allowed, not documented": sorted(code.keys() - page.keys()),
    }
    for move, classes in code.items():
        assert page[move] == classes, (move, sorted(page[move]), sorted(classes))
