"""A connector pipeline's Java client settings made librdkafka's (kafka/java_settings.py), without a
broker: the JAAS login modules, the stores made by keytool, and the names only Java has."""
from __future__ import annotations

import logging

import pytest

from pyspark_eos.errors import ConfigurationError
from pyspark_eos.kafka.java_settings import OAUTHBEARER_MODULE, PLAIN_MODULE, SCRAM_MODULE, translated
from pyspark_eos.sink.options import SinkOptions
from pyspark_eos.testing.certificates import make_java_stores, make_tls_files


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    directory = tmp_path_factory.mktemp("stores")
    tls = make_tls_files(directory)
    return tls, make_java_stores(tls, directory)


@pytest.mark.parametrize("module", [PLAIN_MODULE, SCRAM_MODULE])
def test_a_username_and_password_login_becomes_librdkafkas(module):
    jaas = f'{module} required username="alice" password="p@ss \\"word\\"";'
    assert translated({"sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}) == {
        "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": 'p@ss "word"'}


def test_an_unsecured_jwt_login_becomes_librdkafkas_oauthbearer_config():
    jaas = (f'{OAUTHBEARER_MODULE} required unsecuredLoginStringClaim_sub="alice" unsecuredLoginLifetimeSeconds="60" '
            'unsecuredLoginListClaim_scope=",read,write" unsecuredLoginExtension_traceId="t1";')
    assert translated({"sasl.jaas.config": jaas}) == {
        "sasl.oauthbearer.config": "principal=alice lifeSeconds=60 scope=read,write extension_traceId=t1",
        "enable.sasl.oauthbearer.unsecure.jwt": "true"}


def test_a_kerberos_login_names_its_keytab_and_principal():
    jaas = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
            'keyTab="/etc/kafka.keytab" principal="spark@EXAMPLE.COM";')
    assert translated({"sasl.jaas.config": jaas}) == {
        "sasl.kerberos.keytab": "/etc/kafka.keytab", "sasl.kerberos.principal": "spark@EXAMPLE.COM"}


@pytest.mark.parametrize("jaas, says", [
    ("org.example.CustomLoginModule required token=x;", "org.example.CustomLoginModule, which librdkafka cannot run"),
    (f"{PLAIN_MODULE} required username=alice;", "has no password"),
    (f"{OAUTHBEARER_MODULE} required clientId=a clientSecret=b;", "sasl.oauthbearer.method=oidc"),
    ("username=alice password=secret", "is not a JAAS login module entry"),
])
def test_a_login_librdkafka_cannot_take_is_refused_saying_what_to_use(jaas, says):
    with pytest.raises(ConfigurationError, match="kafka.sasl.jaas.config") as refused:
        translated({"sasl.jaas.config": jaas})
    assert says in str(refused.value)


OIDC_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
ENDPOINT = "https://idp.example.com/oauth2/token"


def test_an_oauth_login_with_kafkas_handler_becomes_librdkafkas_oidc_login():
    jaas = (f'{OAUTHBEARER_MODULE} required clientId="spark" clientSecret="s3cret" scope="kafka" '
            'extension_logicalCluster="lkc-1";')
    assert translated({"sasl.mechanism": "OAUTHBEARER", "sasl.login.callback.handler.class": OIDC_HANDLER,
                       "sasl.oauthbearer.token.endpoint.url": ENDPOINT, "sasl.jaas.config": jaas,
                       "sasl.login.read.timeout.ms": "10000"}) == {
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": ENDPOINT,
        "sasl.oauthbearer.client.id": "spark", "sasl.oauthbearer.client.secret": "s3cret",
        "sasl.oauthbearer.scope": "kafka", "sasl.oauthbearer.extensions": "logicalCluster=lkc-1"}
    # Kafka 4.1's names: the credentials as settings, the JAAS entry bare.
    assert translated({"sasl.login.callback.handler.class": OIDC_HANDLER,
                       "sasl.oauthbearer.jwt.retriever.class":
                           "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever",
                       "sasl.oauthbearer.client.credentials.client.id": "spark",
                       "sasl.oauthbearer.client.credentials.client.secret": "s3cret", "sasl.oauthbearer.scope": "kafka",
                       "sasl.oauthbearer.token.endpoint.url": ENDPOINT,
                       "sasl.jaas.config": f"{OAUTHBEARER_MODULE} required ;"}) == {
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": ENDPOINT,
        "sasl.oauthbearer.client.id": "spark", "sasl.oauthbearer.client.secret": "s3cret",
        "sasl.oauthbearer.scope": "kafka"}


@pytest.mark.parametrize("settings, says", [
    ({"sasl.jaas.config": f'{OAUTHBEARER_MODULE} required clientId="spark";'},
     "has no clientSecret (kafka.sasl.jaas.config), kafka.sasl.oauthbearer.token.endpoint.url"),
    ({"sasl.oauthbearer.jwt.retriever.class": "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever"},
     "runs the client_credentials login only"),
])
def test_an_oauth_login_eos_kafka_cannot_run_is_refused_naming_what_is_missing(settings, says):
    with pytest.raises(ConfigurationError) as refused:
        translated({"sasl.login.callback.handler.class": OIDC_HANDLER, **settings})
    assert says in str(refused.value)


