"""A cluster that does not answer, and an output topic that does not exist.

The first request a query makes to its cluster waits at most ``connectTimeoutMs`` for a broker to
answer and then fails saying what to check, instead of librdkafka's raw _TRANSPORT after 30 s or
more. The sink checks its ``topic`` option on the driver, before any task opens a transaction,
instead of failing each record after librdkafka gives up on the topic's metadata.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from pyspark_eos.errors import ConfigurationError, KafkaClientError
from pyspark_eos.sink.options import SinkOptions
from pyspark_eos.source.options import SourceOptions
from pyspark_eos.testing.embedded_kafka import free_ports, start_dying_with_parent

from .class_archives import CHECKOUT as PROJECT_ROOT
from .kafka_tools import committed_offsets, create_topic, read_committed, transactional_ids, unique_name, wait_until
from .spark_tools import PARTITIONS, Pipeline, run_to_end, source

BOUND_S = 3
# The bound, plus Spark planning the query in Python workers it may have to start first (over 10 s
# on a busy machine); below the 30 s that librdkafka's requests took before.
CEILING_S = BOUND_S + 20


@pytest.fixture
def nowhere() -> str:
    """An address on this host where nothing listens (connections are refused at once)."""
    (port,) = free_ports(1)
    return f"127.0.0.1:{port}"


def no_broker_answered(servers: str) -> str:
    return re.escape(f"no Kafka broker answered at {servers} within {BOUND_S} s")


def topic_is_missing(topic: str, servers: str) -> str:
    return re.escape(f"the sink's topic {topic!r} does not exist at {servers}")


def topic_exists(servers: str, topic: str) -> bool:
    found = AdminClient({"bootstrap.servers": servers}).list_topics(timeout=30).topics
    return topic in found


# ------------------------------------------------------------------------------- the option

def test_connect_timeout_is_an_option_of_the_source_and_the_sink():
    base = {"kafka.bootstrap.servers": "h:1"}
    assert SourceOptions.parse({**base, "subscribe": "t"}, streaming=True).connect_timeout_ms == 30_000
    assert SinkOptions.parse(base).connect_timeout_ms == 30_000
    assert SourceOptions.parse({**base, "subscribe": "t", "connectTimeoutMs": "2500"}, streaming=True).connect_timeout_ms == 2500
    assert SinkOptions.parse({**base, "ConnectTimeoutMs": "2500"}).connect_timeout_ms == 2500
    with pytest.raises(ConfigurationError, match="option connectTimeoutMs='0' must be a positive whole number"):
        SinkOptions.parse({**base, "connectTimeoutMs": "0"})


# ------------------------------------------------------------------------------- an unreachable cluster

def test_the_first_contact_fails_within_the_bound_and_says_what_to_check(nowhere):
    from pyspark_eos.kafka import cluster

    admin = AdminClient({"bootstrap.servers": nowhere})
    started = time.monotonic()
    with pytest.raises(KafkaClientError, match=no_broker_answered(nowhere)) as failure:
        cluster.first_contact(admin, nowhere, BOUND_S)
    assert time.monotonic() - started < BOUND_S + 2
    for what in ("address and port", "advertised listeners", "kafka.security.protocol", "connectTimeoutMs"):
        assert what in str(failure.value)


SOURCES = {
    "batch, subscribe": (False, {"subscribe": "in"}),
    "batch, assign": (False, {"assign": '{"in":[0]}'}),
    "stream, subscribe": (True, {"subscribe": "in"}),
    "stream, in a consumer group": (True, {"subscribe": "in", "kafka.group.id": "g"}),
}


@pytest.mark.parametrize("case", SOURCES)
def test_a_source_on_an_unreachable_cluster_fails_within_the_bound(spark, nowhere, tmp_path, case):
    streaming, options = SOURCES[case]
    reader = (spark.readStream if streaming else spark.read).format("eos-kafka")
    for key, value in {"kafka.bootstrap.servers": nowhere, "connectTimeoutMs": BOUND_S * 1000, **options}.items():
        reader = reader.option(key, str(value))
    frame = reader.load()
    started = time.monotonic()
    with pytest.raises(Exception, match=no_broker_answered(nowhere)):
        if streaming:
            query = frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
            try:
                query.awaitTermination(120)
            finally:
                query.stop()
        else:
            frame.collect()
    assert time.monotonic() - started < CEILING_S


@pytest.mark.parametrize("topic_option", [True, False], ids=["topic option", "topic column"])
def test_a_sink_on_an_unreachable_cluster_fails_within_the_bound(spark, kafka, nowhere, tmp_path, topic_option):
    pipeline = Pipeline(kafka, tmp_path, rounds=1)
    frame = source(spark, kafka.bootstrap_servers, pipeline.input, startingOffsets="earliest")
    frame = frame.select("key", "value") if topic_option else frame.select("key", "value", F.lit("out").alias("topic"))
    writer = (frame.writeStream.format("eos-kafka").option("kafka.bootstrap.servers", nowhere)
              .option("kafka.group.id", pipeline.group).option("connectTimeoutMs", str(BOUND_S * 1000)))
    writer = writer.option("topic", "out") if topic_option else writer
    started = time.monotonic()
    with pytest.raises(StreamingQueryException, match=no_broker_answered(nowhere)):
        run_to_end(writer, pipeline.checkpoint, timeout=120)
    assert time.monotonic() - started < CEILING_S


# ------------------------------------------------------------------------------- an output topic that does not exist

def test_a_stream_to_a_topic_that_does_not_exist_fails_before_any_task_writes(spark, kafka, tmp_path):
    pipeline = Pipeline(kafka, tmp_path, rounds=1)
    pipeline.output = unique_name("missing")
    prefix = f"eos-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    with pytest.raises(StreamingQueryException, match=topic_is_missing(pipeline.output, pipeline.bootstrap)) as failure:
        pipeline.run(spark, sink_options={"transactionalIdPrefix": prefix})
    assert time.monotonic() - started < CEILING_S
    assert f"kafka-topics.sh --bootstrap-server {pipeline.bootstrap} --create --topic {pipeline.output} --partitions" \
        in str(failure.value)
    assert transactional_ids(pipeline.bootstrap, prefix) == set(), "a write task ran"
    assert set(committed_offsets(pipeline.bootstrap, pipeline.group, pipeline.input, PARTITIONS).values()) == {-1001}
    assert not topic_exists(pipeline.bootstrap, pipeline.output)


def test_a_batch_write_to_a_topic_that_does_not_exist_fails_naming_it(spark, kafka):
    topic = unique_name("missing")
    frame = spark.createDataFrame([("v",)], "value string")
    started = time.monotonic()
    with pytest.raises(Exception, match=topic_is_missing(topic, kafka.bootstrap_servers)):
        (frame.write.format("eos-kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
         .option("topic", topic).mode("append").save())
    assert time.monotonic() - started < CEILING_S
    assert not topic_exists(kafka.bootstrap_servers, topic)


def test_a_topic_is_looked_up_once_per_process(kafka, monkeypatch):
    from pyspark_eos.kafka import cluster

    made = []
    monkeypatch.setattr(cluster, "AdminClient", lambda config: made.append(config) or AdminClient(config))
    topic = create_topic(kafka.bootstrap_servers, unique_name("exists"))
    for _ in range(3):
        cluster.check_output({}, kafka.bootstrap_servers, topic, 30)
    assert len(made) == 1
    with pytest.raises(ConfigurationError, match=topic_is_missing("nope", kafka.bootstrap_servers)):
        cluster.check_output({}, kafka.bootstrap_servers, "nope", 30)


def test_a_transaction_timeout_above_the_brokers_maximum_fails_the_write_before_any_task(spark, kafka):
    topic, prefix = create_topic(kafka.bootstrap_servers, unique_name("txn-timeout")), unique_name("txn-timeout")
    frame = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception, match=r"option kafka.transaction.timeout.ms=3600000 is above the brokers' "
                                        r"transaction.max.timeout.ms \(900000\)"):
        frame.write.format("eos-kafka").mode("append").options(**{
            "kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": topic, "transactionalIdPrefix": prefix,
            "kafka.transaction.timeout.ms": "3600000"}).save()
    assert transactional_ids(kafka.bootstrap_servers, prefix) == set()  # no task's producer was made


# ------------------------------------------------------------------------------- a cluster that goes away

def test_the_drivers_offset_questions_ride_through_a_restart_of_the_only_broker_and_then_name_it(tmp_path):
    """Planning a batch asks for the partitions' offsets: while the only broker restarts, librdkafka
    finds no leader at all (_NOENT, "No leaders found"), which failed the query at once. It is
    asked again until the broker is back, for up to connectTimeoutMs; a broker that stays away
    fails the question naming the address and the option."""
    from pyspark_eos.source.offset_reader import KafkaOffsetReader
    from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster

    with EmbeddedKafkaCluster(nodes=1, directory=tmp_path / "kafka") as cluster:
        bootstrap = cluster.bootstrap_servers
        topic = create_topic(bootstrap, unique_name("lone-broker"), partitions=2)
        producer = Producer({"bootstrap.servers": bootstrap})
        for partition in (0, 1):
            producer.produce(topic, value=b"v", partition=partition)
        assert producer.flush(30) == 0
        partitions = [(topic, 0), (topic, 1)]
        ends = {key: 1 for key in partitions}
        reader = KafkaOffsetReader(SourceOptions.parse(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "connectTimeoutMs": "60000"}, streaming=True))
        assert reader.latest(partitions) == ends

        cluster.kill_node(1)
        with ThreadPoolExecutor(1) as planner:  # the broker is restarted from this thread: it dies with its starter
            asked = planner.submit(lambda: (reader.latest(partitions), reader.topic_partitions()))
            cluster.restart_node(1)  # a restarted broker waits out its old registration: seconds
            assert asked.result(120) == (ends, partitions)

        bounded = KafkaOffsetReader(SourceOptions.parse(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "connectTimeoutMs": str(BOUND_S * 1000)},
            streaming=True))
        assert bounded.latest(partitions) == ends  # a driver that had reached the cluster before it went away
        cluster.kill_node(1)
        started = time.monotonic()
        with pytest.raises(KafkaClientError, match=no_broker_answered(bootstrap)):
            bounded.latest(partitions)
        assert time.monotonic() - started < BOUND_S + 10
        with pytest.raises(KafkaClientError, match=no_broker_answered(bootstrap)):
            bounded.topic_partitions()


def test_a_workers_producer_that_lived_through_a_restart_of_the_only_broker_is_replaced(tmp_path):
    """librdkafka's producer that saw its only broker restart (cleanly) hangs in its next
    send_offsets_to_transaction until the task's deadline: the worker makes a new one instead."""
    from confluent_kafka import Consumer, TopicPartition

    from pyspark_eos.kafka.deadline import call_with_deadline
    from pyspark_eos.kafka.group_offsets import group_coordinator
    from pyspark_eos.kafka.options import ClientSettings
    from pyspark_eos.sink import worker_resources
    from pyspark_eos.sink.producer_pool import PRODUCER, admin_for, cached_slot, producer_for
    from pyspark_eos.sink.transactional_id_factory import lease_slot
    from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster

    with EmbeddedKafkaCluster(nodes=1, directory=tmp_path / "kafka") as cluster:
        bootstrap = cluster.bootstrap_servers
        source_topic, output = (create_topic(bootstrap, unique_name(name), partitions=1) for name in ("in", "out"))
        group, prefix = unique_name("restarted"), unique_name("eos-kafka")
        member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})  # alive while its metadata is used
        held = worker_resources.use(ClientSettings.of(bootstrap, {}, 20000), (prefix, group))

        def task(value: bytes, offset: int):
            with lease_slot(prefix, group, cached_slot(held)) as lease:
                worker = producer_for(held, lease, group)
                producer = worker.producer
                producer.begin_transaction()
                producer.produce(output, value=value, partition=0)
                producer.flush(30)
                offsets = [TopicPartition(source_topic, 0, offset)]
                call_with_deadline(lambda: producer.send_offsets_to_transaction(
                    offsets, member.consumer_group_metadata(), 60), 15, "send_offsets_to_transaction")
                producer.commit_transaction(60)
                return worker

        try:
            before = task(b"before", 1)
            cluster.stop_node(1)
            cluster.restart_node(1)
            # As between a query's batches: the group's coordinator is known again, on the same broker.
            wait_until(lambda: group_coordinator(admin_for(held), group, 5) == 1, 60, "the group's coordinator")
            after = task(b"after", 2)
            assert after is not before
            assert [r.value for r in read_committed(bootstrap, output)] == [b"before", b"after"]
        finally:
            held.drop(PRODUCER)
            member.close()


