"""The proxy's local certificate authority and the leaf certificates it signs (no I/O
beyond reading and writing the CA's own two files).

A CONNECT tunnel to a host that a route watches can only be recorded if the proxy reads
the requests inside it, which means terminating TLS with a certificate the client
trusts. The agent's container trusts this CA; the proxy mints a short-lived leaf per
host on demand. Everything is ECDSA P-256 and built with ``cryptography``: no openssl
subprocess, no files other than ``ca.pem`` and ``ca.key`` (mode 0600).

Certificates follow what strict verifiers (OpenSSL's X509_STRICT, which Python 3.13
enables by default, and Node) require: the CA has critical basicConstraints and
keyUsage and a subject key identifier; each leaf names its host only in subjectAltName
(a DNS name, or an IP address for an IP literal), carries serverAuth and an authority
key identifier. A leaf names exactly one host, never a wildcard: the interception
mints it only for the host a CONNECT named (and refuses any other SNI name).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = datetime.timedelta(days=3650)
LEAF_VALIDITY = datetime.timedelta(days=7)
BACKDATE = datetime.timedelta(hours=1)  # tolerate clients whose clocks run behind
CA_COMMON_NAME = "effect-broker local CA"
_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_DNS_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")  # no wildcard, ever

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class CertificateAuthorityError(Exception):
    """The CA files are missing, unreadable or not a CA key pair; the message says how."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def host_name(text: str) -> str | IPAddress | None:
    """A host a leaf may name: an IP address, or a lower-cased DNS name; else None.
    Never a wildcard: one leaf must not vouch for every name under a domain."""
    candidate = text.strip().strip("[]").rstrip(".").lower()
    try:
        return ipaddress.ip_address(candidate)
    except ValueError:
        pass
    if len(candidate) > 253 or _DNS_NAME.fullmatch(candidate) is None:
        return None
    return candidate


def fingerprint(certificate: x509.Certificate) -> str:
    """SHA-256 of the DER certificate, as colon-separated hex (what browsers show)."""
    return certificate.fingerprint(hashes.SHA256()).hex(":").upper()


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A CA certificate and its private key, able to sign leaves for hosts."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(
        cls, common_name: str = CA_COMMON_NAME, validity: datetime.timedelta = CA_VALIDITY
    ) -> CertificateAuthority:
        key = new_key()
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "effect-broker"),
            ]
        )
        now = _now()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                critical=False,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(certificate, key)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        """Read ``ca.pem`` and ``ca.key``; refuse a pair that cannot sign leaves."""
        try:
            certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        except OSError as exc:
            raise CertificateAuthorityError(
                f"cannot read the CA ({exc.strerror}: {exc.filename}); create one with "
                "`effect-broker ca init`"
            ) from exc
        except ValueError as exc:
            raise CertificateAuthorityError(
                f"{cert_path} or {key_path} is not a PEM certificate and key: {exc}"
            ) from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CertificateAuthorityError(f"{key_path} is not an ECDSA private key")
        if key.public_key().public_numbers() != _ec_public(certificate).public_numbers():
            raise CertificateAuthorityError(
                f"{key_path} is not the private key of the certificate in {cert_path}"
            )
        try:
            constraints = certificate.extensions.get_extension_for_class(
                x509.BasicConstraints
            ).value
        except x509.ExtensionNotFound:
            constraints = None
        if constraints is None or not constraints.ca:
            raise CertificateAuthorityError(f"{cert_path} is not a CA certificate")
        return cls(certificate, key)

    def save(self, cert_path: Path, key_path: Path, *, force: bool = False) -> None:
        """Write both files; the key readable by its owner only. Without ``force`` an
        existing CA is never overwritten: clients may already trust it."""
        if not force:
            for path in (cert_path, key_path):
                if path.exists():
                    raise CertificateAuthorityError(
                        f"{path} exists; pass --force to replace the CA (every client "
                        "must then trust the new one)"
                    )
        cert_path.parent.mkdir(parents=True, exist_ok=True)
        key_path.parent.mkdir(parents=True, exist_ok=True)
        key_pem = self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        temporary = key_path.with_name(key_path.name + ".tmp")
        temporary.unlink(missing_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(key_pem)
        os.replace(temporary, key_path)
        cert_path.write_bytes(self.pem())

    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        host: str | IPAddress,
        key: ec.EllipticCurvePrivateKey,
        *,
        validity: datetime.timedelta = LEAF_VALIDITY,
    ) -> x509.Certificate:
        """A server certificate for ``host`` (as returned by ``host_name``): exactly
        that one name, never a wildcard (``ValueError``)."""
        if isinstance(host, str) and (host_name(host) != host or "*" in host):
            raise ValueError(
                f"{host!r}: the CA signs leaves for one exact host name, never a "
                "wildcard or a name it would have to normalise"
            )
        san: x509.GeneralName = (
            x509.DNSName(host) if isinstance(host, str) else x509.IPAddress(host)
        )
        now = _now()
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(host))]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(min(now + validity, self.certificate.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    _ec_public(self.certificate)
                ),
                critical=False,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )


def _ec_public(certificate: x509.Certificate) -> ec.EllipticCurvePublicKey:
    public = certificate.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey):
        raise CertificateAuthorityError("the CA certificate does not hold an ECDSA key")
    return public


def system_trust_bundle() -> bytes:
    """The PEM certificates this machine trusts: the OS bundle, else certifi's."""
    cafile = ssl.get_default_verify_paths().cafile
    if cafile is not None and Path(cafile).is_file():
        return Path(cafile).read_bytes()
    try:
        import certifi
    except ImportError as exc:
        raise CertificateAuthorityError(
            "found no system CA bundle and certifi is not installed"
        ) from exc
    return Path(certifi.where()).read_bytes()


def trust_bundle(ca_pem: bytes) -> bytes:
    """The system trust store plus the local CA: one file for ``SSL_CERT_FILE``."""
    return system_trust_bundle().rstrip(b"\n") + b"\n" + ca_pem
