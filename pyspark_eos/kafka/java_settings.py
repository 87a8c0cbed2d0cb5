"""The Java Kafka client's settings a pipeline written for Spark's connector carries, as librdkafka's.

A connector pipeline's ``kafka.*`` options are the Java client's; most have the same name and
meaning in librdkafka, which refuses the rest. Those with a librdkafka counterpart are translated
here, once, where the options are parsed (the driver, and the executors that parse a sink's
options again):

- ``sasl.jaas.config``: librdkafka has no JAAS. The login modules of Kafka's own mechanisms
  become librdkafka's settings: PLAIN and SCRAM (``sasl.username``, ``sasl.password``),
  OAUTHBEARER with the unsecured JWT options (``sasl.oauthbearer.config``), Kerberos
  (``sasl.kerberos.keytab``, ``sasl.kerberos.principal``).
- The OAuth login of an identity provider (Kafka's ``OAuthBearerLoginCallbackHandler``, the
  client_credentials grant: ``clientId``/``clientSecret``/``scope`` in the JAAS entry, or Kafka
  4.1's ``sasl.oauthbearer.client.credentials.*``) becomes librdkafka's
  ``sasl.oauthbearer.method=oidc`` with its ``sasl.oauthbearer.client.*`` settings; the token
  endpoint's and the scope's names are the same in both.
- Trust and key stores: librdkafka reads PEM and PKCS#12, never JKS. A truststore's certificates
  become ``ssl.ca.pem``; a PKCS#12 keystore is read by librdkafka itself
  (``ssl.keystore.location``), a JKS one becomes ``ssl.certificate.pem`` and ``ssl.key.pem``. A JKS
  store is read through the JDK's ``keytool`` (every host that runs Spark has a JDK), a PKCS#12 one
  with ``cryptography``. The PEM travels in the options, so the store is read where the options
  are parsed, as Spark's connector reads it where it makes its clients: at the same path on the
  driver and on each executor.
- A few names differ (``fetch.max.wait.ms``); an empty ``ssl.endpoint.identification.algorithm``
  (the Java client's way to turn host name checks off) is librdkafka's ``none``.
- Settings only the Java client has (``max.poll.records``, ``default.api.timeout.ms``, ...) do
  nothing here: dropped, with one log line. The (de)serializers and settings that would change
  what the source reads are refused, as Spark's connector refuses them.
"""
from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..errors import ConfigurationError, MissingDependencyError

log = logging.getLogger(__name__)

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KERBEROS_MODULE = "com.sun.security.auth.module.Krb5LoginModule"

RENAMED = {"fetch.max.wait.ms": "fetch.wait.max.ms"}

# The Java client's settings that librdkafka lacks and that change nothing a pipeline reads or
# writes: tuning of the Java client's own internals, its metrics and its JVM security providers.
JAVA_ONLY = frozenset({
    "max.poll.records", "default.api.timeout.ms", "max.block.ms", "buffer.memory", "metric.reporters",
    "metrics.num.samples", "metrics.recording.level", "metrics.sample.window.ms", "auto.include.jmx.reporter",
    "security.providers", "ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.engine.factory.class",
    "ssl.provider", "send.buffer.bytes", "receive.buffer.bytes", "connections.max.idle.ms",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds", "sasl.kerberos.service.name.ignored", "socket.connection.setup.timeout.ms",
    "socket.connection.setup.timeout.max.ms", "exclude.internal.topics", "enable.metrics.push",
    "partitioner.ignore.keys", "partitioner.adaptive.partitioning.enable", "partitioner.availability.timeout.ms",
    # The OAuth login's HTTP client and its checks of the token it got: librdkafka has its own.
    "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms",
    "sasl.login.retry.backoff.max.ms", "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.jwt.validator.class", "sasl.oauthbearer.header.urlencode",
})

# Refused as Spark's connector refuses them (KafkaSourceProvider), with what to use instead.
REFUSED = {
    "key.deserializer": "keys are always read as bytes; cast or decode the key column in the query",
    "value.deserializer": "values are always read as bytes; cast or decode the value column in the query",
    "key.serializer": "keys are always written as bytes; give the key column as string or binary",
    "value.serializer": "values are always written as bytes; give the value column as string or binary",
    "interceptor.classes": "Java interceptors cannot run in librdkafka's clients; remove it",
    "partitioner.class": "use the partition column to choose a record's partition, or kafka.partitioner "
                         "(librdkafka's partitioners: consistent_random, murmur2_random, ...)",
}

