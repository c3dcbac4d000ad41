"""RFC 7240's ``Prefer: wait``: read among other preferences, capped, never an error."""

from __future__ import annotations

import pytest

from effect_broker.headers import MAX_PREFERRED_WAIT, preferred_wait


@pytest.mark.parametrize(
    ("values", "seconds"),
    [
        ([], None),
        (["wait=10"], 10.0),
        (["respond-async, wait=3"], 3.0),
        (["return=minimal", "Wait = 0"], 0.0),
        (['wait="7"'], 7.0),
        (["wait=10; foo=bar"], 10.0),
        (["wait=86400"], MAX_PREFERRED_WAIT),
        (["wait=soon"], None),
        (["wait=-1"], None),
        (["wait=1.5"], None),
        (["handling=lenient"], None),
        (["wait=\u00b2"], None),  # a digit to str.isdigit(), not to float()
        (["wait=\u0663"], None),  # ARABIC-INDIC DIGIT THREE: not an RFC 9110 DIGIT
        (["wait=\udcff"], None),  # an undecodable byte, as aiohttp hands it over
        (["wait=" + "9" * 400], MAX_PREFERRED_WAIT),
    ],
)
def test_the_wait_preference(values: list[str], seconds: float | None) -> None:
    assert preferred_wait(values) == seconds
