"""``effect-broker ca init|show|bundle``: the local CA that lets the proxy read HTTPS to
hosts routes watch.

The CA lives in the data directory (``ca.pem``, and ``ca.key`` readable by its owner
only). Whoever holds the key can impersonate any host to a client that trusts the CA,
so it is made per installation, never shipped, and trusted only inside the agent's
container.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from effect_broker.config.settings import Settings
from effect_broker.proxy.tls_ca import (
    CertificateAuthority,
    CertificateAuthorityError,
    fingerprint,
    trust_bundle,
)

ca_app = typer.Typer(help="The local CA for HTTPS interception.", no_args_is_help=True)
# emoji=False: a fingerprint such as ...:AB:... must not become an emoji.
console = Console(highlight=False, soft_wrap=True, emoji=False)
errors = Console(stderr=True, highlight=False, soft_wrap=True)

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
TRUST_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
)

Dir = Annotated[
    Path | None,
    typer.Option(
        "--dir", help="where ca.pem and ca.key live [default: ./.effect-broker]"
    ),
]


def ca_paths(directory: Path | None) -> tuple[Path, Path]:
    """``ca.pem`` and ``ca.key`` in ``directory``, else in the settings' data dir."""
    base = directory if directory is not None else Settings().data_dir
    return base / CA_CERT, base / CA_KEY


def ensure_ca(directory: Path) -> tuple[Path, Path, bool]:
    """The CA in ``directory``, created on first use; True when it was just made."""
    cert, key = ca_paths(directory)
    if cert.exists() and key.exists():
        CertificateAuthority.load(cert, key)  # refuse a broken pair now, not later
        return cert, key, False
    CertificateAuthority.create().save(cert, key)
    return cert, key, True


def trust_lines(ca_cert: Path, bundle: Path) -> list[str]:
    """The environment an agent's container needs to trust the CA."""
    lines = [f"export {name}={bundle}" for name in TRUST_VARIABLES]
    lines.append(f"export NODE_EXTRA_CA_CERTS={ca_cert}")
    return lines


@ca_app.command("init")
def init(
    directory: Dir = None,
    force: Annotated[
        bool, typer.Option("--force", help="replace an existing CA (rotation)")
    ] = False,
) -> None:
    """Create an ECDSA P-256 CA valid for 10 years (key file mode 0600)."""
    cert, key = ca_paths(directory)
    try:
        ca = CertificateAuthority.create()
        ca.save(cert, key, force=force)
    except CertificateAuthorityError as exc:
        errors.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    console.print(f"CA created: {cert} (key {key}, mode 0600)")
    console.print(f"fingerprint SHA-256 {fingerprint(ca.certificate)}")
    console.print(
        "Serve with it: effect-broker serve --ca-cert "
        f"{cert} --ca-key {key}; clients trust it with `effect-broker ca bundle`."
    )


@ca_app.command("show")
def show(directory: Dir = None) -> None:
    """Subject, fingerprint and validity of the CA."""
    cert, key = ca_paths(directory)
    try:
        ca = CertificateAuthority.load(cert, key)
    except CertificateAuthorityError as exc:
        errors.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    certificate = ca.certificate
    rows = [
        ("certificate", str(cert)),
        ("key", str(key)),
        ("subject", certificate.subject.rfc4514_string()),
        ("fingerprint (SHA-256)", fingerprint(certificate)),
        ("valid from", certificate.not_valid_before_utc.isoformat()),
        ("valid until", certificate.not_valid_after_utc.isoformat()),
    ]
    # Aligned lines rather than a box table: a fingerprint must never be wrapped.
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        console.print(f"[bold]{label.ljust(width)}[/]  {value}")


@ca_app.command("bundle")
def bundle(
    path: Annotated[Path, typer.Argument(help="where to write the PEM bundle")],
    directory: Dir = None,
) -> None:
    """Write the system trust store plus this CA as one PEM bundle, for SSL_CERT_FILE."""
    cert, key = ca_paths(directory)
    try:
        ca = CertificateAuthority.load(cert, key)
        contents = trust_bundle(ca.pem())
    except CertificateAuthorityError as exc:
        errors.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    path.write_bytes(contents)
    console.print(f"wrote {path}: the system trust store and the CA {cert}")
    for line in trust_lines(cert.resolve(), path.resolve()):
        console.print(f"  {line}")
