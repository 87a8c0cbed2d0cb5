"""Why the brokers refused this client while it connected: a failed TLS handshake or SASL
authentication, said at once with what to change.

librdkafka retries such a connection like one nobody answers, and a request then fails with
``_TRANSPORT`` once its timeout runs out; but it reports each failed handshake through
``error_cb`` as it happens (``_SSL``, ``_AUTHENTICATION``, or ``_TRANSPORT`` with OpenSSL's
words). ``HandshakeRefusals`` is that callback for a client's first contact. A failed
certificate verification says only "certificate verify failed"; the same check made with
Python's ssl module names the reason (expired, another host, an unknown issuer).
"""
from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Mapping

from confluent_kafka import KafkaError

from ..errors import KafkaClientError

# How OpenSSL's messages, which librdkafka passes on, name a TLS failure.
_TLS_WORDS = ("SSL handshake", "SSL routines", "certificate")
_PROBE_TIMEOUT_S = 5.0


class HandshakeRefusals:
    """A client's ``error_cb``: keeps each bootstrap server's first refusal at connection time. A
    first contact fails on them only once every bootstrap server has refused (another may still
    answer), and a connection dropped during the handshake ("Disconnected", also what a broker
    that restarts or closes connections causes) counts only when it happens twice."""

    def __init__(self, servers: str):
        self.servers = {server.strip() for server in servers.split(",") if server.strip()}
        self.refused: dict[str, KafkaError] = {}
        self._dropped: set[str] = set()

    def __call__(self, error: KafkaError) -> None:
        if not refused_at_handshake(error):
            return
        server = _server_of(error.str())
        if "Disconnected" in error.str() and server not in self._dropped:
            self._dropped.add(server)
            return
        self.refused.setdefault(server, error)

    def final(self) -> KafkaError | None:
        """A refusal to fail on: every bootstrap server has refused (None: not yet)."""
        # By count: librdkafka may name a server otherwise than bootstrap.servers does.
        if self.refused and len(self.refused) >= len(self.servers):
            return next(iter(self.refused.values()))
        return None


def refused_at_handshake(error: KafkaError) -> bool:
    if error.code() in (KafkaError._SSL, KafkaError._AUTHENTICATION):
        return True
    return error.code() == KafkaError._TRANSPORT and any(word in error.str() for word in _TLS_WORDS)


def _server_of(said: str) -> str:
    """The host:port librdkafka names at the start of a connection's error ("ssl://h:p/bootstrap: ...")."""
    address = said.split("://", 1)[-1].split("/", 1)[0]
    return address.strip()


def refusal_error(error: KafkaError, servers: str, params: Mapping[str, str]) -> KafkaClientError:
    """What the refusal means, and what to change, as an error to raise."""
    said = error.str()
    if error.code() == KafkaError._AUTHENTICATION:
        return KafkaClientError(
            f"the brokers at {servers} refused this client's SASL authentication ({said}): check "
            "kafka.sasl.mechanism and the credentials (kafka.sasl.username and kafka.sasl.password, or the token "
            "settings) against what the cluster knows for the principal")
    if "connecting to a PLAINTEXT broker listener" in said:
        return KafkaClientError(
            f"the listener at {servers} does not speak TLS ({said}): use the cluster's TLS port, or "
            "kafka.security.protocol PLAINTEXT or SASL_PLAINTEXT if the listener is meant to be unencrypted")
    if "certificate verify failed" in said:
        return KafkaClientError(_verification_failure(servers, params, said))
    if "alert bad certificate" in said or "certificate required" in said:
        return KafkaClientError(
            f"the brokers at {servers} require a client certificate (mutual TLS) and refused this client "
            f"({said}): set kafka.ssl.certificate.location and kafka.ssl.key.location to a certificate "
            "signed by a CA that the brokers trust (their ssl.truststore)")
    return KafkaClientError(
        f"the TLS handshake with the brokers at {servers} failed ({said}): check kafka.security.protocol and "
        "the kafka.ssl.* settings against the listener's")


def _verification_failure(servers: str, params: Mapping[str, str], said: str) -> str:
    trusted = params.get("ssl.ca.location") or ("ssl.ca.pem" in params and "kafka.ssl.ca.pem") or "the system's CAs"
    reason = _verify_message(_server_of(said) if "://" in said else servers.split(",")[0].strip(), params)
    if reason is None:
        reason, fix = said, (f"give kafka.ssl.ca.location the CA that signed the brokers' certificates (checked "
                             f"against {trusted}), and check that they have not expired and name the host the "
                             "client connects to")
    elif "expired" in reason:
        fix = "the brokers need a renewed certificate (or this host's clock is wrong)"
    elif "mismatch" in reason or "hostname" in reason.lower():
        fix = ("connect with a host name the certificate names (kafka.bootstrap.servers and the brokers' advertised "
               "listeners), or have the certificate name this one")
    else:
        fix = f"give kafka.ssl.ca.location the CA that signed the brokers' certificates (checked against {trusted})"
    return f"this client could not verify the certificate of the broker at {servers}: {reason.rstrip('.')}; {fix}"


def _verify_message(server: str, params: Mapping[str, str]) -> str | None:
    """OpenSSL's reason for refusing the broker's certificate, by a handshake made here with the
    client's trust settings; None when this handshake cannot tell."""
    host, _, port = server.rpartition(":")
    try:
        context = _client_context(params)
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT_S) as sock:
            with context.wrap_socket(sock, server_hostname=host.strip("[]")):
                return None
    except ssl.SSLCertVerificationError as error:
        return error.verify_message
    except (OSError, ValueError):
        return None


def _client_context(params: Mapping[str, str]) -> ssl.SSLContext:
    location = params.get("ssl.ca.location")
    if location and location != "probe" and Path(location).is_dir():
        context = ssl.create_default_context(capath=location)
    elif location and location != "probe":
        context = ssl.create_default_context(cafile=location)
    else:
        context = ssl.create_default_context(cadata=params.get("ssl.ca.pem"))
    # As librdkafka: no X.509 strict mode (Python 3.13 turns it on; private CAs often fail it first).
    context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    # librdkafka checks the host name unless ssl.endpoint.identification.algorithm=none.
    context.check_hostname = params.get("ssl.endpoint.identification.algorithm", "https").lower() != "none"
    return context
