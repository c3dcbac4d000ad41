"""Which tenant a request belongs to: the sidecar's own, or a gateway API key's.

The tenant never comes from a request field the agent controls freely: a sidecar serves
the one tenant in its settings, and a shared gateway takes it from ``Proxy-Authorization``
Basic credentials (tenant as user name, API key as password), checked against hashes in
the ledger. API keys are ``ebk_<key id>_<secret>``; only SHA-256 of the secret is kept,
which is enough for a 256-bit random secret (no password stretching needed).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import re
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from effect_broker.credential_budget import CredentialBudget, peer_key
from effect_broker.errors import (
    InvalidTenantName,
    ProxyAuthenticationRequired,
    TooManyFailedCredentials,
)
from effect_broker.headers import credentials

KEY_PREFIX = "ebk"
_KEY_ID = re.compile(r"[0-9a-f]{1,64}")
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
CACHE_SECONDS = 60.0
MAX_TENANT = 128


def check_tenant_name(tenant: str) -> None:
    """Refuse a tenant name that could never authenticate at the gateway.

    Basic credentials split ``user:password`` at the first colon, so a tenant named
    ``al:ice`` would arrive as tenant ``al`` and fail every time; such a name is refused
    when it is created rather than discovered in production.
    """
    if not tenant or len(tenant) > MAX_TENANT:
        raise InvalidTenantName(f"a tenant name is 1-{MAX_TENANT} characters long")
    if ":" in tenant:
        raise InvalidTenantName(
            f"tenant name {tenant!r} contains a colon; Proxy-Authorization Basic "
            "credentials end the user name at the first colon, so this tenant could "
            "never authenticate. Choose a name without ':' (e.g. "
            f"{tenant.replace(':', '-')!r})"
        )
    if not tenant.isprintable() or tenant != tenant.strip():
        raise InvalidTenantName(
            "a tenant name must be printable text without leading or trailing spaces"
        )


@dataclass(frozen=True, slots=True)
class NewApiKey:
    key_id: str
    secret_hash: bytes
    api_key: str  # shown once, never stored


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def new_api_key() -> NewApiKey:
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return NewApiKey(key_id, hash_secret(secret), f"{KEY_PREFIX}_{key_id}_{secret}")


def parse_api_key(api_key: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed key, else None.

    Only the shape ``new_api_key`` makes is accepted (hex key id, URL-safe secret): any
    other text could never match a stored key, and must not reach the ledger as a query
    parameter (a NUL or an undecodable byte would fail there instead of here).
    """
    prefix, _, rest = api_key.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != KEY_PREFIX or not _KEY_ID.fullmatch(key_id) or not secret:
        return None
    if not _SECRET.fullmatch(secret):
        return None
    return key_id, secret


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) from a ``Basic`` credentials header, else None."""
    encoded = credentials(header, "Basic")
    if encoded is None:
        return None
    try:
        decoded = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


class ApiKeys(Protocol):
    """Where a gateway finds an API key's tenant and secret hash (the ledger)."""

    async def api_key(self, key_id: str) -> tuple[str, bytes] | None: ...


class TenantResolver:
    """Gateway mode: the tenant of each request's proxy credentials, cached briefly.

    The cache keeps the hot path off the database; a revoked key stops working within
    ``CACHE_SECONDS``. Wrong credentials are budgeted per peer (``CredentialBudget``):
    past the budget a peer gets a 429 before any lookup, so guessing keys cannot be
    turned into ledger load.
    """

    def __init__(self, store: ApiKeys, budget: CredentialBudget | None = None) -> None:
        self._store = store
        self._cache: dict[str, tuple[str, bytes, float]] = {}
        self.budget = budget or CredentialBudget()

    async def tenant_for(
        self, proxy_authorization: str | None, peer: str | None = None
    ) -> str:
        """The tenant of these Basic credentials, from ``peer`` (its address)."""
        if not proxy_authorization:
            raise ProxyAuthenticationRequired(
                "this gateway needs Proxy-Authorization: use "
                "HTTP_PROXY=http://TENANT:API_KEY@host:port (make a key with "
                "`effect-broker tenants add TENANT`)"
            )
        pair = parse_basic(proxy_authorization)  # (tenant, API key)
        if pair is not None and self._cached(pair[1]) == pair[0]:
            return pair[0]  # a live key seen lately: no lookup, so no budget
        self._check_budget(peer)
        if pair is not None and await self._known(pair[1]) == pair[0]:
            return pair[0]
        self.budget.spend(peer_key(peer))
        raise ProxyAuthenticationRequired(
            "the proxy credentials are not a live API key of that tenant"
        )

    async def tenant_for_api_key(
        self, api_key: str, peer: str | None = None
    ) -> str | None:
        """The tenant owning a live API key, or None: the admin API's bearer check.

        The admin API takes the key alone (``Authorization: Bearer ebk_...``), so the
        tenant comes from the key's stored row, never from anything the caller names.
        """
        cached = self._cached(api_key)
        if cached is not None:
            return cached
        self._check_budget(peer)
        tenant = await self._known(api_key)
        if tenant is None:
            self.budget.spend(peer_key(peer))
        return tenant

    def _check_budget(self, peer: str | None) -> None:
        wait = self.budget.wait(peer_key(peer))
        if wait is not None:
            raise TooManyFailedCredentials(
                f"too many wrong credentials from {peer or 'this address'}; nothing "
                f"was checked. Retry in {math.ceil(wait)} s with a live API key",
                retry_after=timedelta(seconds=wait),
            )

    def _cached(self, api_key: str) -> str | None:
        """The tenant of a live API key found in the cache with this exact secret."""
        parsed = parse_api_key(api_key)
        if parsed is None:
            return None
        key_id, secret = parsed
        cached = self._cache.get(key_id)
        if cached is None or cached[2] <= time.monotonic():
            return None
        if not hmac.compare_digest(cached[1], hash_secret(secret)):
            return None
        return cached[0]

    async def _known(self, api_key: str) -> str | None:
        """The tenant of a live API key with this exact secret, else None."""
        parsed = parse_api_key(api_key)
        if parsed is None:
            return None
        key_id, secret = parsed
        known = await self._lookup(key_id)
        if known is None or not hmac.compare_digest(known[1], hash_secret(secret)):
            return None
        return known[0]

    async def _lookup(self, key_id: str) -> tuple[str, bytes] | None:
        cached = self._cache.get(key_id)
        now = time.monotonic()
        if cached is not None and cached[2] > now:
            return cached[0], cached[1]
        found = await self._store.api_key(key_id)
        if found is not None:
            self._cache[key_id] = (found[0], found[1], now + CACHE_SECONDS)
        return found
