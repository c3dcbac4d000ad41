"""``${env:NAME}`` references: how routes.yaml names a secret without containing it.

A routes file is reviewed, committed and printed by ``routes validate``; a credential in
it would leak everywhere it goes. So an injected header holds a template, checked for
well-formed references when the file is loaded and resolved from the environment only
when the proxy starts (``routes_file.resolve_inject_headers``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def env_references(template: str) -> tuple[str, ...]:
    """The variable names a header template uses; ``ValueError`` if one is malformed."""
    leftover = _ENV_REF.sub("", template)
    start = leftover.find("${")
    if start >= 0:
        end = leftover.find("}", start)
        fragment = leftover[start : end + 1] if end >= 0 else leftover[start:]
        raise ValueError(
            f"malformed reference {fragment!r}: write ${{env:NAME}}, NAME made of "
            "letters, digits and underscores (only env: references are supported)"
        )
    return tuple(_ENV_REF.findall(template))


def substitute_env(template: str, lookup: Callable[[str], str]) -> str:
    """Replace each ``${env:NAME}`` in ``template`` with ``lookup(NAME)``."""
    return _ENV_REF.sub(lambda ref: lookup(ref.group(1)), template)
