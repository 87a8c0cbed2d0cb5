"""Faults of the network between Kafka's clients and the brokers, through the test kit's TCP proxy
(pyspark_eos/testing/tcp_proxy.py): a proxied cluster's brokers advertise a listener at their
proxies' ports, so a client bootstrapped there reaches them only through the proxies, while the
test's own checks talk to the brokers directly.

First what the proxy does to a plain client (each fault could fail to happen: the client would
then not see it), then what the driver's planning does under it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from pyspark_eos.errors import KafkaClientError
from pyspark_eos.protocol.offset_range import OffsetRange
from pyspark_eos.source.offset_reader import KafkaOffsetReader
from pyspark_eos.source.partition_reader import ReaderSettings, consumer_config, read_range
from pyspark_eos.source.options import SourceOptions
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic
from pyspark_eos.testing.local_spark import executor_ids, executor_work_directory
from pyspark_eos.testing.tcp_proxy import ClientProcesses

from .kafka_tools import read_committed, unique_name, wait_until
from .spark_tools import Pipeline

BOUND_S = 3


@pytest.fixture(scope="module")
def proxied(tmp_path_factory) -> EmbeddedKafkaCluster:
    with EmbeddedKafkaCluster(nodes=1, directory=tmp_path_factory.mktemp("proxied"), proxied=True) as cluster:
        yield cluster


@pytest.fixture
def proxy(proxied):
    proxy = proxied.proxies[1]
    yield proxy
    proxy.clear()


def _topic(cluster: EmbeddedKafkaCluster, partitions: int = 1) -> str:
    return create_topic(cluster.bootstrap_servers, unique_name("net"), partitions)


def _producer(cluster: EmbeddedKafkaCluster) -> Producer:
    return Producer({"bootstrap.servers": cluster.proxied_bootstrap_servers, "enable.idempotence": True})


def _metadata_seconds(servers: str) -> float:
    admin = AdminClient({"bootstrap.servers": servers})
    admin.list_topics(timeout=30)  # connected, and the proxy's connection made
    started = time.monotonic()
    admin.list_topics(timeout=30)
    return time.monotonic() - started


# ----------------------------------------------------------------------- the proxy on a plain client

def test_the_proxied_listener_advertises_the_proxies_and_the_direct_one_the_brokers(proxied, proxy):
    through = AdminClient({"bootstrap.servers": proxied.proxied_bootstrap_servers}).list_topics(timeout=30)
    assert [str(broker) for broker in through.brokers.values()] == [f"{proxy.address}/1"]
    direct = AdminClient({"bootstrap.servers": proxied.bootstrap_servers}).list_topics(timeout=30)
    assert [str(broker) for broker in direct.brokers.values()] == [f"{proxied.bootstrap_servers}/1"]


def test_latency_delays_each_answer_by_what_it_is_set_to(proxied, proxy):
    proxy.latency(upstream_ms=150, downstream_ms=250)
    assert _metadata_seconds(proxied.proxied_bootstrap_servers) >= 0.4
    proxy.latency()
    assert _metadata_seconds(proxied.proxied_bootstrap_servers) < 0.4


def test_a_bandwidth_limit_slows_a_large_write(proxied, proxy):
    topic, producer = _topic(proxied), _producer(proxied)
    producer.produce(topic, value=b"warm")
    assert producer.flush(30) == 0
    proxy.bandwidth(200_000)
    started = time.monotonic()
    for _ in range(10):
        producer.produce(topic, value=b"x" * 50_000)
    assert producer.flush(60) == 0
    assert time.monotonic() - started >= 2.0  # 500 kB at 200 kB/s
    assert len(read_committed(proxied.bootstrap_servers, topic)) == 11


def test_a_partition_holds_a_write_until_it_heals_and_then_delivers_it_once(proxied, proxy):
    topic, producer = _topic(proxied), _producer(proxied)
    producer.produce(topic, value=b"before")
    assert producer.flush(30) == 0
    proxy.partition()
    producer.produce(topic, value=b"during")
    assert producer.flush(2) == 1  # nothing forwarded: the record is not acknowledged
    assert [r.value for r in read_committed(proxied.bootstrap_servers, topic)] == [b"before"]
    proxy.heal()
    assert producer.flush(30) == 0
    assert [r.value for r in read_committed(proxied.bootstrap_servers, topic)] == [b"before", b"during"]


def test_a_reset_closes_the_open_connections_and_the_client_reconnects(proxied, proxy):
    admin = AdminClient({"bootstrap.servers": proxied.proxied_bootstrap_servers})
    admin.list_topics(timeout=30)
    admin.list_topics(timeout=30)  # on the connection it has
    made = proxy.connections_made
    assert proxy.reset() >= 1
    assert admin.list_topics(timeout=30).brokers
    assert proxy.connections_made > made  # connected again


def test_refused_connections_fail_a_new_client_until_accepted_again(proxied, proxy):
    proxy.refuse()
    with pytest.raises(KafkaException, match="_TRANSPORT"):
        AdminClient({"bootstrap.servers": proxied.proxied_bootstrap_servers}).list_topics(timeout=2)
    proxy.accept()
    assert AdminClient({"bootstrap.servers": proxied.proxied_bootstrap_servers}).list_topics(timeout=30).brokers


# Another process's client through the proxy: a line "TOPIC VALUE SECONDS" on stdin produces VALUE
# and prints how many records flush(SECONDS) left undelivered; "new" makes a new producer first.
CLIENT_PROCESS = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Producer
    new = lambda: Producer({"bootstrap.servers": sys.argv[1], "enable.idempotence": True})
    producer = new()
    for line in sys.stdin:
        if line.startswith("new"):
            producer, line = new(), line[4:]
        topic, value, seconds = line.split()
        producer.produce(topic, value=value.encode())
        print(producer.flush(float(seconds)), flush=True)
    """)


