"""The three-node embedded cluster behaves like a real one when a broker crashes and comes back,
and an eos-kafka pipeline stays exactly-once when one does in the middle of a write task's
transaction."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, ElectionType, IsolationLevel, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pyspark_eos.sink.transactional_id_factory import slots_name, transactional_id
from pyspark_eos.testing import fault_injection as faults
from devtools.chaos.verifiers import transactions
from pyspark_eos.testing.local_spark import executor_local_dirs

from .kafka_tools import (create_topic, offsets_transaction, read_committed, transactional_producer, unique_name,
                          wait_until)
from .spark_tools import PARTITIONS, Pipeline

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
    metadata = Consumer({"bootstrap.servers": bootstrap, "group.id": group}).consumer_group_metadata()
    offsets_transaction(transactional_producer(bootstrap), topic, b"v", [TopicPartition(topic, 0, offset)], metadata)
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


def test_a_producer_stuck_on_a_stopped_group_coordinator_is_given_up_once_it_moved_and_its_id_recovers(kafka_cluster3):
    # librdkafka's send_offsets_to_transaction ignores its timeout while it looks for a group
    # coordinator whose broker stopped (librdkafka #5456, #5511): the write task bounds the call
    # itself and gives it up as soon as the coordinator is found on another broker, drops the
    # producer, and the task's retry fences the transactional id. Whether the producer gets stuck
    # depends on when it notices the broker gone (on a busy machine it found the new coordinator in
    # time): either way the call ends well within its deadline and the id commits.
    import os
    import time
    from functools import partial

    from confluent_kafka import Consumer, Producer, TopicPartition

    from pyspark_eos.kafka.deadline import DeadlineExceeded, call_with_deadline
    from pyspark_eos.kafka.group_offsets import fetch_stable_committed_offsets
    from pyspark_eos.kafka.held_clients import Held
    from pyspark_eos.kafka.options import ClientSettings
    from pyspark_eos.sink.producer_pool import WorkerProducer, why_offsets_wait

    bootstrap = kafka_cluster3.bootstrap_servers
    source = create_topic(bootstrap, unique_name("coordinated-in"), partitions=1, replication=3)
    output = create_topic(bootstrap, unique_name("coordinated-out"), partitions=1, replication=3)
    group, transactional_id = unique_name("coordinated"), unique_name("stuck")
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})  # alive while its metadata is used
    metadata = member.consumer_group_metadata()

    def transaction(producer, value: bytes, offset: int, deadline_s: float, give_up=None) -> None:
        offsets_transaction(producer, output, value, [TopicPartition(source, 0, offset)], metadata,
                            lambda send: call_with_deadline(send, deadline_s, "send_offsets_to_transaction", give_up))

    stuck = transactional_producer(bootstrap, transactional_id, **{"transaction.timeout.ms": 60000})
    transaction(stuck, b"first", 1, 30)  # the producer now knows the group's coordinator
    admin = AdminClient({"bootstrap.servers": bootstrap})
    coordinator = admin.describe_consumer_groups([group])[group].result(30).coordinator.id
    held = Held(ClientSettings.of(bootstrap, {}, 60000))
    worker = WorkerProducer(transactional_id, stuck, os.getpid(), group_coordinator=coordinator)
    kafka_cluster3.stop_node(coordinator)
    started = time.monotonic()
    try:
        try:
            transaction(stuck, b"not stuck", 2, 60, partial(why_offsets_wait, held, worker, group))
            expected = [b"first", b"not stuck"]
        except DeadlineExceeded as error:
            # Given up for the move, not at the deadline (the control: without give_up, 60 s).
            assert f"coordinator moved from broker {coordinator}" in str(error), str(error)
            assert time.monotonic() - started < 40, str(error)
            retry = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
            retry.init_transactions(60)  # fences the stuck producer and aborts its transaction
            transaction(retry, b"retried", 2, 60)
            expected = [b"first", b"retried"]
    finally:
        held.close()
        kafka_cluster3.restart_node(coordinator)
        kafka_cluster3.wait_in_sync()
    assert [r.value for r in read_committed(bootstrap, output)] == expected
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
    committed = {(topic, 0): 7}
    assert reader.committed(group, partitions) == {**committed, (topic, 1): None}
    assert reader.committed_now(group, partitions) == committed
    coordinator = reader.admin.describe_consumer_groups([group])[group].result(30).coordinator.id

    def answers_the_commit() -> bool:
        # Until another broker leads the group's partition of __consumer_offsets and has loaded it,
        # a consumer is answered OFFSET_INVALID, the same as "never committed", which planning takes
        # for "not replayed". Any other offset would be wrong.
        answer = reader.committed_now(group, partitions)
        assert answer in (committed, {}), f"asked while node {coordinator} is down: {answer}"
        return answer == committed

    (kafka_cluster3.stop_node if stop == "clean" else kafka_cluster3.kill_node)(coordinator)
    try:
        wait_until(answers_the_commit, 90, f"the committed offset from the coordinator that follows node {coordinator}")
    finally:
        kafka_cluster3.restart_node(coordinator)
        kafka_cluster3.wait_in_sync()
    assert reader.committed_now(group, partitions) == committed


# Long enough that the broker does not abort the stalled transaction: its commit, through the
# broker's fault, decides.
TRANSACTION_TIMEOUT_MS = 60000
OUTPUT_LEADER = "output leader"
GROUP_COORDINATOR = "group coordinator"
TRANSACTION_COORDINATOR = "transaction coordinator"
# The stalled task is of the first batch, whose two write tasks (local[2]) lease the first two
# write slots of this host (the workers share the test's slots directory).
WRITE_SLOTS = 2


def _partition_for(key: str, partitions: int) -> int:
    """Kafka's partitionFor: the partition of __consumer_offsets (a group id) or of
    __transaction_state (a transactional id) that holds the key's state, abs(String.hashCode) mod
    the partitions; its leader is the key's coordinator."""
    code = 0
    for char in key:
        code = (31 * code + ord(char)) & 0xFFFFFFFF
    code = code - (1 << 32) if code >= (1 << 31) else code
    return (0 if code == -(1 << 31) else abs(code)) % partitions


