"""The CA: `init_ca` writes ca.crt/ca.key once; `issue` writes <node>.crt/<node>.key signed by it.

Keys are EC P-256: every TLS stack llmgw meets (Python's ssl, aiohttp, curl, Go) accepts them for server and
client authentication. Every file is written atomically (temp file in the same directory, fsync, rename), so an
interrupt leaves either the old file or the new one, never half of one. Keys are mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmgw.core.clock import Clock, SystemClock
from llmgw.core.errors import PKIError

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
CA_DAYS = 3650
NODE_DAYS = 90  # a stolen node certificate is worth little for long; `llmgw ca renew` makes a new one
SERVER_DAYS = 397
# The role marker of a node certificate: an extended key usage only `llmgw ca issue` puts in node certificates, so
# the agent listener can tell a node from any other certificate this CA signed (the control plane's own included).
# A UUID-derived OID (ITU-T X.667, arc 2.25) needs no registration.
NODE_ROLE = x509.ObjectIdentifier("2.25.179596326319776645762440131199523900080")
# Accept certificates from nodes whose clocks run a little behind the issuer's.
BACKDATE = datetime.timedelta(minutes=5)

_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_RESERVED = {"ca"}  # would collide with ca.crt / ca.key


def validate_node_id(node_id: str) -> str:
    """Return `node_id` if it is hostname-like (labels of letters, digits and '-', at most 63 each); else raise."""
    if not node_id:
        raise PKIError("node id is empty")
    if len(node_id) > 253:
        raise PKIError(f"node id {node_id!r} is longer than 253 characters")
    for label in node_id.split("."):
        if not _LABEL.match(label):
            raise PKIError(
                f"node id {node_id!r} is not hostname-like: each dot-separated label needs 1-63 letters, digits "
                "or '-', not starting or ending with '-'"
            )
    if node_id.lower() in _RESERVED:
        raise PKIError(f"node id {node_id!r} is reserved (its files would overwrite the CA's)")
    try:
        ipaddress.ip_address(node_id)
    except ValueError:
        return node_id
    raise PKIError(f"node id {node_id!r} is an IP address; use a host name (pass IPs as ips=...)")


def init_ca(dir: Path, name: str = "llmgw CA", *, clock: Clock | None = None) -> None:
    """Create a CA in `dir` (created if missing). Refuses if either CA file already exists."""
    clock = clock or SystemClock()
    cert_path, key_path = dir / CA_CERT, dir / CA_KEY
    existing = [p.name for p in (cert_path, key_path) if p.exists()]
    if existing:
        raise PKIError(f"a CA already exists in {dir} ({', '.join(existing)}): refusing to overwrite it")
    if not name.strip():
        raise PKIError("CA name is empty")
    try:
        dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise PKIError(f"cannot create CA directory {dir}: {e.strerror or e}") from e

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _utc(clock)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_atomic(key_path, _key_pem(key), mode=0o600, exclusive=True)
    try:
        _write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644, exclusive=True)
    except BaseException:
        # Leave no key without its certificate: a half CA would block the next `init`.
        key_path.unlink(missing_ok=True)
        raise


def issue(
    dir: Path,
    node_id: str,
    *,
    ips: Sequence[str] = (),
    days: int | None = None,
    server: bool = False,
    clock: Clock | None = None,
) -> tuple[Path, Path]:
    """Write `<node_id>.crt` and `<node_id>.key` in `dir`, signed by the CA there; return (cert, key) paths.

    CN = SAN DNS name = node id, plus an IP SAN per entry of `ips`. A node certificate (the default) is a TLS client
    certificate carrying the node role; `server=True` makes a control plane's TLS server certificate instead, which
    no agent listener accepts as a node. Re-issuing replaces the files (see `renew`).
    """
    clock = clock or SystemClock()
    validate_node_id(node_id)
    if days is None:
        days = SERVER_DAYS if server else NODE_DAYS
    if days < 1:
        raise PKIError(f"days must be at least 1, got {days}")
    addresses = _ip_names(ips)
    ca_cert, ca_key = _load_ca(dir)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _leaf(ca_cert, ca_key, key, node_id, addresses, _utc(clock), days, server)
    cert_path, key_path = dir / f"{node_id}.crt", dir / f"{node_id}.key"
    _write_atomic(key_path, _key_pem(key), mode=0o600, exclusive=False)
    _write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644, exclusive=False)
    return cert_path, key_path


def _ip_names(ips: Sequence[str]) -> list[x509.GeneralName]:
    addresses: list[x509.GeneralName] = []
    for ip in ips:
        try:
            addresses.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError as e:
            raise PKIError(f"{ip!r} is not an IP address") from e
    return addresses


def _leaf(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, key: ec.EllipticCurvePrivateKey,
          node_id: str, addresses: list[x509.GeneralName], now: datetime.datetime, days: int,
          server: bool) -> x509.Certificate:
    """The node's (or, with server, a control plane's) certificate for `key`, signed by the CA."""
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
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
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH] if server else [
                    # a node also serves: the weights it holds, to the other nodes of its cluster (mutual TLS)
                    ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH, NODE_ROLE]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node_id), *addresses]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def renew(dir: Path, name: str, *, days: int | None = None, clock: Clock | None = None) -> tuple[Path, Path]:
    """Re-issue `<name>.crt` with a new key and serial, keeping its role and IP addresses."""
    path = dir / f"{validate_node_id(name)}.crt"
    try:
        old = x509.load_pem_x509_certificate(path.read_bytes())
    except OSError as e:
        raise PKIError(f"cannot read {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise PKIError(f"{path} is not a PEM certificate: {e}") from e
    try:
        sans = old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        ips = []
    return issue(dir, name, ips=ips, days=days, server=not has_node_role(old), clock=clock)


def has_node_role(cert: x509.Certificate) -> bool:
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return NODE_ROLE in usages


def _load_ca(dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = dir / CA_CERT, dir / CA_KEY
    has_cert, has_key = cert_path.exists(), key_path.exists()
    if not has_cert and not has_key:
        raise PKIError(f"no CA in {dir}: run `llmgw ca init {dir}` first")
    if not (has_cert and has_key):
        present, missing = (CA_CERT, CA_KEY) if has_cert else (CA_KEY, CA_CERT)
        raise PKIError(f"incomplete CA in {dir}: {present} is there but {missing} is missing")
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except OSError as e:
        raise PKIError(f"cannot read the CA in {dir}: {e.strerror or e}") from e
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise PKIError(f"the CA in {dir} is unreadable (not an unencrypted PEM certificate and key): {e}") from e
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PKIError(f"{key_path} is not an EC key")
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(serialization.Encoding.DER, pub) != key.public_key().public_bytes(
        serialization.Encoding.DER, pub
    ):
        raise PKIError(f"{key_path} does not belong to {cert_path}")
    try:
        cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    except x509.ExtensionNotFound as e:
        raise PKIError(f"{cert_path} has no subject key identifier; was it made by `llmgw ca init`?") from e
    return cert, key


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _utc(clock: Clock) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(clock.now(), tz=datetime.UTC)


def _write_atomic(path: Path, data: bytes, *, mode: int, exclusive: bool) -> None:
    """Write via a temp file in the same directory: fsync, then rename (or link, when `exclusive`)."""
    try:
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise PKIError(f"cannot write in {path.parent}: {e.strerror or e}") from e
    tmp = Path(tmp_name)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            # link() fails if the target exists, so a concurrent writer cannot be overwritten.
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
        _fsync_dir(path.parent)
    except FileExistsError as e:
        raise PKIError(f"{path} already exists: refusing to overwrite it") from e
    except OSError as e:
        raise PKIError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(dir: Path) -> None:
    try:
        fd = os.open(dir, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename itself is still atomic
    finally:
        os.close(fd)
