"""A connector pipeline's Java client settings, unchanged, on the embedded broker's secured
listeners: the same options through Spark's connector (format "kafka") and eos-kafka give the same
rows. The Java client reads its JKS and PKCS#12 stores and JAAS login itself; eos-kafka translates
them for librdkafka (kafka/java_settings.py)."""
from __future__ import annotations

import pytest

from pyspark_eos.errors import KafkaClientError
from pyspark_eos.kafka.cluster import reachable_admin
from pyspark_eos.kafka.java_settings import OAUTHBEARER_MODULE, PLAIN_MODULE, SCRAM_MODULE
from pyspark_eos.testing.certificates import make_java_stores
from pyspark_eos.testing.identity_provider import ALLOWED_URLS_PROPERTY, CLIENT_ID, CLIENT_SECRET, SCOPE, TokenEndpoint
from pyspark_eos.testing.secure_listeners import SASL_USERS, scram_credentials

from .kafka_tools import create_topic, read_committed, unique_name, write_transactions
from .test_secure_clusters import secure  # noqa: F401  (the module's fixture)

USER, PASSWORD = next(iter(SASL_USERS.items()))
LOGINS = {
    "PLAIN": f'{PLAIN_MODULE} required username="{USER}" password="{PASSWORD}";',
    "SCRAM-SHA-256": f'{SCRAM_MODULE} required username="{USER}" password="{PASSWORD}";',
    "SCRAM-SHA-512": f'{SCRAM_MODULE} required username="{USER}" password="{PASSWORD}";',
    "OAUTHBEARER": f'{OAUTHBEARER_MODULE} required unsecuredLoginStringClaim_sub="{USER}";',
}


@pytest.fixture(scope="module")
def java_stores(secure, tmp_path_factory):  # noqa: F811
    return make_java_stores(secure.tls, tmp_path_factory.mktemp("java-stores"))


def connector_options(cluster, stores, listener: str, store_kind: str, mechanism: str = "PLAIN") -> dict[str, str]:
    """What a pipeline written for Spark's connector sets to reach ``listener`` (Java's names)."""
    truststore = stores.truststore_jks if store_kind == "JKS" else stores.truststore_pkcs12
    options = {"kafka.bootstrap.servers": cluster.listener(listener),
               "kafka.ssl.truststore.location": str(truststore), "kafka.ssl.truststore.password": stores.password,
               "kafka.ssl.truststore.type": store_kind}
    if listener == "SASL_SSL":
        options.update({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": mechanism,
                        "kafka.sasl.jaas.config": LOGINS[mechanism]})
    else:  # mutual TLS: the client's key and certificate in a keystore
        keystore = stores.keystore_jks if store_kind == "JKS" else stores.keystore_pkcs12
        options.update({"kafka.security.protocol": "SSL", "kafka.ssl.keystore.location": str(keystore),
                        "kafka.ssl.keystore.password": stores.password, "kafka.ssl.key.password": stores.password,
                        "kafka.ssl.keystore.type": store_kind})
    return options


def _rows(frame) -> list[tuple]:
    return sorted(tuple(row) for row in frame.select("key", "value", "topic", "partition", "offset").collect())


@pytest.mark.parametrize("listener, store_kind, mechanism", [
    ("SASL_SSL", "JKS", "PLAIN"), ("SASL_SSL", "PKCS12", "OAUTHBEARER"), ("SASL_SSL", "JKS", "SCRAM-SHA-256"),
    ("SASL_SSL", "PKCS12", "SCRAM-SHA-512"), ("MTLS", "JKS", None), ("MTLS", "PKCS12", None)])