def _topics(bootstrap: str) -> dict:
    """The cluster's topics, once the internal ones that hold groups and transactions exist."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def internal_topics_ready():
        topics = admin.list_topics(timeout=30).topics
        if {"__consumer_offsets", "__transaction_state"} <= set(topics):
            return topics
        group = unique_name("create-offsets-topic")
        admin.describe_consumer_groups([group])[group].exception(30)  # Kafka creates __consumer_offsets
        return None

    return wait_until(internal_topics_ready, 60, "Kafka's internal topics")


def _balanced_topics(bootstrap: str) -> dict:
    """The cluster's topics once every partition is led by its preferred replica: a broker that an
    earlier test restarted leads nothing, coordinates nothing, until an election."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def balanced():
        topics = _topics(bootstrap)
        if all(p.leader == p.replicas[0] for topic in topics.values() for p in topic.partitions.values()):
            return topics
        admin.elect_leaders(ElectionType.PREFERRED).exception(30)
        return None

    return wait_until(balanced, 60, "every partition led by its preferred replica")


@dataclass(frozen=True)
class Roles:
    """The brokers that lead the output's partitions, coordinate the group, and coordinate the
    transactions of the write slots' transactional ids."""

    output_leaders: frozenset[int]
    group_coordinator: int
    transaction_coordinators: frozenset[int]

    @classmethod
    def of(cls, topics: dict, output: str, group: str, id_prefix: str) -> "Roles":
        def coordinator(internal_topic: str, key: str) -> int:
            partitions = topics[internal_topic].partitions
            return partitions[_partition_for(key, len(partitions))].leader

        ids = [transactional_id(id_prefix, group, slots_name(), slot) for slot in range(WRITE_SLOTS)]
        return cls(frozenset(p.leader for p in topics[output].partitions.values()),
                   coordinator("__consumer_offsets", group),
                   frozenset(coordinator("__transaction_state", i) for i in ids))

    def apart(self, role: str) -> bool:
        """The group's coordinator holds ``role`` only if that is the group coordinator's, and then
        no other role: a worker's producer that sent offsets to it waits out its deadline once it
        stops (the coordinator test), so a test of another role must not stop it by chance."""
        if role == GROUP_COORDINATOR:
            return self.group_coordinator not in self.output_leaders | self.transaction_coordinators
        held = self.output_leaders if role == OUTPUT_LEADER else self.transaction_coordinators
        return self.group_coordinator not in held


def _names_apart(pipeline: Pipeline, role: str) -> tuple[str, str]:
    """A group and a transactional id prefix whose coordinators keep ``role`` apart (Roles.apart)."""
    topics = _balanced_topics(pipeline.bootstrap)
    for _ in range(1000):
        group, id_prefix = unique_name("pipeline"), unique_name("broker-fault")
        if Roles.of(topics, pipeline.output, group, id_prefix).apart(role):
            return group, id_prefix
    raise AssertionError(f"no names keep the {role} apart from the group's coordinator")


