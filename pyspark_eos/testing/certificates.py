"""Certificates for the embedded cluster's TLS listeners, made on the spot: a CA, the broker's
certificate for 127.0.0.1, a client certificate for mutual TLS, and the broken ones a client must
refuse at once (a certificate from another CA, an expired one, one for another host); and the
OIDC listener's identity provider keys (identity_provider).

Everything is PEM, which both sides read: librdkafka (``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``) and the broker (``ssl.keystore.type=PEM``, a
file holding the key and then the certificate; ``ssl.truststore.type=PEM``). Keys are unencrypted
PKCS#8, the form a PEM keystore takes without ``ssl.key.password``.
"""
from __future__ import annotations

import datetime
import importlib.util
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from ..errors import EmbeddedKafkaError
from .identity_provider import ProviderKeys, make_provider_keys

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Identity:
    """A key and its certificate, apart (for a client) and in one file (a broker's PEM keystore)."""

    key: Path
    certificate: Path
    keystore: Path


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # the test CA's certificate: what clients and the broker trust
    broker: Identity  # 127.0.0.1 and localhost, signed by the CA
    client: Identity  # CN=eos-kafka-client, signed by the CA: mutual TLS
    other_ca: Path  # a CA that signed nothing here: trusting it alone fails verification
    expired: Identity  # 127.0.0.1, signed by the CA, expired yesterday
    wrong_host: Identity  # broker.example.com only, signed by the CA
    provider: ProviderKeys  # the OIDC listener's identity provider (identity_provider)


def make_tls_files(directory: str | Path) -> TlsFiles:
    """Write a CA and the certificates above into ``directory``."""
    if importlib.util.find_spec("cryptography") is None:  # only the secured listeners need it
        raise EmbeddedKafkaError("the embedded cluster's TLS listeners need the cryptography package: "
                                 "pip install cryptography")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, ca_cert = _self_signed("eos-kafka test CA", now)
    _, other_cert = _self_signed("another CA", now)
    localhost = [ipaddress.IPv4Address("127.0.0.1"), "localhost"]

    def issue(name: str, common_name: str, hosts: list, not_after: datetime.datetime) -> Identity:
        key, certificate = _issued(common_name, hosts, ca_key, ca_cert, now - 2 * _DAY, not_after)
        return _write_identity(directory, name, key, certificate)

    return TlsFiles(
        ca=_write(directory / "ca.pem", _pem(ca_cert)),
        broker=issue("broker", "127.0.0.1", localhost, now + 365 * _DAY),
        client=issue("client", "eos-kafka-client", [], now + 365 * _DAY),
        other_ca=_write(directory / "other-ca.pem", _pem(other_cert)),
        expired=issue("expired", "127.0.0.1", localhost, now - _DAY),
        wrong_host=issue("wrong-host", "broker.example.com", ["broker.example.com"], now + 365 * _DAY),
        provider=make_provider_keys(directory),
    )


def _self_signed(common_name: str, now: datetime.datetime):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (_builder(name, name, key.public_key(), now - 2 * _DAY, now + 3650 * _DAY)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True))
    return key, _sign(builder, key)


def _issued(common_name: str, hosts: list, ca_key, ca_cert, not_before, not_after):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    key = _new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = _builder(subject, ca_cert.subject, key.public_key(), not_before, not_after)
    if hosts:
        names = [x509.IPAddress(h) if isinstance(h, ipaddress.IPv4Address) else x509.DNSName(h) for h in hosts]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, _sign(builder, ca_key)


def _builder(subject, issuer, public_key, not_before, not_after):
    from cryptography import x509

    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after))


def _new_key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _sign(builder, key):
    from cryptography.hazmat.primitives import hashes

    return builder.sign(key, hashes.SHA256())


def _pem(certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write_identity(directory: Path, name: str, key, certificate) -> Identity:
    return Identity(key=_write(directory / f"{name}.key", _key_pem(key)),
                    certificate=_write(directory / f"{name}.pem", _pem(certificate)),
                    keystore=_write(directory / f"{name}-keystore.pem", _key_pem(key) + _pem(certificate)))


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class JavaStores:
    """The test CA and the mutual-TLS client identity in the Java client's stores, as a connector
    pipeline names them (``kafka.ssl.truststore.*``, ``kafka.ssl.keystore.*``), one password for all."""

    password: str
    truststore_jks: Path
    truststore_pkcs12: Path
    keystore_jks: Path
    keystore_pkcs12: Path


def make_java_stores(tls: TlsFiles, directory: str | Path, password: str = "store-secret") -> JavaStores:
    """JKS and PKCS#12 stores made by the JDK's ``keytool``, as Java users make them."""
    import shutil
    import subprocess

    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, load_pem_private_key, pkcs12
    from cryptography.x509 import load_pem_x509_certificate

    keytool = shutil.which("keytool")
    if keytool is None:
        raise EmbeddedKafkaError("making Java key stores needs the JDK's keytool on PATH")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    def run(*arguments: str) -> None:
        result = subprocess.run([keytool, *arguments], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise EmbeddedKafkaError(f"keytool {' '.join(arguments[:1])} failed: {result.stdout}{result.stderr}")

    stores = JavaStores(password, directory / "trust.jks", directory / "trust.p12", directory / "client.jks",
                        directory / "client.p12")
    for store, kind in ((stores.truststore_jks, "JKS"), (stores.truststore_pkcs12, "PKCS12")):
        run("-importcert", "-noprompt", "-alias", "ca", "-file", str(tls.ca), "-keystore", str(store),
            "-storetype", kind, "-storepass", password)
    key = load_pem_private_key(tls.client.key.read_bytes(), None)
    certificate = load_pem_x509_certificate(tls.client.certificate.read_bytes())
    stores.keystore_pkcs12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", key, certificate, [load_pem_x509_certificate(tls.ca.read_bytes())],
        BestAvailableEncryption(password.encode())))
    run("-importkeystore", "-noprompt", "-srckeystore", str(stores.keystore_pkcs12), "-srcstoretype", "PKCS12",
        "-srcstorepass", password, "-destkeystore", str(stores.keystore_jks), "-deststoretype", "JKS",
        "-deststorepass", password)
    return stores
