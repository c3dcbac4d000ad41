"""The proxy and admin addresses: checked before anything starts, and a socket that
cannot open explained in one line that names the flag and variable to change."""

from __future__ import annotations

import errno
import re
import socket

from effect_broker.config.settings import Settings
from effect_broker.errors import EffectBrokerError
from effect_broker.server import split_address

# Which flag and variable set each address, for errors that must say how to change it.
ADDRESS_SETTINGS = {
    "listen": ("proxy", "--listen", "EFFECT_BROKER_LISTEN"),
    "admin_listen": ("admin", "--admin-listen", "EFFECT_BROKER_ADMIN_LISTEN"),
}
_BIND_ERRORS = {errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES}
_BOUND_PORT = re.compile(r"address \('[^']*', (\d+)\)")


def check_addresses(settings: Settings) -> None:
    """Refuse an address that is not host:port before anything starts."""
    for field, (role, flag, variable) in ADDRESS_SETTINGS.items():
        address = getattr(settings, field)
        try:
            split_address(address)
        except ValueError:
            raise EffectBrokerError(
                f"the {role} address {address!r} is not host:port; "
                f"set {flag} or {variable}"
            ) from None


def bind_failure(
    settings: Settings, exc: OSError, *, field: str | None = None
) -> EffectBrokerError | None:
    """A listening socket that could not open, as one line that says what to change.

    ``field`` names the address when the caller knows it; otherwise asyncio's message
    names the port, and that tells the proxy from the admin port.
    """
    if exc.errno not in _BIND_ERRORS:
        return None
    found = _BOUND_PORT.search(str(exc))
    culprits = (
        [field]
        if field is not None
        else [
            name
            for name in ADDRESS_SETTINGS
            if found is None or split_address(getattr(settings, name))[1] == int(found[1])
        ]
        or list(ADDRESS_SETTINGS)
    )
    reason = {
        errno.EADDRINUSE: "is already in use (another effect-broker, or another program)",
        errno.EADDRNOTAVAIL: "is not an address of this machine",
        errno.EACCES: "needs privileges this process lacks (a port below 1024?)",
    }[exc.errno]
    parts = []
    for name in culprits:
        role, flag, variable = ADDRESS_SETTINGS[name]
        parts.append(
            f"the {role} address {getattr(settings, name)} {reason}; "
            f"choose another with {flag} or {variable}"
        )
    return EffectBrokerError("; ".join(parts))


def try_bind(host: str, port: int) -> None:
    """Bind and release every address ``host`` names on ``port`` (as the server will,
    with SO_REUSEADDR), so a port in use is known before anything is created."""
    for family, kind, proto, _, address in socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)


def check_free(settings: Settings) -> None:
    """Refuse, in one line that names the flag, an address that cannot be bound now.

    Called before any key, CA or database is made: a busy port found only after all
    that leaves a folder full of state for a start that could never work.
    """
    check_addresses(settings)
    for field in ADDRESS_SETTINGS:
        host, port = split_address(getattr(settings, field))
        try:
            try_bind(host, port)
        except OSError as exc:
            failure = bind_failure(settings, exc, field=field)
            if failure is None:
                raise
            raise failure from exc
