"""eos-kafka against the TLS, mutual-TLS and SASL_SSL listeners of the embedded broker
(secure_listeners.py, certificates made at start): the source, the sink, the exactly-once pipeline
with a worker killed before its commit, OAuth tokens from a provider named by import path
(kafka.oauth_cb), and the operator commands. A client the brokers refuse, or
that refuses them, fails at once, saying which check failed and what to change, not after
connectTimeoutMs."""
from __future__ import annotations

import json
import re
import time

import confluent_kafka
import pytest

from pyspark_eos.errors import KafkaClientError
from pyspark_eos.kafka.callbacks import OAUTH_CB_SINCE
from pyspark_eos.kafka.dependencies import release
from pyspark_eos.kafka.cluster import reachable_admin
from pyspark_eos.testing.fault_injection import WORKER_BEFORE_COMMIT, arm
from pyspark_eos.testing.local_spark import executor_local_dirs
from pyspark_eos.testing.secure_listeners import client_settings

from .kafka_tools import create_topic, read_committed, unique_name, wait_until, write_transactions
from .spark_tools import Pipeline, eos_pipeline
from .test_operator_status import run_cli

CONNECT_TIMEOUT_S = 20.0
AT_ONCE_S = 5.0


@pytest.fixture(scope="module")
def secure(kafka):
    if kafka.cluster is None or not kafka.cluster.secure:
        pytest.skip("an external broker has none of the embedded broker's test listeners")
    return kafka.cluster


def kafka_options(cluster, listener: str) -> dict[str, str]:
    """The connector's options that reach ``listener``."""
    return {"kafka.bootstrap.servers": cluster.listener(listener),
            **{f"kafka.{key}": value for key, value in client_settings(cluster.tls, listener).items()}}


def _refusal(cluster, listener: str, **changes) -> str:
    settings = {**client_settings(cluster.tls, "TLS" if listener in ("EXPIRED", "WRONG_HOST") else listener),
                **changes, "log_level": "0"}
    settings = {key: value for key, value in settings.items() if value is not None}
    began = time.monotonic()
    with pytest.raises(KafkaClientError) as raised:
        reachable_admin(settings, cluster.listener(listener), CONNECT_TIMEOUT_S)
    assert time.monotonic() - began < AT_ONCE_S, f"refused after {time.monotonic() - began:.1f} s: {raised.value}"
    return str(raised.value)


def test_a_broker_certificate_the_client_cannot_verify_fails_at_once_naming_the_reason(secure):
    assert "certificate has expired" in _refusal(secure, "EXPIRED")
    assert "IP address mismatch" in _refusal(secure, "WRONG_HOST")
    other_ca = _refusal(secure, "TLS", **{"ssl.ca.location": str(secure.tls.other_ca)})
    assert "unable to get local issuer certificate" in other_ca and str(secure.tls.other_ca) in other_ca


def test_a_client_the_brokers_refuse_fails_at_once_saying_what_to_set(secure):
    no_certificate = _refusal(secure, "MTLS", **{"ssl.certificate.location": None, "ssl.key.location": None})
    assert "require a client certificate" in no_certificate
    assert "Invalid username or password" in _refusal(secure, "SASL_SSL", **{"sasl.password": "not-the-password"})


@pytest.mark.parametrize("listener", ["TLS", "MTLS", "SASL_SSL"])
def test_each_listener_takes_a_client_with_its_settings(secure, listener):
    settings = client_settings(secure.tls, listener)
    metadata = reachable_admin(settings, secure.listener(listener), CONNECT_TIMEOUT_S).list_topics(timeout=30)
    assert metadata.brokers


def test_the_source_and_the_sink_batch_over_sasl_ssl_and_tls(secure, spark, tmp_path):
    topic = create_topic(secure.bootstrap_servers, unique_name("tls-in"), partitions=2)
    write_transactions(secure.bootstrap_servers, topic, [(True, [(n % 2, f"v{n}".encode()) for n in range(20)])])
    frame = spark.read.format("eos-kafka").options(**kafka_options(secure, "TLS"), subscribe=topic).load()
    assert sorted(row.value for row in frame.collect()) == sorted(f"v{n}".encode() for n in range(20))

    output = create_topic(secure.bootstrap_servers, unique_name("sasl-out"), partitions=2)
    frame.select("key", "value").write.format("eos-kafka").mode("append").options(
        **kafka_options(secure, "SASL_SSL"), topic=output).save()
    assert sorted(r.value for r in read_committed(secure.bootstrap_servers, output, partitions=2)) == \
        sorted(f"v{n}".encode() for n in range(20))


