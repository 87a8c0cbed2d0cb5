"""Faults of the network between Kafka's clients and the brokers, through the test kit's TCP proxy
(pyspark_eos/testing/tcp_proxy.py): a proxied cluster's brokers advertise a listener at their
proxies' ports, so a client bootstrapped there reaches them only through the proxies, while the
test's own checks talk to the brokers directly.

First what the proxy does to a plain client (each fault could fail to happen: the client would
then not see it), then what the driver's planning does under it."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from pyspark_eos.errors import KafkaClientError
from pyspark_eos.source.offset_reader import KafkaOffsetReader
from pyspark_eos.source.options import SourceOptions
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from .kafka_tools import read_committed, unique_name

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
