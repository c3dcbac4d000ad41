"""The local CA: files, leaves, the ``ca`` commands, and what ``up`` prints."""

from __future__ import annotations

import datetime
import ipaddress
import re
import stat
from pathlib import Path

import pytest
from cryptography import x509
from typer.testing import CliRunner

from effect_broker.cli import _register, app
from effect_broker.cli import ca as cli_ca
from effect_broker.cli.doctor import tls_findings
from effect_broker.cli.up import _with_ca
from effect_broker.config.settings import Settings
from effect_broker.proxy import leaves as leaf_module
from effect_broker.proxy.intercept import proxy_authorization
from effect_broker.proxy.leaves import LeafContexts
from effect_broker.proxy.tls_ca import (
    LEAF_VALIDITY,
    CertificateAuthority,
    CertificateAuthorityError,
    fingerprint,
    host_name,
    new_key,
)

runner = CliRunner()


def test_saved_ca_loads_back_and_its_key_is_private(tmp_path: Path) -> None:
    ca = CertificateAuthority.create()
    ca.save(tmp_path / "ca.pem", tmp_path / "ca.key")
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600
    loaded = CertificateAuthority.load(tmp_path / "ca.pem", tmp_path / "ca.key")
    assert fingerprint(loaded.certificate) == fingerprint(ca.certificate)
    lifetime = ca.certificate.not_valid_after_utc - ca.certificate.not_valid_before_utc
    assert datetime.timedelta(days=3650) <= lifetime < datetime.timedelta(days=3652)
    constraints = ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca


def test_an_existing_ca_is_replaced_only_with_force(tmp_path: Path) -> None:
    cert, key = tmp_path / "ca.pem", tmp_path / "ca.key"
    CertificateAuthority.create().save(cert, key)
    before = cert.read_bytes()
    with pytest.raises(CertificateAuthorityError, match="--force"):
        CertificateAuthority.create().save(cert, key)
    assert cert.read_bytes() == before
    CertificateAuthority.create().save(cert, key, force=True)
    assert cert.read_bytes() != before
    CertificateAuthority.load(cert, key)  # the new pair matches


def test_load_refuses_a_key_of_another_ca_and_missing_files(tmp_path: Path) -> None:
    CertificateAuthority.create().save(tmp_path / "a.pem", tmp_path / "a.key")
    CertificateAuthority.create().save(tmp_path / "b.pem", tmp_path / "b.key")
    with pytest.raises(CertificateAuthorityError, match="not the private key"):
        CertificateAuthority.load(tmp_path / "a.pem", tmp_path / "b.key")
    with pytest.raises(CertificateAuthorityError, match="ca init"):
        CertificateAuthority.load(tmp_path / "none.pem", tmp_path / "a.key")


def test_a_leaf_certificate_is_short_lived_and_names_only_its_host() -> None:
    ca = CertificateAuthority.create()
    key = new_key()
    leaf = ca.issue("api.stripe.com", key)
    leaf.verify_directly_issued_by(ca.certificate)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["api.stripe.com"]
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc <= LEAF_VALIDITY + (
        datetime.timedelta(hours=1)
    )
    by_address = ca.issue(ipaddress.ip_address("127.0.0.9"), key)
    san = by_address.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.value.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.9")
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("API.Test.", "api.test"),
        ("[::1]", ipaddress.ip_address("::1")),
        ("10.0.0.1", ipaddress.ip_address("10.0.0.1")),
        ("bad host", None),
        ("-x.test", None),
        ("", None),
        ("a" * 64 + ".test", None),
        ("*.api.test", None),  # never a wildcard: a leaf names one host
        ("*", None),
        ("a.*.test", None),
    ],
)
def test_host_name(text: str, expected: object) -> None:
    assert host_name(text) == expected


def test_the_ca_never_signs_a_wildcard() -> None:
    ca = CertificateAuthority.create()
    with pytest.raises(ValueError, match="wildcard"):
        ca.issue("*.api.test", new_key())
    with pytest.raises(ValueError, match="wildcard"):
        LeafContexts(ca).for_host("*.api.test")


