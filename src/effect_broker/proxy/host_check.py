"""Whether a request addressed to the proxy itself names the proxy in its ``Host``.

Reverse-mode and MCP requests are addressed to the sidecar, so their ``Host`` is one of
its own names. A page in a browser that rebinds its own name (``evil.example.com``) to
the sidecar's address reaches the sidecar with ``Host: evil.example.com``: the proxy
would route it, replace the Host with the upstream's, and so defeat the upstream's own
DNS-rebinding check (an MCP server's, say). So such a request is refused before any
routing, unless its host is one of the proxy's names:

- any IP literal (a rebinding needs a name; a page at an IP is that IP's own origin),
- ``localhost`` and names under ``.localhost``,
- the host of the listen address and this machine's host name,
- every entry of ``EFFECT_BROKER_ALLOWED_HOSTS`` (comma-separated; ``.example.com``
  also allows the names under it; ``*`` turns the check off).

The port is not compared: a rebinding changes the name, and a sidecar behind port
forwarding is reached on ports it does not know. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import ip_address

from effect_broker.config.hosts import split_authority

LOOPBACK_NAME = "localhost"


def _fold(name: str) -> str:
    return name.strip().lower().rstrip(".")


def _is_ip(host: str) -> bool:
    try:
        ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class HostCheck:
    """The names (and ``.suffix`` domains) the proxy answers to as itself."""

    names: frozenset[str]
    suffixes: tuple[str, ...] = ()
    any_host: bool = False

    @classmethod
    def configured(cls, *, listen: str, allowed: str, hostname: str) -> HostCheck:
        """The check for a proxy listening on ``listen`` on machine ``hostname``, with
        ``allowed`` (``EFFECT_BROKER_ALLOWED_HOSTS``) added."""
        entries = [_fold(entry) for entry in allowed.split(",") if entry.strip()]
        listen_host = listen.rpartition(":")[0].strip("[]")
        names = {_fold(hostname), _fold(listen_host), LOOPBACK_NAME}
        names.update(entry for entry in entries if not entry.startswith("."))
        suffixes = tuple(entry for entry in entries if entry.startswith("."))
        return cls(frozenset(names - {""}), suffixes, any_host="*" in entries)

    def refusal(self, host_header: str | None) -> str | None:
        """Why a request with this ``Host`` is not for this proxy, or None."""
        if self.any_host or host_header is None:
            return None
        try:
            host = _fold(split_authority(host_header)[0])
        except ValueError:
            return f"the Host header {host_header[:100]!r} is not host[:port]"
        if (
            _is_ip(host)
            or host in self.names
            or host.endswith(".localhost")
            or any(host.endswith(suffix) for suffix in self.suffixes)
        ):
            return None
        return (
            f"this proxy does not answer to {host[:100]!r}: requests to it must name "
            "it in Host (localhost, an IP address, its host name or listen address). "
            "If that is one of its names, add it to EFFECT_BROKER_ALLOWED_HOSTS; a page "
            "that rebinds its own name to the proxy is refused here"
        )
