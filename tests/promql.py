"""The PromQL a dashboard or rule file names, read without a PromQL parser.

Good enough for the expressions in ``deploy/``: label matchers, grouping clauses, ranges
and strings are removed, then every remaining identifier not called as a function and
not a keyword is a metric name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or"}
    | {"unless", "bool", "offset", "inf", "nan"}
)
_REMOVED = (
    re.compile(r'"(?:[^"\\]|\\.)*"'),  # strings
    re.compile(r"\{[^}]*\}"),  # label matchers
    re.compile(r"\[[^\]]*\]"),  # ranges
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),
    re.compile(r"\$\w+"),  # dashboard variables
)
_IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names(expression: str) -> set[str]:
    text = expression
    for pattern in _REMOVED:
        text = pattern.sub(" ", text)
    return {
        match.group(1)
        for match in _IDENTIFIER.finditer(text)
        if match.group(2) is None and match.group(1).lower() not in _KEYWORDS
    }


def dashboard_expressions(path: Path) -> Iterator[str]:
    """Every PromQL query of a Grafana dashboard: panel targets and variable queries."""
    document = json.loads(path.read_text())

    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr" and isinstance(value, str):
                    yield value
                else:
                    yield from walk(value)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)

    yield from walk(document["panels"])
    for variable in document["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["definition"])
            assert inner, f"variable {variable['name']}: {variable['definition']}"
            yield inner.group(1)
