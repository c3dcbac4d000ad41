"""``doctor``'s checks of what lies outside the process: the interception CA, the
upstream trust store, and each upstream reached as the proxy would reach it.

Apart from the ledger checks because they need no database: a doctor without one still
says whether the proxy could reach its targets.
"""

from __future__ import annotations

import ssl
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import aiohttp

from effect_broker.cli.ca import ca_paths
from effect_broker.cli.doctor_finding import Finding
from effect_broker.config.routes_config import RoutesConfig
from effect_broker.config.settings import Settings
from effect_broker.engine import tls_failure
from effect_broker.errors import EffectBrokerError
from effect_broker.proxy.tls_ca import fingerprint
from effect_broker.runtime import load_ca, upstream_tls_from

CONNECT_TIMEOUT = 3.0
CA_WARN_BEFORE = timedelta(days=30)


async def _ask(url: str, tls: ssl.SSLContext) -> str:
    """HEAD the upstream as the proxy would reach it (same trust, no proxy variables,
    certificates always verified); what it answered, or ``UpstreamProblem``."""
    timeout = aiohttp.ClientTimeout(total=CONNECT_TIMEOUT * 2, connect=CONNECT_TIMEOUT)
    async with (
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=tls, limit=1),
            trust_env=False,
            timeout=timeout,
        ) as session,
        session.head(url, allow_redirects=False) as response,
    ):
        return f"HEAD answered {response.status}"


def _origin(upstream: str) -> tuple[str, str, int]:
    parts = urlsplit(upstream)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname or "", parts.port or default


async def upstream_findings(
    config: RoutesConfig, tls: ssl.SSLContext | None
) -> list[Finding]:
    """Each upstream as the proxy would reach it: connect, TLS handshake with the
    proxy's own trust (the system store plus EFFECT_BROKER_UPSTREAM_CA_FILE), HEAD.

    A certificate the proxy does not trust fails: every recorded request of those
    routes would end in 502 upstream-tls. An upstream that does not answer now is a
    warning: the target may simply be down.
    """
    by_origin: dict[tuple[str, str, int], tuple[str, list[str]]] = {}
    for route in config.routes:
        if route.upstream:
            url, names = by_origin.setdefault(
                _origin(route.upstream), (route.upstream, [])
            )
            names.append(route.name)
    findings = []
    for (scheme, host, port), (url, names) in sorted(by_origin.items()):
        check = f"upstream {host}:{port}"
        used_by = f" (routes {', '.join(names)})"
        if tls is None:
            findings.append(Finding(check, False, "not checked: no upstream trust store"))
            continue
        try:
            answer = await _ask(url, tls)
        except aiohttp.ClientConnectorCertificateError as exc:
            findings.append(
                Finding(
                    check,
                    False,
                    f"{tls_failure(host, exc)}: every request of these routes would "
                    "end in 502 upstream-tls and nothing would be sent. Trust the "
                    "target's CA with EFFECT_BROKER_UPSTREAM_CA_FILE (a PEM bundle), "
                    "or fix its certificate" + used_by,
                )
            )
            continue
        except aiohttp.ClientConnectorSSLError as exc:
            findings.append(Finding(check, False, f"{tls_failure(host, exc)}{used_by}"))
            continue
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            why = str(exc) or type(exc).__name__
            findings.append(
                Finding(check, False, f"cannot reach it now: {why}{used_by}", True)
            )
            continue
        verified = "TLS verified, " if scheme == "https" else ""
        findings.append(Finding(check, True, f"{verified}{answer}{used_by}"))
    return findings


def with_ups_ca(settings: Settings) -> Settings:
    """The CA ``up`` intercepts with, when none is configured and up made one: doctor
    next to a running up must not report "no CA" while up intercepts with its own."""
    if settings.ca_cert is not None or settings.ca_key is not None:
        return settings
    cert, key = ca_paths(settings.data_dir)
    if not (cert.exists() and key.exists()):
        return settings
    return settings.model_copy(update={"ca_cert": cert, "ca_key": key})


def tls_findings(settings: Settings) -> list[Finding]:
    """The interception CA (usable, and for how long) and the upstream trust store."""
    findings: list[Finding] = []
    try:
        ca = load_ca(settings)
    except EffectBrokerError as exc:
        findings.append(Finding("CA", False, exc.message))
    else:
        if ca is None:
            findings.append(
                Finding(
                    "CA",
                    True,
                    "none configured, and no CA of `effect-broker up` in "
                    f"{settings.data_dir}: CONNECT to watched hosts is refused",
                )
            )
        else:
            until = ca.certificate.not_valid_after_utc
            left = until - datetime.now(UTC)
            findings.append(
                Finding(
                    "CA",
                    left > timedelta(0),
                    f"{settings.ca_cert}: CONNECT to watched hosts is intercepted; "
                    f"{fingerprint(ca.certificate)[:23]}... valid until "
                    f"{until:%Y-%m-%d}"
                    + ("" if left > CA_WARN_BEFORE else "; rotate: ca init --force"),
                    warning=timedelta(0) < left <= CA_WARN_BEFORE,
                )
            )
    try:
        upstream_tls_from(settings)
        extra = settings.upstream_ca_file
        detail = "system trust store" + (f" plus {extra}" if extra else "")
        findings.append(Finding("upstream TLS", True, detail))
    except EffectBrokerError as exc:
        findings.append(Finding("upstream TLS", False, exc.message))
    return findings
