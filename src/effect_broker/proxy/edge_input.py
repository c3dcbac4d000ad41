"""Request text to check or escape before it reaches code that cannot carry it.

aiohttp hands undecodable bytes over as lone surrogates and decodes ``%00`` in a path to
U+0000. PostgreSQL's jsonb refuses both, the tracing digest cannot encode the first, and a
log line should hold neither. These helpers keep such text out, or make it visible.
"""

from __future__ import annotations

import re
import unicodedata

from effect_broker.errors import MalformedRequest


def printable(text: str) -> str:
    """``text`` with control characters and undecodable bytes as ``\\x..`` escapes."""
    if text.isprintable():
        return text
    out: list[str] = []
    for ch in text:
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # an undecodable byte, kept by surrogateescape
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif unicodedata.category(ch) in ("Cc", "Cs"):
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


#: A lone surrogate: a byte that was not UTF-8, as aiohttp hands it over.
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_path(path: str) -> None:
    """Refuse a decoded path no ledger row, log line or target should receive."""
    if "\x00" in path:
        raise MalformedRequest(
            "the path contains a NUL byte (%00), which no route can mean; "
            "nothing was forwarded or recorded"
        )
    if _SURROGATE.search(path):
        raise MalformedRequest(
            "the path is not valid UTF-8 once percent-decoded; "
            "nothing was forwarded or recorded"
        )
