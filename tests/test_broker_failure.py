"""The three-node embedded cluster behaves like a real one when a broker crashes and comes back."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from .kafka_tools import create_topic, read_committed, transactional_producer, unique_name, wait_until

pytestmark = pytest.mark.cluster3


def commit_values(producer, topic: str, values: list[bytes]) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    producer.commit_transaction(90)


def group_with_a_commit(bootstrap: str, name: str, partitions: int, offset: int) -> tuple[str, str]:
    """A new topic and a group that committed ``offset`` for its partition 0 in a transaction."""
    from confluent_kafka import Consumer, TopicPartition

    topic = create_topic(bootstrap, unique_name(name), partitions=partitions, replication=3)
    group = unique_name(name)
    producer = transactional_producer(bootstrap)
    producer.begin_transaction()
    producer.produce(topic, value=b"v", partition=0)
    metadata = Consumer({"bootstrap.servers": bootstrap, "group.id": group}).consumer_group_metadata()
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], metadata, 30)
    producer.commit_transaction(30)
    return topic, group


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
    # The commit markers are written after commit_transaction returns: until then the last stable
    # offset stays before the transaction.
    wait_until(lambda: reader.latest(partitions) == latest, 30, "the transaction's commit markers")
    assert (reader.earliest(partitions), reader.latest(partitions)) == (earliest, latest)

    leader = partition_leader(bootstrap, topic)
    (kafka_cluster3.stop_node if stop == "clean" else kafka_cluster3.kill_node)(leader)
    assert (reader.earliest(partitions), reader.latest(partitions)) == (earliest, latest)
    kafka_cluster3.restart_node(leader)
    kafka_cluster3.wait_in_sync()
    assert (reader.earliest(partitions), reader.latest(partitions)) == (earliest, latest)


def test_a_stable_read_of_the_groups_offsets_follows_its_coordinator_to_another_broker(kafka_cluster3):
    # A write task's admin client lives as long as its worker: after the group's coordinator
    # stopped, it was answered NOT_COORDINATOR for a minute, past the task's transaction timeout.
    # (A coordinator killed with SIGKILL can make librdkafka abort the process while an admin
    # request is pending, whatever the client: not tested here.)
    from pyspark_eos.kafka.group_offsets import fetch_stable_committed_offsets

    bootstrap = kafka_cluster3.bootstrap_servers
    topic, group = group_with_a_commit(bootstrap, "coordinated", partitions=1, offset=1)
    # The read below holds the only reference to the stale client, as a write task does: once
    # renewed it is destroyed with its requests (one still pending when the old coordinator comes
    # back would be answered NOT_COORDINATOR, on which librdkafka aborts the process).
    stale = [AdminClient({"bootstrap.servers": bootstrap})]
    assert fetch_stable_committed_offsets(stale[0], group, [(topic, 0)], 30_000) == {(topic, 0): 1}
    coordinator = stale[0].describe_consumer_groups([group])[group].result(30).coordinator.id

    renewed = []

    def renew():
        renewed.append(AdminClient({"bootstrap.servers": bootstrap}))
        return renewed[-1]

    kafka_cluster3.stop_node(coordinator)
    try:
        assert fetch_stable_committed_offsets(stale.pop(), group, [(topic, 0)], 20_000, renew=renew) == {(topic, 0): 1}
    finally:
        kafka_cluster3.restart_node(coordinator)
        kafka_cluster3.wait_in_sync()


def test_a_producer_stuck_on_a_stopped_group_coordinator_is_given_up_and_its_id_recovers(kafka_cluster3):
    # librdkafka's send_offsets_to_transaction ignores its timeout while it looks for a group
    # coordinator whose broker stopped (librdkafka #5456, #5511): the write task bounds the call
    # itself, drops the producer, and the task's retry fences the transactional id.
    from confluent_kafka import Consumer, Producer, TopicPartition

    from pyspark_eos.kafka.deadline import DeadlineExceeded, call_with_deadline
    from pyspark_eos.kafka.group_offsets import fetch_stable_committed_offsets

    bootstrap = kafka_cluster3.bootstrap_servers
    source = create_topic(bootstrap, unique_name("coordinated-in"), partitions=1, replication=3)
    output = create_topic(bootstrap, unique_name("coordinated-out"), partitions=1, replication=3)
    group, transactional_id = unique_name("coordinated"), unique_name("stuck")
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})  # alive while its metadata is used
    metadata = member.consumer_group_metadata()

    def transaction(producer, value: bytes, offset: int, deadline_s: float) -> None:
        producer.begin_transaction()
        producer.produce(output, value=value, partition=0)
        producer.flush(30)
        call_with_deadline(lambda: producer.send_offsets_to_transaction([TopicPartition(source, 0, offset)],
                                                                        metadata, 120),
                           deadline_s, "send_offsets_to_transaction")
        producer.commit_transaction(60)

    stuck = transactional_producer(bootstrap, transactional_id, **{"transaction.timeout.ms": 20000})
    transaction(stuck, b"first", 1, 30)  # the producer now knows the group's coordinator
    admin = AdminClient({"bootstrap.servers": bootstrap})
    coordinator = admin.describe_consumer_groups([group])[group].result(30).coordinator.id
    kafka_cluster3.stop_node(coordinator)
    try:
        with pytest.raises(DeadlineExceeded, match="did not return in 10 s"):
            transaction(stuck, b"lost", 2, 10)
        retry = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
        retry.init_transactions(60)  # fences the stuck producer and aborts its transaction
        transaction(retry, b"retried", 2, 60)
    finally:
        kafka_cluster3.restart_node(coordinator)
        kafka_cluster3.wait_in_sync()
    assert [r.value for r in read_committed(bootstrap, output)] == [b"first", b"retried"]
    fresh = AdminClient({"bootstrap.servers": bootstrap})  # the one above knows the old coordinator
    assert fetch_stable_committed_offsets(fresh, group, [(source, 0)], 30_000) == {(source, 0): 2}


@pytest.mark.parametrize("stop", ["clean", "hard"])
def test_the_drivers_question_about_committed_offsets_survives_the_coordinators_broker(kafka_cluster3, stop):
    # Planning asks every batch where the group's offsets are (a replayed range must not be grouped
    # with new ones). Through the driver's admin client, after the coordinator's broker was bounced,
    # each request waited out its timeout until librdkafka aborted the process (the chaos smoke's
    # query died); admin requests pending when the coordinator is killed can abort it too.
    from pyspark_eos.source.offset_reader import KafkaOffsetReader
    from pyspark_eos.source.options import SourceOptions

    bootstrap = kafka_cluster3.bootstrap_servers
    topic, group = group_with_a_commit(bootstrap, "asked", partitions=2, offset=7)
    reader = KafkaOffsetReader(SourceOptions.parse(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "kafka.group.id": group}, streaming=True))
    partitions = [(topic, 0), (topic, 1)]
    # Once the commit is stable: until then the coordinator answers a read that does not wait
    # for it with the offsets before the transaction.
    assert reader.committed(group, partitions) == {(topic, 0): 7, (topic, 1): None}
    assert reader.committed_now(group, partitions) == {(topic, 0): 7}
    coordinator = reader.admin.describe_consumer_groups([group])[group].result(30).coordinator.id

    (kafka_cluster3.stop_node if stop == "clean" else kafka_cluster3.kill_node)(coordinator)
    try:
        # A killed coordinator's group is unreachable until its partition's new leader loads it;
        # meanwhile a consumer's answer is OFFSET_INVALID, the same as "never committed".
        assert reader.committed_now(group, partitions) in ({(topic, 0): 7}, {} if stop == "hard" else None)
    finally:
        kafka_cluster3.restart_node(coordinator)
        kafka_cluster3.wait_in_sync()
    assert reader.committed_now(group, partitions) == {(topic, 0): 7}
