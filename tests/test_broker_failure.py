"""The three-node embedded cluster behaves like a real one when a broker crashes and comes back."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from .kafka_tools import create_topic, read_committed, transactional_producer, unique_name

pytestmark = pytest.mark.cluster3


def commit_values(producer, topic: str, values: list[bytes]) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    producer.commit_transaction(90)


def partition_leader(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return metadata.topics[topic].partitions[0].leader


def test_transactions_commit_while_a_broker_is_down_and_after_it_returns(kafka_cluster3):
    bootstrap = kafka_cluster3.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("failover"), partitions=1, replication=3)
    producer = transactional_producer(bootstrap)
    commit_values(producer, topic, [b"before"])

    leader = partition_leader(bootstrap, topic)
    kafka_cluster3.kill_node(leader)
    assert sorted(kafka_cluster3.running_node_ids()) == sorted({1, 2, 3} - {leader})
    commit_values(producer, topic, [b"while-down-1", b"while-down-2"])
    assert partition_leader(bootstrap, topic) != leader

    kafka_cluster3.restart_node(leader)
    kafka_cluster3.wait_in_sync()
    commit_values(producer, topic, [b"after"])

    values = [r.value for r in read_committed(bootstrap, topic)]
    assert values == [b"before", b"while-down-1", b"while-down-2", b"after"]


@pytest.mark.parametrize("stop", ["clean", "hard"])
def test_the_drivers_offset_questions_are_answered_while_a_leader_is_down_and_after_it_returns(kafka_cluster3, stop):
    # One admin client lives as long as the driver-side reader: after the leader of a partition
    # stopped, librdkafka's answered OFFSET_INVALID without an error, or FENCED_LEADER_EPOCH for
    # minutes, and the query died planning its next batch.
    from pyspark_eos.source.offset_reader import KafkaOffsetReader
    from pyspark_eos.source.options import SourceOptions

    bootstrap = kafka_cluster3.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("leaders"), partitions=3, replication=3)
    producer = transactional_producer(bootstrap)
    producer.begin_transaction()
    for partition in range(3):
        for n in range(partition + 2):
            producer.produce(topic, value=b"v%d" % n, partition=partition)
    producer.commit_transaction(90)
    reader = KafkaOffsetReader(SourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic},
                                                   streaming=True))
    partitions = [(topic, p) for p in range(3)]
    earliest = {key: 0 for key in partitions}
    latest = {(topic, p): p + 3 for p in range(3)}  # the records and the commit marker
    assert (reader.earliest(partitions), reader.latest(partitions)) == (earliest, latest)

    leader = partition_leader(bootstrap, topic)
    (kafka_cluster3.stop_node if stop == "clean" else kafka_cluster3.kill_node)(leader)
    assert (reader.earliest(partitions), reader.latest(partitions)) == (earliest, latest)
    kafka_cluster3.restart_node(leader)
    kafka_cluster3.wait_in_sync()
    assert (reader.earliest(partitions), reader.latest(partitions)) == (earliest, latest)
