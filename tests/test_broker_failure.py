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
