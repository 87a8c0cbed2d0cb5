"""The embedded cluster's secured listeners, beside PLAINTEXT (which the brokers and controllers
keep among themselves): what managed clusters offer, and two that must be refused.

- ``TLS``: server-authenticated TLS (Amazon MSK's TLS port).
- ``MTLS``: TLS with ``ssl.client.auth=required`` (Aiven, Strimzi).
- ``SASL_SSL``: SASL over TLS: PLAIN (Confluent Cloud), users in ``SASL_USERS``; SCRAM-SHA-256 and
  SCRAM-SHA-512 (Amazon MSK, Aiven), the same users once ``scram_credentials`` has added them; and
  OAUTHBEARER with Kafka's unsecured JWT validator (a token's ``sub`` is its principal; no signature).
- ``OIDC``: SASL over TLS, OAUTHBEARER only, a token signed by the test kit's identity provider
  (identity_provider), which Kafka's validator checks against the provider's keys.
- ``EXPIRED``, ``WRONG_HOST``: TLS whose certificate expired, or names another host.
"""
from __future__ import annotations

from typing import Mapping

from .certificates import TlsFiles
from .identity_provider import ALLOWED_URLS_PROPERTY, VALIDATOR

SECURE_LISTENERS = ("TLS", "MTLS", "SASL_SSL", "EXPIRED", "WRONG_HOST", "OIDC")
SASL_USERS = {"eos": "eos-secret"}
_PROTOCOLS = {"TLS": "SSL", "MTLS": "SSL", "SASL_SSL": "SASL_SSL", "EXPIRED": "SSL", "WRONG_HOST": "SSL",
              "OIDC": "SASL_SSL"}


def secure_settings(broker_port: int, controller_port: int, ports: Mapping[str, int], tls: TlsFiles) -> str:
    """server.properties lines that add the secured listeners to a node (appended: they win)."""
    secured = [f"{name}://127.0.0.1:{ports[name]}" for name in SECURE_LISTENERS]
    plaintext = f"PLAINTEXT://127.0.0.1:{broker_port}"
    users = " ".join(f'user_{user}="{password}"' for user, password in SASL_USERS.items())
    settings = {
        "listeners": ",".join([plaintext, f"CONTROLLER://127.0.0.1:{controller_port}", *secured]),
        "advertised.listeners": ",".join([plaintext, *secured]),
        "listener.security.protocol.map": ",".join(
            ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT", *(f"{n}:{p}" for n, p in _PROTOCOLS.items())]),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": tls.broker.keystore,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": tls.ca,
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.expired.ssl.keystore.location": tls.expired.keystore,
        "listener.name.wrong_host.ssl.keystore.location": tls.wrong_host.keystore,
        "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        # SCRAM's users are the cluster's own records: scram_credentials adds them.
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.oidc.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.oidc.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.oidc.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "listener.name.oidc.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": tls.provider.jwks_url,
    }
    return "# secured listeners (secure_listeners.py)\n" + "".join(f"{k}={v}\n" for k, v in settings.items())


def broker_jvm_options(tls: TlsFiles) -> list[str]:
    """A secured node's JVM options: Kafka 4.0 and later read only the OAuth URLs a system property
    allows, the OIDC listener's key set among them."""
    return [f"-D{ALLOWED_URLS_PROPERTY}={tls.provider.jwks_url}"]


def client_settings(tls: TlsFiles, listener: str) -> dict[str, str]:
    """librdkafka settings of a client that the listener accepts (without ``kafka.``)."""
    settings = {"security.protocol": _PROTOCOLS[listener], "ssl.ca.location": str(tls.ca)}
    if listener == "MTLS":
        settings.update({"ssl.certificate.location": str(tls.client.certificate),
                         "ssl.key.location": str(tls.client.key)})
    if listener == "SASL_SSL":
        user, password = next(iter(SASL_USERS.items()))
        settings.update({"sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password})
    return settings


def scram_credentials(admin, mechanism: str = "SCRAM-SHA-256") -> None:
    """Give SASL_USERS SCRAM credentials for ``mechanism`` (SCRAM-SHA-256 or SCRAM-SHA-512) through
    an admin client of the cluster (its plaintext listener): SCRAM users live in the cluster."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    kind = ScramMechanism.SCRAM_SHA_256 if mechanism == "SCRAM-SHA-256" else ScramMechanism.SCRAM_SHA_512
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(kind, 4096), password.encode())
               for user, password in SASL_USERS.items()]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result()
