"""The leaf certificates the proxy shows inside an intercepted tunnel.

One server ``SSLContext`` per CONNECT host, minted on demand, signed by the local CA,
cached until a day before it expires, and willing to complete a handshake only for the
host the CONNECT named (``proxy.intercept`` uses them).
"""

from __future__ import annotations

import datetime
import logging
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from effect_broker.proxy.tls_ca import (
    LEAF_VALIDITY,
    CertificateAuthority,
    IPAddress,
    host_name,
    new_key,
)
from effect_broker.ratelimited_log import RateLimitedLog

log = logging.getLogger("effect_broker.intercept")
quiet = RateLimitedLog(log)

RENEW_BEFORE = datetime.timedelta(days=1)  # re-mint a cached leaf this close to expiry
MAX_CACHED_LEAVES = 1024  # SNI names are the client's choice: the cache is bounded


class LeafContexts:
    """One server ``SSLContext`` per host, each holding a leaf signed by the CA.

    ``ssl`` loads certificates from files only, so each new leaf passes through a
    private temporary directory that is removed as soon as it is loaded. One key pair
    serves every leaf of this process; it never leaves memory otherwise.
    """

    def __init__(self, ca: CertificateAuthority) -> None:
        self.ca = ca
        self._key = new_key()
        self._contexts: dict[str, tuple[ssl.SSLContext, datetime.datetime]] = {}

    def for_host(self, host: str | IPAddress) -> ssl.SSLContext:
        label = str(host)
        now = datetime.datetime.now(datetime.UTC)
        cached = self._contexts.get(label)
        if cached is not None and cached[1] - now > RENEW_BEFORE:
            return cached[0]
        certificate = self.ca.issue(host, self._key, validity=LEAF_VALIDITY)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        with tempfile.TemporaryDirectory(prefix="effect-broker-leaf-") as directory:
            chain = Path(directory) / "leaf.pem"
            key = Path(directory) / "leaf.key"
            chain.write_bytes(
                certificate.public_bytes(serialization.Encoding.PEM) + self.ca.pem()
            )
            key.touch(mode=0o600)
            key.write_bytes(
                self._key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
            context.load_cert_chain(chain, key)
        context.sni_callback = _only(host)
        self._contexts.pop(label, None)
        while len(self._contexts) >= MAX_CACHED_LEAVES:
            del self._contexts[next(iter(self._contexts))]  # the oldest minted
        self._contexts[label] = (context, certificate.not_valid_after_utc)
        return context


def _only(
    host: str | IPAddress,
) -> Callable[[ssl.SSLObject, str | None, Any], int | None]:
    """The SNI check of a leaf's context: the client may name the CONNECT host (in any
    spelling ``host_name`` folds) or send no name; any other name ends the handshake.

    Answering another name with a leaf for it would let a client inside a tunnel to a
    watched host get the proxy's CA to vouch for any host at all, and the requests in
    the tunnel go to the CONNECT host whatever name the handshake used.
    """

    def check(_: ssl.SSLObject, server_name: str | None, __: Any) -> int | None:
        if server_name is None or host_name(server_name) == host:
            return None
        quiet.warning(
            "sni",
            "TLS handshake in a tunnel to %s named %r: refused, a leaf is only "
            "signed for the host the CONNECT named",
            host,
            server_name[:100],
        )
        return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME

    return check