def test_leaf_contexts_are_cached_per_host() -> None:
    leaves = LeafContexts(CertificateAuthority.create())
    first = leaves.for_host("api.test")
    assert leaves.for_host("api.test") is first
    assert leaves.for_host("other.test") is not first


def test_leaf_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leaf_module, "MAX_CACHED_LEAVES", 2)
    leaves = LeafContexts(CertificateAuthority.create())
    first = leaves.for_host("a.test")
    leaves.for_host("b.test")
    leaves.for_host("c.test")
    assert leaves.for_host("c.test") is leaves.for_host("c.test")
    assert leaves.for_host("a.test") is not first  # evicted, minted again


def test_proxy_authorization_is_read_from_the_connect_head() -> None:
    head = (
        b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nproxy-authorization:  Basic eA==\r\n"
    )
    assert proxy_authorization(head) == "Basic eA=="
    assert proxy_authorization(b"CONNECT a:443 HTTP/1.1\r\nHost: a:443") is None


def test_ca_commands_init_show_and_bundle(tmp_path: Path) -> None:
    _register()
    created = runner.invoke(app, ["ca", "init", "--dir", str(tmp_path)])
    assert created.exit_code == 0, created.output
    ca = CertificateAuthority.load(tmp_path / "ca.pem", tmp_path / "ca.key")
    again = runner.invoke(app, ["ca", "init", "--dir", str(tmp_path)])
    assert again.exit_code == 1
    shown = runner.invoke(app, ["ca", "show", "--dir", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    plain = "".join(re.sub(r"\x1b\[[0-9;]*m", "", shown.output).split())
    assert fingerprint(ca.certificate) in plain, shown.output
    assert "effect-broker local CA" in shown.output
    bundle = tmp_path / "bundle.pem"
    made = runner.invoke(app, ["ca", "bundle", str(bundle), "--dir", str(tmp_path)])
    assert made.exit_code == 0, made.output
    text = bundle.read_bytes()
    assert text.endswith(ca.pem())
    assert text.count(b"BEGIN CERTIFICATE") > 1  # the system store came first
    assert "SSL_CERT_FILE=" in made.output


def test_up_makes_the_ca_once_and_says_how_to_trust_it(tmp_path: Path) -> None:
    settings, lines = _with_ca(Settings(), tmp_path)
    assert settings.ca_cert == tmp_path / "ca.pem"
    first = (tmp_path / "ca.pem").read_bytes()
    names = {line.split()[1].split("=")[0] for line in lines}
    assert names == {
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "CURL_CA_BUNDLE",
    }
    _with_ca(Settings(), tmp_path)
    assert (tmp_path / "ca.pem").read_bytes() == first


def test_doctor_reports_the_ca_and_the_upstream_trust_store(tmp_path: Path) -> None:
    CertificateAuthority.create().save(tmp_path / "ca.pem", tmp_path / "ca.key")
    good = Settings(ca_cert=tmp_path / "ca.pem", ca_key=tmp_path / "ca.key")
    findings = {f.check: f for f in tls_findings(good)}
    assert findings["CA"].ok and "valid until" in findings["CA"].detail
    assert findings["upstream TLS"].detail == "system trust store"
    half = Settings(ca_cert=tmp_path / "ca.pem")
    assert not tls_findings(half)[0].ok
    (tmp_path / "bad.pem").write_text("not a certificate")
    broken = Settings(upstream_ca_file=tmp_path / "bad.pem")
    findings = {f.check: f for f in tls_findings(broken)}
    assert findings["CA"].ok and "refused" in findings["CA"].detail
    assert not findings["upstream TLS"].ok


def test_ca_show_prints_a_fingerprint_verbatim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rich turns ``:ab:`` into an emoji unless told not to; hex is full of them."""
    _register()
    CertificateAuthority.create().save(tmp_path / "ca.pem", tmp_path / "ca.key")
    printed = "00:AB:CD:EF:" + ":".join(["AB"] * 28)
    monkeypatch.setattr(cli_ca, "fingerprint", lambda _: printed)
    shown = runner.invoke(app, ["ca", "show", "--dir", str(tmp_path)])
    assert printed in shown.output, shown.output
