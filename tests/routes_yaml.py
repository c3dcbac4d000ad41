"""routes.yaml texts the tests share, built instead of copied.

Most proxy tests need the same file: one idempotent contract and one reverse-mode route
to a test upstream, differing only in a timeout, a retry limit or a path prefix. Copies
of that literal drifted apart across test files; ``one_idempotent_route`` writes it
once, with the differences as arguments.
"""

from __future__ import annotations


def one_idempotent_route(
    upstream: str,
    *,
    timeout: str = "5s",
    retry_limit: int | None = None,
    prefix: str = "/payments",
    route: str = "payments",
    contract: str = "payments.charge",
    path: str = "/v1/charges",
) -> str:
    """One idempotent ``contract`` (``Idempotency-Key``, kept 1h) and one route that
    takes ``POST {prefix}{path}`` to ``upstream`` with ``prefix`` stripped."""
    retries = f"    retry_limit: {retry_limit}\n" if retry_limit is not None else ""
    return f"""\
version: 1
contracts:
  - name: {contract}
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: {timeout}
{retries}routes:
  - name: {route}
    match: {{method: POST, path: {prefix}{path}}}
    strip_prefix: {prefix}
    upstream: {upstream}
    contract: {contract}
"""