@pytest.mark.parametrize("handler, says", [
    ("software.amazon.msk.auth.iam.IAMClientCallbackHandler", "aws-msk-iam-sasl-signer-python"),
    ("org.example.TokenHandler", "kafka.oauth_cb"),
])
def test_another_login_handler_is_refused_saying_what_to_use(handler, says):
    with pytest.raises(ConfigurationError, match="kafka.sasl.login.callback.handler.class") as refused:
        translated({"sasl.login.callback.handler.class": handler})
    assert says in str(refused.value)
    if "msk" in handler:
        with pytest.raises(ConfigurationError, match="aws-msk-iam-sasl-signer-python"):
            translated({"sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;"})


def test_a_login_and_a_librdkafka_setting_that_disagree_are_refused():
    with pytest.raises(ConfigurationError, match="kafka.sasl.jaas.config and option kafka.sasl.username disagree"):
        translated({"sasl.username": "bob", "sasl.jaas.config": f'{PLAIN_MODULE} required username="alice" '
                                                                 'password="x";'})


def test_java_only_tuning_is_dropped_with_one_log_line_and_renamed_settings_are_translated(caplog):
    with caplog.at_level(logging.INFO, logger="pyspark_eos.kafka.java_settings"):
        for _ in range(3):
            assert translated({"max.poll.records": "500", "default.api.timeout.ms": "60000", "fetch.max.wait.ms": "100",
                               "ssl.endpoint.identification.algorithm": ""}) == {
                "fetch.wait.max.ms": "100", "ssl.endpoint.identification.algorithm": "none"}
    said = [r.getMessage() for r in caplog.records if "only tune the Java Kafka client" in r.getMessage()]
    assert said == ["kafka.* option(s) default.api.timeout.ms, max.poll.records only tune the Java Kafka client and "
                    "do nothing here (librdkafka)"]


@pytest.mark.parametrize("name", ["key.deserializer", "value.serializer", "interceptor.classes"])
def test_what_spark_s_connector_refuses_is_refused_naming_the_option(name):
    with pytest.raises(ConfigurationError, match=f"option kafka.{name} is not supported"):
        translated({name: "org.example.Thing"})


@pytest.mark.parametrize("kind", ["jks", "pkcs12"])
def test_a_truststore_becomes_the_pem_of_its_certificates(stores, kind):
    tls, java = stores
    store = java.truststore_jks if kind == "jks" else java.truststore_pkcs12
    settings = translated({"ssl.truststore.location": str(store), "ssl.truststore.password": java.password,
                           "ssl.truststore.type": kind.upper()})
    assert settings == {"ssl.ca.pem": tls.ca.read_text()}


def test_a_jks_keystore_becomes_its_key_and_certificate_and_a_pkcs12_one_is_left_to_librdkafka(stores):
    tls, java = stores
    settings = translated({"ssl.keystore.location": str(java.keystore_jks), "ssl.keystore.password": java.password,
                           "ssl.key.password": java.password})
    assert set(settings) == {"ssl.key.pem", "ssl.certificate.pem"}
    assert settings["ssl.certificate.pem"] == tls.client.certificate.read_text() + tls.ca.read_text()
    assert "PRIVATE KEY" in settings["ssl.key.pem"]
    native = {"ssl.keystore.location": str(java.keystore_pkcs12), "ssl.keystore.password": java.password}
    assert translated({**native, "ssl.keystore.type": "PKCS12", "ssl.key.password": java.password}) == native


@pytest.mark.parametrize("kind", ["jks", "pkcs12"])
def test_a_store_with_a_wrong_password_is_refused_naming_the_option(stores, kind):
    _, java = stores
    store = java.truststore_jks if kind == "jks" else java.truststore_pkcs12
    with pytest.raises(ConfigurationError, match="option kafka.ssl.truststore.location: .*check its password option"):
        translated({"ssl.truststore.location": str(store), "ssl.truststore.password": "wrong-password"})


def test_a_missing_store_is_refused_naming_the_path_and_where_it_must_be():
    with pytest.raises(ConfigurationError, match="cannot read /nowhere/trust.jks on this host"):
        translated({"ssl.truststore.location": "/nowhere/trust.jks", "ssl.truststore.password": "x"})


@pytest.mark.parametrize("value", ["all", "-1", "ALL"])
def test_the_sink_takes_the_acks_it_sets_itself(value):
    options = SinkOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t", "kafka.acks": value})
    assert "acks" not in options.kafka


def test_the_sink_refuses_acks_that_would_break_its_transactions():
    with pytest.raises(ConfigurationError, match="option kafka.acks is not supported by the eos-kafka sink"):
        SinkOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t", "kafka.acks": "1"})