@pytest.mark.compat
@pytest.mark.spark_local_cluster
def test_the_exactly_once_pipeline_over_mutual_tls_with_a_worker_killed_before_its_commit(secure, spark_cluster,
                                                                                          tmp_path):
    pipeline = Pipeline(secure, tmp_path)
    marker = arm(WORKER_BEFORE_COMMIT, sorted(executor_local_dirs(spark_cluster))[0])
    options = kafka_options(secure, "MTLS")
    servers = options.pop("kafka.bootstrap.servers")
    pipeline.run(spark_cluster, servers=servers, sink_options={**options, "kafka.transaction.timeout.ms": 10000},
                 stableOffsetsTimeoutMs=60000, **options)
    assert not marker.exists(), "the armed crash did not happen"
    pipeline.assert_exactly_once()

    # The operator commands over the same listener: the group at the input's end, nothing lingering.
    config = [argument for key, value in client_settings(secure.tls, "MTLS").items()
              for argument in ("-X", f"{key}={value}")]
    status = json.loads(run_cli(servers, "status", "--group", pipeline.group, "--json", *config).stdout)
    assert status["partitions"] and all(p["lag"] == 0 for p in status["partitions"]), status["partitions"]
    lingering = run_cli(servers, "abort-lingering", "--group", pipeline.group, "--older-than", "0", "--dry-run",
                        *config)
    assert "no transaction" in lingering.stdout, lingering.stdout



def test_a_key_file_missing_on_a_host_fails_naming_the_file_and_the_host(secure, spark, tmp_path):
    # A file shipped to the executors only is missing on the driver, which appends the write's plan
    # record: the driver needs the files as much as the executors do.
    missing = tmp_path / "shipped-elsewhere" / "client.key"
    options = {**kafka_options(secure, "MTLS"), "kafka.ssl.key.location": str(missing)}
    frame = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception) as raised:
        frame.write.format("eos-kafka").mode("append").options(**options, topic="no-matter").save()
    assert f"the file of kafka.ssl.key.location ({missing}) does not exist on host" in str(raised.value)


TOKEN_PROVIDER = "tests.oauth_tokens:unsecured_token"
# Clients fetch tokens in librdkafka's background thread from this confluent-kafka release on;
# the package refuses kafka.oauth_cb with an older one (kafka/callbacks.py).
BACKGROUND_TOKENS = release(confluent_kafka.__version__) >= release(OAUTH_CB_SINCE)


def oauth_settings(cluster, log, lifetime: int) -> dict[str, str]:
    return {"kafka.security.protocol": "SASL_SSL", "kafka.ssl.ca.location": str(cluster.tls.ca),
            "kafka.sasl.mechanism": "OAUTHBEARER", "kafka.oauth_cb": TOKEN_PROVIDER,
            "kafka.sasl.oauthbearer.config": f"sub=eos lifetime={lifetime} log={log}"}


def issued_tokens(log) -> dict[int, list[float]]:
    """When each process took a token (tests/oauth_tokens.py's log)."""
    issued: dict[int, list[float]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        pid, at = line.split()
        issued.setdefault(int(pid), []).append(float(at))
    return issued


@pytest.mark.compat
def test_oauth_tokens_from_a_provider_named_by_import_path_carry_a_query_and_are_renewed_as_they_expire(
        secure, spark, tmp_path):
    lifetime = 6
    log = tmp_path / "tokens.log"
    settings = oauth_settings(secure, log, lifetime)
    pipeline = Pipeline(secure, tmp_path, rounds=1)
    if not BACKGROUND_TOKENS:
        with pytest.raises(Exception, match=rf"option kafka.oauth_cb needs confluent-kafka 2.13 or newer here, "
                                            rf"found {re.escape(confluent_kafka.__version__)}"):
            pipeline.run(spark, servers=secure.listener("SASL_SSL"), sink_options=settings, **settings)
        return
    writer = eos_pipeline(spark, secure.listener("SASL_SSL"), pipeline.input, pipeline.output, pipeline.group,
                          sink_options=settings, startingOffsets="earliest", **settings)
    query = writer.option("checkpointLocation", pipeline.checkpoint).trigger(processingTime="1 second").start()
    try:
        for round_ in range(1, 4):
            copied(pipeline, query, f"round {round_}")
            # The query's long-lived clients outlive their tokens: some process takes a token
            # round_ lifetimes after its first one, while the query keeps copying.
            wait_until(lambda: any(at[-1] - at[0] > round_ * lifetime for at in issued_tokens(log).values()), 120,
                       f"a process to renew its token {round_} lifetimes on")
            pipeline.add_input(round_, 1)
        copied(pipeline, query, "the last round")
    finally:
        query.stop()
    pipeline.assert_exactly_once()
    # Imported in each process that made a client: the driver's Python runners (planning, the
    # sink's checks) and the tasks' workers.
    assert len(issued_tokens(log)) > 2, issued_tokens(log)


def copied(pipeline, query, what: str) -> None:
    wait_until(lambda: sorted(pipeline.output_values()) == sorted(pipeline.input_values()) or not query.isActive,
               120, f"the query to copy {what}")
    assert query.isActive, query.exception()


def test_a_token_provider_that_cannot_be_imported_is_refused_naming_the_option(secure, spark):
    with pytest.raises(Exception, match="option kafka.oauth_cb='no_such_module:token': module 'no_such_module' "
                                        "cannot be imported here"):
        spark.read.format("eos-kafka").options(**{"kafka.bootstrap.servers": secure.listener("SASL_SSL"),
                                                  "kafka.oauth_cb": "no_such_module:token", "subscribe": "t"}).load()
