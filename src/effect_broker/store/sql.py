"""Load the named query blocks of ``queries.sql`` once, so all runtime SQL is one file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

_BLOCK_HEADER = re.compile(r"^-- ([a-z_][a-z0-9_]*) --$", re.MULTILINE)


def parse_query_blocks(text: str) -> Mapping[str, str]:
    """Split ``-- name --`` blocks; the comment lines inside a block are kept as is."""
    headers = list(_BLOCK_HEADER.finditer(text))
    queries: dict[str, str] = {}
    ends = [header.start() for header in headers[1:]] + [len(text)]
    for header, end in zip(headers, ends, strict=False):
        body = text[header.end() : end].strip()
        if header.group(1) in queries:
            raise ValueError(f"query {header.group(1)!r} is defined twice")
        queries[header.group(1)] = body
    return MappingProxyType(queries)


@cache
def queries() -> Mapping[str, str]:
    text = resources.files("effect_broker.store").joinpath("queries.sql").read_text()
    return parse_query_blocks(text)