# The Java client's OAuth/OIDC login (KIP-768): this handler posts the client's credentials to the
# token endpoint (client_credentials), as librdkafka's sasl.oauthbearer.method=oidc does.
OIDC_HANDLERS = frozenset({"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                           "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler"})
CLIENT_CREDENTIALS_RETRIEVER = "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever"
_OTHER_LOGIN = ("set kafka.sasl.login.callback.handler.class to Kafka's OAuthBearerLoginCallbackHandler (an OAuth "
                "client_credentials login, which eos-kafka runs as librdkafka's sasl.oauthbearer.method=oidc), or "
                "give a token provider as kafka.oauth_cb")
# Amazon MSK's IAM login is a Java library; its Python counterpart makes the token for oauth_cb.
_MSK_IAM = ("Amazon MSK's IAM login (software.amazon.msk.auth.iam) is a Java library: with eos-kafka set "
            "kafka.sasl.mechanism=OAUTHBEARER and kafka.oauth_cb to the import path (module:function) of a function "
            "that returns a token of the aws-msk-iam-sasl-signer-python package and its expiry in seconds; "
            "docs/security.md shows one (OAuth tokens)")
# Kafka 4.1's names of the client credentials, beside the JAAS options clientId and clientSecret.
_CREDENTIALS = {"sasl.oauthbearer.client.credentials.client.id": "sasl.oauthbearer.client.id",
                "sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret"}

_TRUSTSTORE = ("ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type")
_KEYSTORE = ("ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.type", "ssl.key.password")
_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JAAS_OPTION = re.compile(r'([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')
_JAAS_HEAD = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b", re.IGNORECASE)


def translated(params: Mapping[str, str]) -> dict[str, str]:
    """``params`` (``kafka.*`` options without the prefix) with the Java client's settings made
    librdkafka's; raises ConfigurationError for what cannot be, naming the option and what to use."""
    out = dict(params)
    for name, reason in REFUSED.items():
        if name in out:
            raise ConfigurationError(f"option kafka.{name} is not supported by eos-kafka: {reason}")
    ignored = tuple(sorted(name for name in out if name in JAVA_ONLY))
    for name in ignored:
        del out[name]
    if ignored:
        _say_ignored(ignored)
    for java, native in RENAMED.items():
        if java in out:
            _fill(out, {native: out.pop(java)}, f"kafka.{java}")
    if out.get("ssl.endpoint.identification.algorithm", None) == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    oidc = _oauth_login(out)
    if "sasl.jaas.config" in out:
        _fill(out, jaas_settings(out.pop("sasl.jaas.config"), oidc), "kafka.sasl.jaas.config")
    if oidc:
        _check_oidc(out)
    _trust_store(out)
    _key_store(out)
    return out


@functools.lru_cache(maxsize=None)
def _say_ignored(names: tuple[str, ...]) -> None:
    # Once per process: a sink's options are parsed again in every micro-batch.
    log.info("kafka.* option(s) %s only tune the Java Kafka client and do nothing here (librdkafka)", ", ".join(names))


def _fill(params: dict, settings: Mapping[str, str], source: str) -> None:
    """Add ``settings`` translated from ``source``; a librdkafka setting given as well must agree."""
    for name, value in settings.items():
        if name in params and params[name] != value:
            raise ConfigurationError(f"option {source} and option kafka.{name} disagree ({name}); "
                                     f"give one of them")
        params[name] = value


# ------------------------------------------------------------------------------------------ JAAS

@dataclass(frozen=True)
class JaasEntry:
    module: str
    options: dict[str, str]


def parse_jaas(text: str) -> JaasEntry:
    """The one login module entry of a ``sasl.jaas.config``: ``<module> <flag> key=value ...;``."""
    head = _JAAS_HEAD.match(text)
    if head is None:
        raise ConfigurationError(
            "option kafka.sasl.jaas.config is not a JAAS login module entry (\"<LoginModule class> required "
            "key=\\\"value\\\" ...;\"); give it as the Java client takes it, or use librdkafka's sasl.username "
            "and sasl.password")
    body = text[head.end():].strip()
    if body.count(";") > 1 or (body and not body.endswith(";")):
        raise ConfigurationError("option kafka.sasl.jaas.config must hold one login module entry ending with ';'")
    options = {m.group(1): (m.group(2) if m.group(2) is not None else m.group(3)).replace('\\"', '"')
               for m in _JAAS_OPTION.finditer(body)}
    return JaasEntry(head.group(1), options)


def jaas_settings(text: str, oidc: bool = False) -> dict[str, str]:
    """librdkafka's settings for the login module a ``sasl.jaas.config`` names; ``oidc``: the Java
    client's OAuth login handler is set (sasl.login.callback.handler.class)."""
    entry = parse_jaas(text)
    if entry.module in (PLAIN_MODULE, SCRAM_MODULE):
        return {"sasl.username": _required(entry, "username"), "sasl.password": _required(entry, "password")}
    if entry.module == OAUTHBEARER_MODULE:
        return _client_credentials(entry) if oidc else _unsecured_jwt(entry)
    if entry.module == KERBEROS_MODULE:
        settings = {"sasl.kerberos.principal": _required(entry, "principal")}
        if entry.options.get("useKeyTab", "false").lower() == "true":
            settings["sasl.kerberos.keytab"] = _required(entry, "keyTab")
        return settings
    if "msk.auth.iam" in entry.module:
        raise ConfigurationError(f"option kafka.sasl.jaas.config names login module {entry.module}: {_MSK_IAM}")
    raise ConfigurationError(
        f"option kafka.sasl.jaas.config names login module {entry.module}, which librdkafka cannot run; eos-kafka "
        f"translates {PLAIN_MODULE}, {SCRAM_MODULE}, {OAUTHBEARER_MODULE} (unsecured JWT, or an OAuth login with "
        f"Kafka's OAuthBearerLoginCallbackHandler) and {KERBEROS_MODULE}: use one of them, or librdkafka's sasl.* "
        "settings")


def _required(entry: JaasEntry, name: str) -> str:
    if name not in entry.options:
        raise ConfigurationError(f"option kafka.sasl.jaas.config: login module {entry.module} has no {name}=\"...\"")
    return entry.options[name]


_UNSECURED = {"unsecuredLoginLifetimeSeconds": "lifeSeconds", "unsecuredLoginPrincipalClaimName": "principalClaimName",
              "unsecuredLoginScopeClaimName": "scopeClaimName"}


def _unsecured_jwt(entry: JaasEntry) -> dict[str, str]:
    """Kafka's unsecured JWT login options (OAuthBearerUnsecuredLoginCallbackHandler) as
    librdkafka's ``sasl.oauthbearer.config``."""
    options = entry.options
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    principal = options.get(f"unsecuredLoginStringClaim_{principal_claim}")
    if principal is None:
        raise ConfigurationError(
            f"option kafka.sasl.jaas.config: {OAUTHBEARER_MODULE} without unsecuredLoginStringClaim_"
            f"{principal_claim}=\"<principal>\" is not an unsecured JWT login; for an identity provider "
            + _OTHER_LOGIN)
    fields = [f"principal={principal}"]
    fields += [f"{native}={options[java]}" for java, native in _UNSECURED.items() if java in options]
    scope_claim = options.get("unsecuredLoginScopeClaimName", "scope")
    scope = options.get(f"unsecuredLoginListClaim_{scope_claim}")
    if scope:  # the Java list claim's first character is its separator
        fields.append("scope=" + ",".join(s for s in scope[1:].split(scope[0]) if s))
    fields += [f"extension_{k.removeprefix('unsecuredLoginExtension_')}={v}" for k, v in options.items()
               if k.startswith("unsecuredLoginExtension_")]
    return {"sasl.oauthbearer.config": " ".join(fields), "enable.sasl.oauthbearer.unsecure.jwt": "true"}


def _oauth_login(params: dict) -> bool:
    """Take the Java client's OAuth login settings out of ``params``, leaving librdkafka's OIDC
    ones; whether the login is OAuth's client_credentials (sasl.oauthbearer.method=oidc)."""
    handler = params.pop("sasl.login.callback.handler.class", None)
    retriever = params.pop("sasl.oauthbearer.jwt.retriever.class", None)
    if handler is None and retriever is None:
        return False
    if handler is not None and handler not in OIDC_HANDLERS:
        raise ConfigurationError(f"option kafka.sasl.login.callback.handler.class={handler} is a Java class "
                                 f"librdkafka cannot run: {_login_hint(handler)}")
    if retriever is not None and retriever != CLIENT_CREDENTIALS_RETRIEVER:
        raise ConfigurationError(f"option kafka.sasl.oauthbearer.jwt.retriever.class={retriever}: eos-kafka runs "
                                 f"the client_credentials login only ({CLIENT_CREDENTIALS_RETRIEVER}); "
                                 "or give a token provider as kafka.oauth_cb")
    for java, native in _CREDENTIALS.items():
        if java in params:
            _fill(params, {native: params.pop(java)}, f"kafka.{java}")
    _fill(params, {"sasl.oauthbearer.method": "oidc"}, "kafka.sasl.login.callback.handler.class")
    return True


def _login_hint(handler: str) -> str:
    return _MSK_IAM if "msk.auth.iam" in handler else _OTHER_LOGIN


def _client_credentials(entry: JaasEntry) -> dict[str, str]:
    """The JAAS options of Kafka's OAuth client_credentials login as librdkafka's OIDC settings."""
    options = entry.options
    settings = {native: options[java] for java, native in (("clientId", "sasl.oauthbearer.client.id"),
                                                           ("clientSecret", "sasl.oauthbearer.client.secret"),
                                                           ("scope", "sasl.oauthbearer.scope")) if java in options}
    extensions = [f"{k.removeprefix('extension_')}={v}" for k, v in options.items() if k.startswith("extension_")]
    if extensions:
        settings["sasl.oauthbearer.extensions"] = ",".join(extensions)
    return settings


def _check_oidc(params: dict) -> None:
    missing = [java for java, native in (("clientId (kafka.sasl.jaas.config)", "sasl.oauthbearer.client.id"),
                                         ("clientSecret (kafka.sasl.jaas.config)", "sasl.oauthbearer.client.secret"),
                                         ("kafka.sasl.oauthbearer.token.endpoint.url",
                                          "sasl.oauthbearer.token.endpoint.url")) if native not in params]
    if missing:
        raise ConfigurationError(f"the OAuth login (kafka.sasl.login.callback.handler.class) has no "
                                 f"{', '.join(missing)}: give each, as the Java client needs them too")


# ------------------------------------------------------------------------------------- key stores

def _trust_store(params: dict) -> None:
    if "ssl.truststore.location" not in params:
        _drop(params, _TRUSTSTORE)
        return
    location, password = params["ssl.truststore.location"], params.get("ssl.truststore.password")
    if params.get("ssl.truststore.type", "").upper() == "PEM":
        _fill(params, {"ssl.ca.location": location}, "kafka.ssl.truststore.location")
    else:
        _, _, certificates = read_store(location, password, "kafka.ssl.truststore.location")
        if not certificates:
            raise ConfigurationError(f"option kafka.ssl.truststore.location: {location} holds no certificate")
        _fill(params, {"ssl.ca.pem": "".join(certificates)}, "kafka.ssl.truststore.location")
    _drop(params, _TRUSTSTORE)


def _key_store(params: dict) -> None:
    location = params.get("ssl.keystore.location")
    if location is None:
        return
    kind = params.get("ssl.keystore.type", "").upper()
    if kind == "PEM":
        raise ConfigurationError("option kafka.ssl.keystore.type=PEM: give librdkafka's kafka.ssl.certificate.location "
                                 "and kafka.ssl.key.location instead")
    password = params.get("ssl.keystore.password")
    if not _is_jks(location, "kafka.ssl.keystore.location"):
        params.pop("ssl.keystore.type", None)  # librdkafka reads a PKCS#12 keystore itself
        params.pop("ssl.key.password", None)
        return
    key, certificate, chain = read_store(location, password, "kafka.ssl.keystore.location",
                                         params.get("ssl.key.password"))
    if key is None or certificate is None:
        raise ConfigurationError(f"option kafka.ssl.keystore.location: {location} holds no private key with its "
                                 "certificate")
    _fill(params, {"ssl.key.pem": key, "ssl.certificate.pem": certificate + "".join(chain)},
          "kafka.ssl.keystore.location")
    _drop(params, _KEYSTORE)


def _drop(params: dict, names: tuple[str, ...]) -> None:
    for name in names:
        params.pop(name, None)


def _is_jks(location: str, option: str) -> bool:
    try:
        with open(location, "rb") as store:
            return store.read(4) == _JKS_MAGIC
    except OSError as error:
        raise _unreadable(option, location, error) from None


def _unreadable(option: str, location: str, error: OSError) -> ConfigurationError:
    return ConfigurationError(f"option {option}: cannot read {location} on this host ({error.strerror}); the store "
                              "must be at that path on the driver and on every executor")


def read_store(location: str, password: str | None, option: str,
               key_password: str | None = None) -> tuple[str | None, str | None, tuple[str, ...]]:
    """A JKS or PKCS#12 store's private key, its certificate and its other certificates, as PEM."""
    try:
        changed = os.stat(location).st_mtime_ns
    except OSError as error:
        raise _unreadable(option, location, error) from None
    return _read_store(location, changed, password, option, key_password)


# Options are parsed again in every micro-batch (a sink's, in each worker): a store is read once
# per process and version of its file (a keytool run costs a JVM's start).
@functools.lru_cache(maxsize=16)
def _read_store(location: str, _changed: int, password: str | None, option: str,
                key_password: str | None) -> tuple[str | None, str | None, tuple[str, ...]]:
    try:
        from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12
    except ImportError:
        raise MissingDependencyError(f"option {option} names a key store, which eos-kafka reads with the "
                                     "cryptography package: pip install cryptography") from None
    data = _pkcs12_bytes(location, password, option, key_password) if _is_jks(location, option) \
        else Path(location).read_bytes()
    try:
        key, certificate, others = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as error:
        raise ConfigurationError(f"option {option}: {location} cannot be read as a PKCS#12 store with the password "
                                 f"given ({error}); check its password option") from None
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode() if key else None
    certificate_pem = certificate.public_bytes(Encoding.PEM).decode() if certificate else None
    return key_pem, certificate_pem, tuple(c.public_bytes(Encoding.PEM).decode() for c in others)


def _pkcs12_bytes(location: str, password: str | None, option: str, key_password: str | None) -> bytes:
    """A JKS store converted to PKCS#12 by the JDK's keytool (cryptography reads no JKS)."""
    keytool = _keytool()
    if not password:
        raise ConfigurationError(f"option {option}: {location} is a JKS store; give its password "
                                 f"({option.replace('location', 'password')})")
    with tempfile.TemporaryDirectory(prefix="eos-kafka-store-") as directory:
        converted = Path(directory) / "store.p12"
        command = [keytool, "-importkeystore", "-noprompt", "-srckeystore", location, "-srcstoretype", "JKS",
                   "-srcstorepass:env", "SOURCE_PASSWORD", "-destkeystore", str(converted), "-deststoretype", "PKCS12",
                   "-deststorepass:env", "SOURCE_PASSWORD"]
        env = {**os.environ, "SOURCE_PASSWORD": password}
        if key_password and key_password != password:
            command += ["-srckeypass:env", "KEY_PASSWORD", "-destkeypass:env", "SOURCE_PASSWORD"]
            env["KEY_PASSWORD"] = key_password
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        if result.returncode != 0:
            raise ConfigurationError(f"option {option}: keytool could not read the JKS store {location}: "
                                     f"{' '.join((result.stdout + result.stderr).split())}; check its password option")
        return converted.read_bytes()


def _keytool() -> str:
    java_home = os.environ.get("JAVA_HOME")
    found = (str(Path(java_home) / "bin" / "keytool") if java_home and (Path(java_home) / "bin" / "keytool").exists()
             else shutil.which("keytool"))
    if found is None:
        raise ConfigurationError("a JKS store is read through the JDK's keytool, found neither in $JAVA_HOME/bin nor on "
                                 "PATH on this host; set JAVA_HOME, or convert the store to PKCS12 (keytool "
                                 "-importkeystore -deststoretype PKCS12)")
    return found
