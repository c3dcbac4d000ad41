"""The list layout's wrapping and width sharing, without a broker."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from effect_broker.cli.effects_table import MIN_FLEX, _share, short_id, wrap


def test_wrap_breaks_at_spaces_and_after_separators_only() -> None:
    assert wrap("no complete answer within 0.5s", 12).splitlines() == [
        "no complete",
        "answer",
        "within 0.5s",
    ]
    assert wrap("order-42:charge-card", 10).splitlines() == [
        "order-42:",
        "charge-",
        "card",
    ]


def test_wrap_folds_only_a_word_wider_than_the_column() -> None:
    assert wrap("abcdefghijkl x", 5).splitlines() == ["abcde", "fghij", "kl x"]


@given(st.text(min_size=1, max_size=200), st.integers(min_value=1, max_value=40))
def test_wrap_loses_nothing_but_spaces_and_fits(text: str, width: int) -> None:
    wrapped = wrap(text, width)
    assert all(len(line) <= width for line in wrapped.splitlines())
    squeeze = "".join(text.split())
    assert "".join(wrapped.split()) == squeeze


def test_share_gives_natural_widths_when_they_fit_and_fair_shares_otherwise() -> None:
    assert _share([8, 20, 30], 100) == [8, 20, 30]
    assert _share([8, 40, 30], 32) == [8, 12, 12]
    assert _share([40, 40, 40], 6) == [MIN_FLEX] * 3


def test_short_id_is_the_first_eight_hex_digits() -> None:
    assert short_id("3f87e6a5-0d1c-4b7e-9a2b-0c4d5e6f7a8b") == "3f87e6a5"
