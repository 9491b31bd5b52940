"""The CA writes certificates that verify against it, name the node, and never half-write a file."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmgw.core.clock import FakeClock
from llmgw.core.errors import PKIError
from llmgw.pki import CA_CERT, CA_KEY, NODE_ROLE, init_ca, issue, renew, validate_node_id
from llmgw.pki.ca import NODE_DAYS, has_node_role


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_issued_certificate_verifies_against_the_ca(tmp_path: Path) -> None:
    init_ca(tmp_path)
    cert_path, key_path = issue(tmp_path, "node01.rack2", ips=["127.0.0.1", "::1"])

    assert (cert_path.name, key_path.name) == ("node01.rack2.crt", "node01.rack2.key")
    ca = _cert(tmp_path / CA_CERT)
    leaf = _cert(cert_path)
    leaf.verify_directly_issued_by(ca)  # raises if the signature or issuer does not match
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


def test_a_certificate_from_another_ca_does_not_verify(tmp_path: Path) -> None:
    init_ca(tmp_path / "a")
    init_ca(tmp_path / "b")
    cert_path, _ = issue(tmp_path / "b", "node01")
    with pytest.raises(Exception):  # noqa: B017 - cryptography raises ValueError or InvalidSignature
        _cert(cert_path).verify_directly_issued_by(_cert(tmp_path / "a" / CA_CERT))


def test_cn_and_san_are_the_node_id_and_a_node_certificate_is_a_client_with_the_node_role(tmp_path: Path) -> None:
    init_ca(tmp_path, name="test CA")
    cert_path, _ = issue(tmp_path, "gpu-node-7", ips=["10.0.0.7"])
    leaf = _cert(cert_path)

    cns = [a.value for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert cns == ["gpu-node-7"]
    assert san.get_values_for_type(x509.DNSName) == ["gpu-node-7"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    # it also serves: the weights it holds, to the nodes of its cluster
    assert set(eku) == {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH, NODE_ROLE}
    assert leaf.issuer.rfc4514_string() == "CN=test CA"
    assert isinstance(leaf.public_key(), ec.EllipticCurvePublicKey)
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc <= datetime.timedelta(days=NODE_DAYS, minutes=5)


def test_a_server_certificate_is_only_a_server_and_never_a_node(tmp_path: Path) -> None:
    init_ca(tmp_path)
    cert_path, _ = issue(tmp_path, "controlplane", ips=["10.0.0.2"], server=True)
    leaf = _cert(cert_path)
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH}
    assert not has_node_role(leaf)


def test_renew_keeps_role_and_addresses_with_a_new_key_and_serial(tmp_path: Path) -> None:
    init_ca(tmp_path)
    for name, server in (("node01", False), ("controlplane", True)):
        cert_path, key_path = issue(tmp_path, name, ips=["10.0.0.9"], server=server)
        old, old_key = _cert(cert_path), key_path.read_bytes()
        renew(tmp_path, name)
        new = _cert(cert_path)
        assert new.serial_number != old.serial_number and key_path.read_bytes() != old_key
        assert has_node_role(new) is (not server)
        san = new.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.9"]


def test_validity_comes_from_the_injected_clock(tmp_path: Path) -> None:
    clock = FakeClock(start=1_900_000_000.0)
    init_ca(tmp_path, clock=clock)
    cert_path, _ = issue(tmp_path, "node01", days=10, clock=clock)
    leaf = _cert(cert_path)
    issued = datetime.datetime.fromtimestamp(1_900_000_000.0, tz=datetime.UTC)
    assert leaf.not_valid_after_utc == issued + datetime.timedelta(days=10)
    assert leaf.not_valid_before_utc < issued


def test_keys_are_private_and_no_temp_files_remain(tmp_path: Path) -> None:
    init_ca(tmp_path)
    cert_path, key_path = issue(tmp_path, "node01")
    assert stat.S_IMODE((tmp_path / CA_KEY).stat().st_mode) == 0o600
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cert_path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key", "node01.crt", "node01.key"]


def test_reinit_refuses_to_overwrite_the_ca(tmp_path: Path) -> None:
    init_ca(tmp_path)
    before = (tmp_path / CA_KEY).read_bytes(), (tmp_path / CA_CERT).read_bytes()
    with pytest.raises(PKIError, match="already exists"):
        init_ca(tmp_path)
    assert ((tmp_path / CA_KEY).read_bytes(), (tmp_path / CA_CERT).read_bytes()) == before


def test_init_refuses_when_only_half_a_ca_is_there(tmp_path: Path) -> None:
    (tmp_path / CA_KEY).write_bytes(b"left over")
    with pytest.raises(PKIError, match=r"ca\.key"):
        init_ca(tmp_path)
    assert (tmp_path / CA_KEY).read_bytes() == b"left over"
    with pytest.raises(PKIError, match="incomplete CA"):
        issue(tmp_path, "node01")


def test_issue_without_a_ca_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(PKIError) as err:
        issue(tmp_path, "node01")
    assert str(err.value) == f"no CA in {tmp_path}: run `llmgw ca init {tmp_path}` first"
    assert list(tmp_path.iterdir()) == []


def test_reissue_replaces_the_node_files(tmp_path: Path) -> None:
    init_ca(tmp_path)
    cert_path, key_path = issue(tmp_path, "node01")
    first = cert_path.read_bytes(), key_path.read_bytes()
    issue(tmp_path, "node01")
    assert (cert_path.read_bytes(), key_path.read_bytes()) != first
    _cert(cert_path).verify_directly_issued_by(_cert(tmp_path / CA_CERT))


@pytest.mark.parametrize(
    "node_id",
    ["", "-node", "node-", "no_de", "node/../ca", "a..b", ".node", "x" * 64, "ca", "CA", "10.0.0.1", "nöde"],
)
def test_bad_node_ids_are_rejected(tmp_path: Path, node_id: str) -> None:
    init_ca(tmp_path)
    with pytest.raises(PKIError):
        issue(tmp_path, node_id)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key"]


@pytest.mark.parametrize("node_id", ["n", "node01", "gpu-7.rack-2.dc1", "x" * 63, "A1"])
def test_good_node_ids_pass(node_id: str) -> None:
    assert validate_node_id(node_id) == node_id


def test_bad_ip_and_days_are_rejected(tmp_path: Path) -> None:
    init_ca(tmp_path)
    with pytest.raises(PKIError, match="not an IP address"):
        issue(tmp_path, "node01", ips=["not-an-ip"])
    with pytest.raises(PKIError, match="days"):
        issue(tmp_path, "node01", days=0)


def test_a_corrupt_ca_is_reported_not_raised_raw(tmp_path: Path) -> None:
    init_ca(tmp_path)
    (tmp_path / CA_KEY).write_bytes(b"garbage")
    with pytest.raises(PKIError, match="unreadable"):
        issue(tmp_path, "node01")


def test_a_failed_write_leaves_the_old_files_and_no_temp_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    init_ca(tmp_path)
    cert_path, key_path = issue(tmp_path, "node01")
    before = cert_path.read_bytes(), key_path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("llmgw.pki.ca.os.fsync", disk_full)
    with pytest.raises(PKIError, match="No space left on device"):
        issue(tmp_path, "node01")
    assert (cert_path.read_bytes(), key_path.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key", "node01.crt", "node01.key"]


def test_a_failed_ca_init_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_link = os.link

    def link_key_only(src: str, dst: Path) -> None:
        if Path(dst).name == CA_CERT:
            raise OSError(5, "Input/output error")
        real_link(src, dst)

    monkeypatch.setattr("llmgw.pki.ca.os.link", link_key_only)
    with pytest.raises(PKIError, match="Input/output error"):
        init_ca(tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    init_ca(tmp_path)  # a retry is not blocked by half a CA
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key"]