def _wait_for_the_stall(stall: faults.Stall, query_over: threading.Event) -> None:
    wait_until(lambda: stall.report() or query_over.is_set(), 180, "a write task to stall before its commit")
    assert stall.report(), "the query ended without any write task reaching the armed stall"


def _only_the_stalled_task_runs(spark) -> bool:
    # Then every transaction the pipeline has open is the stalled task's.
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds()]
    return [(s.numActiveTasks, s.numTasks - s.numCompletedTasks) for s in stages if s] == [(1, 1)]


def _held_open(pipeline: Pipeline) -> tuple[list[int], list[int]] | None:
    """Output partitions with records waiting for a commit marker, and input partitions whose
    offsets the group holds for an open transaction (UNSTABLE_OFFSET_COMMIT), as the brokers see
    them; None until there are both."""
    admin = AdminClient({"bootstrap.servers": pipeline.bootstrap})
    ends = {}
    for isolation in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        request = {TopicPartition(pipeline.output, p): OffsetSpec.latest() for p in range(2)}
        futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=30)
        ends[isolation] = {tp.partition: future.result().offset for tp, future in futures.items()}
    committed, written = ends[IsolationLevel.READ_COMMITTED], ends[IsolationLevel.READ_UNCOMMITTED]
    outputs = [p for p in range(2) if committed[p] < written[p]]
    # An AdminClient's OffsetFetch answered NOT_COORDINATOR aborts the process: find the group's
    # coordinator first.
    admin.describe_consumer_groups([pipeline.group])[pipeline.group].result(30)
    asked = [TopicPartition(pipeline.input, p) for p in range(PARTITIONS)]
    request = [ConsumerGroupTopicPartitions(pipeline.group, asked)]
    answer = admin.list_consumer_group_offsets(request, require_stable=True)[pipeline.group].result(30)
    inputs = [tp.partition for tp in answer.topic_partitions
              if tp.error is not None and tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT]
    return (outputs, inputs) if outputs and inputs else None


class BrokerFault:
    """Once a write task has stalled mid-transaction, stops the broker in ``role`` (``stop``: "hard"
    is SIGKILL, "clean" SIGTERM) and resumes the task; ``restore`` brings the broker back."""

    def __init__(self, spark, cluster, pipeline: Pipeline, role: str, stop: str, id_prefix: str):
        self.spark, self.cluster, self.pipeline = spark, cluster, pipeline
        self.role, self.stop, self.id_prefix = role, stop, id_prefix
        self.down: int | None = None

    def fire(self, stall: faults.Stall, query_over: threading.Event) -> None:
        try:
            _wait_for_the_stall(stall, query_over)
            wait_until(lambda: _only_the_stalled_task_runs(self.spark), 60, "the other tasks of the stalled batch")
            outputs, _ = wait_until(lambda: _held_open(self.pipeline), 30,
                                    "the stalled transaction's records and offsets on the brokers")
            self.down = self._broker_in_role(outputs[0])
            (self.cluster.kill_node if self.stop == "hard" else self.cluster.stop_node)(self.down)
        finally:
            stall.resume()

    def _broker_in_role(self, output_partition: int) -> int:
        pipeline = self.pipeline
        topics = _topics(pipeline.bootstrap)
        roles = Roles.of(topics, pipeline.output, pipeline.group, self.id_prefix)
        assert roles.apart(self.role), f"the roles moved since the pipeline was named: {roles}"
        if self.role == GROUP_COORDINATOR:
            admin = AdminClient({"bootstrap.servers": pipeline.bootstrap})
            described = admin.describe_consumer_groups([pipeline.group])[pipeline.group].result(30)
            assert described.coordinator.id == roles.group_coordinator, (described.coordinator, roles)
            return roles.group_coordinator
        if self.role == TRANSACTION_COORDINATOR:
            listed = transactions(pipeline.bootstrap, self.id_prefix)
            coordinators = {int(t["Coordinator"]) for t in listed if t["TransactionState"] == "Ongoing"}
            assert len(coordinators) == 1 and coordinators <= roles.transaction_coordinators, (listed, roles)
            return coordinators.pop()
        return topics[pipeline.output].partitions[output_partition].leader

    def restore(self) -> None:
        if self.down is not None:
            self.cluster.restart_node(self.down)
            self.cluster.wait_in_sync()