class ClientProcess:
    def __init__(self, servers: str):
        self.process = subprocess.Popen([sys.executable, "-c", CLIENT_PROCESS, servers], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def undelivered(self, topic: str, value: str, seconds: float, new: bool = False) -> int:
        self.process.stdin.write(f"{'new ' if new else ''}{topic} {value} {seconds}\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def test_client_processes_are_a_process_tree_without_the_trees_excluded():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in ClientProcesses.of(os.getpid()) and os.getpid() in ClientProcesses.of(os.getpid())
        assert child.pid not in ClientProcesses.of(os.getpid(), excluding=[child.pid])
        assert os.getpid() in ClientProcesses.of(os.getpid(), excluding=[child.pid])
        assert os.getpid() not in ClientProcesses.of(child.pid) and None not in ClientProcesses.of(os.getpid())
    finally:
        child.kill()
        child.wait()


def test_client_processes_working_in_a_directory(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path)
    try:
        clients = ClientProcesses.working_in(tmp_path)
        assert child.pid in clients and os.getpid() not in clients and None not in clients
    finally:
        child.kill()
        child.wait()


def test_faults_narrowed_to_some_clients_leave_the_others_alone(proxied, proxy):
    topic, ours = _topic(proxied), _producer(proxied)
    other = ClientProcess(proxied.proxied_bootstrap_servers)
    try:
        assert other.undelivered(topic, "other-before", 30) == 0
        ours.produce(topic, value=b"ours-before")
        assert ours.flush(30) == 0
        proxy.only(ClientProcesses.of(other.process.pid))
        assert proxy.affected() >= 1  # the other process's connection, and not ours
        proxy.partition()
        assert other.undelivered(topic, "other-during", 2) == 1  # held
        ours.produce(topic, value=b"ours-during")
        assert ours.flush(30) == 0  # passes
        proxy.heal()
        assert other.undelivered(topic, "other-after", 30) == 0
        proxy.refuse()  # for the other process's new connections only
        assert other.undelivered(topic, "other-refused", 2, new=True) == 1
        assert AdminClient({"bootstrap.servers": proxied.proxied_bootstrap_servers}).list_topics(timeout=30).brokers
    finally:
        other.stop()
    values = sorted(r.value for r in read_committed(proxied.bootstrap_servers, topic))
    assert values == sorted([b"other-before", b"ours-before", b"other-during", b"ours-during", b"other-after"])


# ----------------------------------------------------------------------- the driver's planning

def _reader(cluster: EmbeddedKafkaCluster, topic: str, connect_timeout_s: float) -> KafkaOffsetReader:
    return KafkaOffsetReader(SourceOptions.parse(
        {"kafka.bootstrap.servers": cluster.proxied_bootstrap_servers, "subscribe": topic,
         "connectTimeoutMs": str(int(connect_timeout_s * 1000))}, streaming=True))


def test_planning_rides_through_a_partition_shorter_than_connect_timeout(proxied, proxy):
    topic = _topic(proxied, 2)
    reader = _reader(proxied, topic, 60)
    partitions = [(topic, 0), (topic, 1)]
    assert reader.latest(partitions) == {key: 0 for key in partitions}
    proxy.partition()
    with ThreadPoolExecutor(1) as planner:
        asked = planner.submit(lambda: (reader.topic_partitions(), reader.latest(partitions)))
        time.sleep(3)  # the fault's length: the question waits in it
        assert not asked.done()
        proxy.heal()
        assert asked.result(60) == (partitions, {key: 0 for key in partitions})


def test_planning_through_a_longer_partition_fails_naming_the_brokers_and_the_option(proxied, proxy):
    topic = _topic(proxied, 2)
    reader = _reader(proxied, topic, BOUND_S)
    partitions = [(topic, 0), (topic, 1)]
    assert reader.latest(partitions) == {key: 0 for key in partitions}
    proxy.partition()
    started = time.monotonic()
    with pytest.raises(KafkaClientError, match=f"no Kafka broker answered at {proxied.proxied_bootstrap_servers} "
                                               rf"within {BOUND_S} s \(option connectTimeoutMs\)"):
        reader.latest(partitions)
    assert time.monotonic() - started < BOUND_S + 5


# ----------------------------------------------------------------------- a read task

def test_a_read_task_cut_off_from_the_leader_fails_after_the_poll_timeout_naming_the_option(proxied, proxy):
    topic = _topic(proxied)
    producer = Producer({"bootstrap.servers": proxied.bootstrap_servers})
    producer.produce(topic, value=b"a")
    assert producer.flush(30) == 0
    config = consumer_config(proxied.proxied_bootstrap_servers, {}, None)
    settings = ReaderSettings(config, include_headers=False, fail_on_data_loss=True, poll_timeout_s=BOUND_S)
    proxy.partition()
    started = time.monotonic()
    with pytest.raises(KafkaClientError, match=r"made no progress for 3 s \(option kafkaConsumer.pollTimeoutMs\)"):
        list(read_range(OffsetRange(topic, 0, 0, 1), settings))
    assert BOUND_S <= time.monotonic() - started < BOUND_S + 10
    proxy.heal()
    assert [row["value"] for batch in read_range(OffsetRange(topic, 0, 0, 1), settings) for row in batch.to_pylist()] \
        == [b"a"]  # the same read, once the network is back


LOST_REQUEST_DEADLINE_S = 30


def test_a_send_offsets_whose_request_was_lost_with_its_connection_is_given_up_once_the_coordinator_answers(
        proxied, proxy):
    """A ``send_offsets_to_transaction`` whose request a partition held, and whose connection was
    then reset, never returns: librdkafka does not send the request again, and the write task would
    wait for its deadline, the transaction timeout. It is given up once the group's coordinator
    answers the worker again; the task's retry (a producer of the same id) commits."""
    from functools import partial

    from confluent_kafka import Consumer, TopicPartition

    from pyspark_eos.kafka.deadline import DeadlineExceeded, call_with_deadline
    from pyspark_eos.kafka.held_clients import Held
    from pyspark_eos.kafka.options import ClientSettings
    from pyspark_eos.sink.producer_pool import WorkerProducer, why_offsets_wait

    from .kafka_tools import offsets_transaction, transactional_producer

    source, output = _topic(proxied), _topic(proxied)
    group, transactional_id = unique_name("lost"), unique_name("lost")
    servers = proxied.proxied_bootstrap_servers
    member = Consumer({"bootstrap.servers": servers, "group.id": group})  # alive while its metadata is used
    metadata = member.consumer_group_metadata()

    producer = transactional_producer(servers, transactional_id)
    # the producer now knows the group's coordinator
    offsets_transaction(producer, output, b"first", [TopicPartition(source, 0, 1)], metadata)
    held = Held(ClientSettings.of(servers, {}, 60000))
    worker = WorkerProducer(transactional_id, producer, os.getpid(), group_coordinator=1)
    producer.begin_transaction()
    producer.produce(output, value=b"lost")
    producer.flush(30)
    send = partial(producer.send_offsets_to_transaction, [TopicPartition(source, 0, 2)], metadata, 120)
    proxy.partition()
    try:
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(call_with_deadline, send, LOST_REQUEST_DEADLINE_S, "send_offsets_to_transaction",
                               partial(why_offsets_wait, held, worker, group))
            time.sleep(1.0)  # the partition's length, not a wait for a condition: the request is held
            proxy.heal(reset=True)
            healed = time.monotonic()
            with pytest.raises(DeadlineExceeded, match="answers this worker, yet the call has waited"):
                call.result(LOST_REQUEST_DEADLINE_S + 30)
            assert time.monotonic() - healed < LOST_REQUEST_DEADLINE_S / 2
    finally:
        held.close()
    retry = transactional_producer(servers, transactional_id)  # fences the given-up one, aborts its transaction
    offsets_transaction(retry, output, b"retried", [TopicPartition(source, 0, 2)], metadata)
    assert [r.value for r in read_committed(proxied.bootstrap_servers, output)] == [b"first", b"retried"]


# ----------------------------------------------------------------------- a running query

PARTITION_S = 6


def test_a_partition_of_one_executor_shorter_than_the_transaction_timeout_is_ridden_through(proxied, proxy,
                                                                                              spark_cluster, tmp_path):
    """One executor's clients (its Python workers, found by their working directory) cut off from
    the broker for a few seconds while the query runs and input arrives: its tasks wait or fail and
    are retried, the query stays up, and each record is written once."""
    pipeline = Pipeline(proxied, tmp_path, rounds=3)
    with pipeline.riding_through(spark_cluster, proxied.proxied_bootstrap_servers):
        executor = sorted(executor_ids(spark_cluster))[0]
        clients = ClientProcesses.working_in(executor_work_directory(spark_cluster, executor))
        # on a busy machine the executor's workers may not have run a task (and connected) yet
        wait_until(lambda: proxy.only(clients) or proxy.affected() >= 1, 60, "a connection of the executor's workers")
        proxy.partition()
        pipeline.add_input(3, 3)
        time.sleep(PARTITION_S)  # the fault's length, not a wait for a condition
        proxy.heal()