def test_a_connector_pipelines_java_security_settings_read_and_write_the_same_rows(
        secure, java_stores, spark, listener, store_kind, mechanism):  # noqa: F811
    if mechanism and mechanism.startswith("SCRAM"):
        scram_credentials(secure.admin(), mechanism)
    topic = create_topic(secure.bootstrap_servers, unique_name("java-in"), partitions=2)
    write_transactions(secure.bootstrap_servers, topic, [(True, [(n % 2, f"v{n}".encode()) for n in range(20)])])
    options = connector_options(secure, java_stores, listener, store_kind, mechanism or "PLAIN")
    ours = spark.read.format("eos-kafka").options(**options, subscribe=topic).load()
    theirs = spark.read.format("kafka").options(**options, subscribe=topic).load()
    assert _rows(ours) == _rows(theirs) and len(_rows(ours)) == 20

    output = create_topic(secure.bootstrap_servers, unique_name("java-out"), partitions=2)
    ours.select("key", "value").write.format("eos-kafka").mode("append").options(**options, topic=output).save()
    assert sorted(r.value for r in read_committed(secure.bootstrap_servers, output, partitions=2)) == \
        sorted(f"v{n}".encode() for n in range(20))


OIDC_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


@pytest.fixture
def token_endpoint(secure, spark):  # noqa: F811
    """The test kit's identity provider's token endpoint, whose URL Spark's JVM may fetch (Kafka 4.0's
    Java client fetches only the URLs the system property names)."""
    endpoint = TokenEndpoint(secure.tls.provider, USER)
    system = spark.sparkContext._jvm.java.lang.System
    before = system.getProperty(ALLOWED_URLS_PROPERTY)
    system.setProperty(ALLOWED_URLS_PROPERTY, ",".join(filter(None, [before, endpoint.url])))
    yield endpoint
    if before is None:
        system.clearProperty(ALLOWED_URLS_PROPERTY)
    else:
        system.setProperty(ALLOWED_URLS_PROPERTY, before)
    endpoint.close()


def test_a_connector_pipelines_oauth_login_through_an_identity_provider_reads_and_writes_the_same_rows(
        secure, java_stores, spark, token_endpoint):  # noqa: F811
    # The Java client's OAuth login (KIP-768), as a pipeline written for Spark's connector sets it:
    # Kafka's login handler, the token endpoint, the client's credentials in the JAAS entry, on a
    # listener that checks the tokens' signatures against the provider's keys. eos-kafka runs it as
    # librdkafka's OIDC login: the endpoint is asked with the same credentials.
    topic = create_topic(secure.bootstrap_servers, unique_name("oidc-in"), partitions=2)
    write_transactions(secure.bootstrap_servers, topic, [(True, [(n % 2, f"v{n}".encode()) for n in range(10)])])
    truststore = java_stores.truststore_pkcs12
    options = {"kafka.bootstrap.servers": secure.listener("OIDC"), "kafka.security.protocol": "SASL_SSL",
               "kafka.ssl.truststore.location": str(truststore), "kafka.ssl.truststore.password": java_stores.password,
               "kafka.ssl.truststore.type": "PKCS12", "kafka.sasl.mechanism": "OAUTHBEARER",
               "kafka.sasl.login.callback.handler.class": OIDC_HANDLER,
               "kafka.sasl.oauthbearer.token.endpoint.url": token_endpoint.url,
               "kafka.sasl.jaas.config": f'{OAUTHBEARER_MODULE} required clientId="{CLIENT_ID}" '
                                         f'clientSecret="{CLIENT_SECRET}" scope="{SCOPE}";'}
    ours = spark.read.format("eos-kafka").options(**options, subscribe=topic).load()
    theirs = spark.read.format("kafka").options(**options, subscribe=topic).load()
    assert _rows(ours) == _rows(theirs) and len(_rows(ours)) == 10
    for fmt in ("eos-kafka", "kafka"):
        output = create_topic(secure.bootstrap_servers, unique_name(f"oidc-out-{fmt}"), partitions=2)
        ours.select("key", "value").write.format(fmt).mode("append").options(**options, topic=output).save()
        assert sorted(r.value for r in read_committed(secure.bootstrap_servers, output, partitions=2)) == \
            sorted(f"v{n}".encode() for n in range(10)), fmt
    assert token_endpoint.requests and all(form.get("scope") == [SCOPE] for _, form in token_endpoint.requests)
    # The listener checks the signature: an unsigned token for the same user (librdkafka's own) is refused.
    unsigned = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(secure.tls.ca), "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": f"principal={USER}",
                "log_level": "0"}
    with pytest.raises(KafkaClientError, match="invalid_token"):
        reachable_admin(unsigned, secure.listener("OIDC"), 10)