def _broker_fault_in_an_open_transaction(spark, cluster, tmp_path: Path, role: str, stop: str) -> Pipeline:
    """Run a pipeline whose first write task to reach its commit stalls there while the broker in
    ``role`` stops (the group's coordinator only where that is the role); the task then resumes
    and the query runs to its end with the broker down."""
    pipeline = Pipeline(cluster, tmp_path, rounds=3, replication=3)
    pipeline.group, id_prefix = _names_apart(pipeline, role)
    (local_dir,) = executor_local_dirs(spark)  # local mode: the driver's, where every worker looks
    query_over = threading.Event()
    fault = BrokerFault(spark, cluster, pipeline, role, stop, id_prefix)
    # The query runs on this thread: one started from another thread does not find the format. On
    # the way out the stall ends first (never a stalled worker left behind), then the fault's thread.
    try:
        with ThreadPoolExecutor(1) as background, \
                faults.stalled_until_exit(faults.STALL_BEFORE_COMMIT, local_dir, tmp_path) as stall:
            firing = background.submit(fault.fire, stall, query_over)
            try:
                pipeline.run(spark, stableOffsetsTimeoutMs=60000, sink_options={
                    "transactionalIdPrefix": id_prefix, "kafka.transaction.timeout.ms": TRANSACTION_TIMEOUT_MS})
            finally:
                query_over.set()
    finally:
        fault.restore()
    firing.result()
    assert fault.down is not None and stall.report("resumed"), "the broker fault did not hit the stalled task"
    return pipeline


@pytest.mark.parametrize("stop", ["hard", "clean"])
def test_a_partition_leader_lost_while_a_write_task_holds_its_transaction_open_loses_and_duplicates_nothing(
        spark, kafka_cluster3, tmp_path, stop):
    """A write task has produced its records and sent its offsets; before it asks for the commit,
    the leader of the output partition holding its records dies (SIGKILL) or shuts down (SIGTERM);
    it does not coordinate the group. The query then runs to its end with that broker down.

    What makes it pass is Kafka's replication under the sink's transactional producer: the records
    were acknowledged by every in-sync replica (a transactional producer is idempotent, so acks=all;
    the topics have three replicas, two of which must be in sync), so the new leader has them and
    the transaction coordinator writes the commit marker there. The sink only has to wait: its
    commit may take COMMIT_TIMEOUT_S, longer than the election after a SIGKILL (about ten
    seconds), and the claims topic, made with three replicas, takes the later batches' claims.
    No switch turns this off. A commit that gave up before the election fails the query here
    (local[2] retries no task); records or a marker lost with their leader show as input values
    missing from a read_committed reader of the output, or as group offsets short of the input's
    end (assert_exactly_once).
    """
    pipeline = _broker_fault_in_an_open_transaction(spark, kafka_cluster3, tmp_path, OUTPUT_LEADER, stop)
    pipeline.assert_exactly_once()


@pytest.mark.parametrize("role", [GROUP_COORDINATOR, TRANSACTION_COORDINATOR])
def test_a_coordinator_moving_while_a_write_task_holds_its_transaction_open_loses_and_duplicates_nothing(
        spark, kafka_cluster3, tmp_path, role):
    """A write task has produced its records and sent its offsets; before it asks for the commit,
    the broker coordinating the group (holding its pending offsets) or its transaction shuts down
    cleanly, and another broker loads the coordinator's partition from its replicas. The query
    then runs to its end with that broker down.

    Transaction coordinator: librdkafka finds the new coordinator for the commit, which has loaded
    the open transaction; the sink keeps the producer (rebuilding it would abort the transaction)
    and waits up to COMMIT_TIMEOUT_S. Group coordinator: the pending offsets move with the group's
    partition; the later batches' stable reads of the group's offsets renew their admin client when
    it asks the old coordinator (group_offsets.fetch_stable_commits), planning asks through a
    consumer, which follows the coordinator (offset_reader.committed_now), and every task must send
    its offsets to the new coordinator. A worker's producer that sent offsets to the old one does
    not: librdkafka 2.16 keeps waiting for the stopped broker until send_offsets_to_transaction is
    cut off at the transaction timeout. So a task replaces its worker's producer when the group's
    coordinator moved (or cannot be found) since the producer's last task (producer_pool). No
    switch turns it off; without it (tried once) the next batch's task on the old producer failed
    after 60 s with DeadlineExceeded, and the query with it (local[2] retries no task). Offsets
    lost in the move show as group offsets short of the input's end, or as a batch replayed, its
    values twice in the output (assert_exactly_once).
    """
    pipeline = _broker_fault_in_an_open_transaction(spark, kafka_cluster3, tmp_path, role, "clean")
    pipeline.assert_exactly_once()