def test_coordinator_requests_through_restarts_of_the_only_broker_neither_abort_the_process_nor_stop_answering(
        tmp_path):
    """An AdminClient's request to a group's coordinator that librdkafka times out while the broker
    stops or comes back aborted the process (an assertion in librdkafka 2.16): the task's wait is
    bounded outside librdkafka instead (group_offsets.coordinator_answer). And an AdminClient that
    lived through the restart left such requests unanswered: a worker replaces it, as its producer
    (producer_pool.admin_for). Four threads ask while the only broker is killed or stopped, with
    requests timing out, and started again, four times."""
    from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster

    counts_file = tmp_path / "counts.json"

    def counts() -> dict[str, int]:
        return json.loads(counts_file.read_text()) if counts_file.exists() else {}

    with EmbeddedKafkaCluster(nodes=1, directory=tmp_path / "kafka") as cluster:
        command = [sys.executable, "-m", "tests.coordinator_requests_job", cluster.bootstrap_servers, str(counts_file)]
        job = start_dying_with_parent(command, cwd=PROJECT_ROOT, stdin=subprocess.PIPE)
        try:
            for restart in range(4):
                answered = wait_until(lambda: counts().get("answered", 0), 60, "answers from the coordinator")
                timed_out = counts().get("_TIMED_OUT", 0)
                (cluster.kill_node if restart % 2 else cluster.stop_node)(1)
                wait_until(lambda: counts().get("_TIMED_OUT", 0) > timed_out or job.poll() is not None, 30,
                           "requests timing out")
                cluster.restart_node(1)
                wait_until(lambda: counts().get("answered", 0) > answered or job.poll() is not None, 60,
                           "answers after the restart")
                assert job.poll() is None, f"the asking process died (exit {job.returncode}) after restart {restart}"
        finally:
            job.communicate(timeout=30)
    assert job.returncode == 0


def test_a_running_query_rides_through_a_restart_of_the_only_broker_exactly_once(spark, tmp_path):
    """The query keeps running across the broker's absence (its planning waits, its tasks'
    clients reconnect), and writes each record once, the input that arrived meanwhile too.

    A clean restart, between batches: a lone combined node that stops (or is killed) while it
    answers a commit can skip that commit's markers for good, a Kafka fault no client can repair
    (docs/operations.md, "A lone broker stopped while a transaction commits")."""
    from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster

    with EmbeddedKafkaCluster(nodes=1, directory=tmp_path / "kafka") as cluster:
        pipeline = Pipeline(cluster, tmp_path, rounds=3)
        with pipeline.riding_through(spark):
            wait_until(lambda: sorted(pipeline.output_values()) == sorted(pipeline.input_values()), 120,
                       "the input there at the start in the output: no transaction committing")
            cluster.stop_node(1)
            cluster.restart_node(1)
            pipeline.add_input(3, 3)
