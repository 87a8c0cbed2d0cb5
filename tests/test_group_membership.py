"""Fencing layer 1: the driver-side reader's static group membership, stamped into every plan."""
from __future__ import annotations

import json
import logging

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pyspark_eos.errors import FencedError
from pyspark_eos.source.batch_reader import KafkaBatchReader
from pyspark_eos.kafka.group_metadata import parse_group_metadata
from pyspark_eos.source.group_membership import instance_id_for
from pyspark_eos.source.micro_batch_stream import KafkaMicroBatchStream
from pyspark_eos.source.options import SourceOptions

from .kafka_tools import (create_topic, group_members, transactional_producer, unique_name, wait_until,
                          write_transactions)


def test_group_metadata_bytes_are_parsed():
    metadata = b"CGMDv2:\x05\x00\x00\x00grp\x00grp.m-1\x00\x00grp.inst\x00"
    assert parse_group_metadata(metadata) == (5, "grp", "grp.m-1", "grp.inst")
    assert parse_group_metadata(b"CGMDv2:\xff\xff\xff\xffg\x00\x00\x01") == (-1, "g", "", None)


@pytest.fixture
def stream(kafka):
    """Builds driver-side readers as Spark would, and stops their group membership afterwards."""
    readers = []

    def build(topic: str, group: str, starting: str = "earliest") -> KafkaMicroBatchStream:
        options = SourceOptions.parse({"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic,
                                       "kafka.group.id": group, "startingOffsets": starting}, streaming=True)
        readers.append(KafkaMicroBatchStream(options))
        return readers[-1]

    yield build
    for reader in readers:
        reader.stop()


def plan_one_batch(reader: KafkaMicroBatchStream):
    start = reader.initialOffset()
    return reader.partitions(start, reader.latestOffset(start, None))


def test_a_query_run_has_one_start_however_often_spark_asks(kafka, stream):
    # Spark asks initialOffset() twice as a query starts; records arriving in between must not
    # move a "latest" start (Spark's own Kafka source keeps its initial offsets too).
    topic = create_topic(kafka.bootstrap_servers, unique_name("one-start"), partitions=2)
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(0, b"a"), (1, b"b")])])
    reader = stream(topic, unique_name("one-start"), starting="latest")
    first = reader.initialOffset()
    write_transactions(kafka.bootstrap_servers, topic, [(True, [(0, b"c"), (1, b"d")])])
    assert reader.initialOffset() == first == {topic: {"0": 2, "1": 2}}


def try_commit(producer, topic: str, metadata: bytes, offset: int = 1) -> KafkaError | None:
    producer.begin_transaction()
    producer.produce(topic, value=b"out", partition=0)
    try:
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], metadata, 30)
        producer.commit_transaction(30)
        return None
    except KafkaException as error:
        producer.abort_transaction(30)
        return error.args[0]


def test_a_second_instance_of_the_pipeline_fences_the_first(kafka, stream):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("fence"), partitions=2)
    write_transactions(bootstrap, topic, [(True, [(0, b"a"), (1, b"b")])])
    group = unique_name("pipeline")

    first = plan_one_batch(stream(topic, group))
    stamp_a = first[0].group
    assert stamp_a.instance_id == instance_id_for(group, topic) and stamp_a.generation >= 1
    assert stamp_a.assignment == {(topic, 0), (topic, 1)}
    assert all(partition.group == stamp_a for partition in first)

    second_reader = stream(topic, group)
    stamp_b = plan_one_batch(second_reader)[0].group
    assert stamp_b.instance_id == stamp_a.instance_id and stamp_b.member_id != stamp_a.member_id

    producer = transactional_producer(bootstrap)
    refused = try_commit(producer, topic, stamp_a.metadata)
    assert refused is not None and refused.code() == KafkaError.FENCED_INSTANCE_ID
    assert refused.txn_requires_abort() and not refused.fatal()
    assert try_commit(producer, topic, stamp_b.metadata) is None


def test_the_sources_commit_of_a_completed_batch_sends_nothing_behind_a_transaction_holding_its_end(kafka, stream):
    # A narrow pipeline's task commits its batch's end in its transaction; EndTxn is answered before
    # the marker reaches the group, so a plain read by the driver can still see the older offset. A
    # plain commit sent then is appended after the task's pending offset, and the coordinator keeps
    # the later record: landing late, it could win over the next batch's transaction too and move
    # the group's offset back (docs/model/group_commit.pml, MUTANT_UNSTABLE_COMMIT_READ). The
    # driver reads those ends stably: it waits (here until it gives up) and commits nothing. Run
    # with the plain read alone, the driver's commit is what the group keeps.
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("behind"))
    write_transactions(bootstrap, topic, [(True, [(0, b"a")])])
    group = unique_name("pipeline")
    reader = stream(topic, group)
    [partition] = plan_one_batch(reader)
    [planned] = partition.ranges
    task = transactional_producer(bootstrap)
    task.begin_transaction()
    task.produce(topic, value=b"out", partition=0)
    task.send_offsets_to_transaction([TopicPartition(topic, 0, planned.end, metadata='{"batch": 0}')],
                                     partition.group.metadata, 30)
    reader.commit({topic: {"0": planned.end}})  # Spark completed the batch; the task's marker is not written
    task.commit_transaction(30)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    committed = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])])[group].result(30).topic_partitions
    assert [(tp.offset, json.loads(tp.metadata)["batch"]) for tp in committed] == [(planned.end, 0)]


def test_the_fenced_reader_stops_planning_with_an_error_that_says_what_happened(kafka, stream):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("fence2"))
    group = unique_name("pipeline")
    first_reader = stream(topic, group)
    plan_one_batch(first_reader)
    plan_one_batch(stream(topic, group))

    def fenced():
        try:
            first_reader.latestOffset(first_reader.initialOffset(), None)
        except FencedError as error:
            return error
        return None

    error = wait_until(fenced, 60, "the first reader to learn it was fenced", interval=0.5)
    assert group in str(error) and "another instance of the same pipeline" in str(error)


def test_a_query_restarted_with_another_subscription_makes_the_earlier_runs_member_leave(kafka):
    # A static member does not leave its group when the query stops, and the broker keeps it for
    # session.timeout.ms: restarted with another subscription (so another instance id), the query's
    # join waited for the earlier run's member (a rebalance waits for every member it knows).
    bootstrap = kafka.bootstrap_servers
    first = create_topic(bootstrap, unique_name("resubscribed"), partitions=2)
    second = create_topic(bootstrap, unique_name("resubscribed"), partitions=1)
    write_transactions(bootstrap, first, [(True, [(0, b"a"), (1, b"b")])])
    group = unique_name("resubscribed")

    def reader(subscribe: str) -> KafkaMicroBatchStream:
        # A session longer than the join's 60 s: a member left behind outlasts the join.
        return KafkaMicroBatchStream(SourceOptions.parse(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": subscribe, "kafka.group.id": group,
             "startingOffsets": "earliest", "kafka.session.timeout.ms": "120000"}, streaming=True))

    earlier = reader(first)
    plan_one_batch(earlier)
    earlier.stop()
    later = reader(f"{first},{second}")
    try:
        planned = plan_one_batch(later)
        assert {(first, 0), (first, 1), (second, 0)} <= planned[0].group.assignment
    finally:
        later.stop()


@pytest.fixture
def batch_read(kafka):
    """Plans batch reads as Spark's driver-side planner would, all in this process."""
    readers = []

    def plan(topic: str, group: str) -> tuple[KafkaBatchReader, list]:
        options = SourceOptions.parse({"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic,
                                       "kafka.group.id": group, "startingOffsets": "group"}, streaming=False)
        readers.append(KafkaBatchReader(options))
        return readers[-1], readers[-1].partitions()

    yield plan
    for reader in readers:
        reader.planner.close()


def logged(caplog, *parts: str) -> bool:
    """Whether the source logged a message containing every one of ``parts``."""
    return any(all(part in record.getMessage() for part in parts) for record in caplog.records)


def membership_taken_over(caplog) -> bool:
    return logged(caplog, "was taken over by a later reader of the group")


def test_a_batch_reads_member_leaves_the_group_once_its_write_committed_every_range(kafka, batch_read, caplog):
    # Spark tells a batch read nothing when its job ends, and a static member stays in its group
    # after its client goes: the member held the group until the next read fenced it.
    caplog.set_level(logging.DEBUG, logger="pyspark_eos.source")
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("batch-leave"))
    write_transactions(bootstrap, topic, [(True, [(0, b"a"), (0, b"b")])])
    group = unique_name("batch-leave")
    _, planned = batch_read(topic, group)
    stamp, (offset_range,) = planned[0].group, planned[0].ranges
    assert group_members(bootstrap, group) == [stamp.instance_id]

    producer = transactional_producer(bootstrap)
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset_range.end - 1)], stamp.metadata, 30)
    producer.commit_transaction(30)
    # Part of the range committed: the write goes on, so the member must have seen it and stayed.
    wait_until(lambda: logged(caplog, f"committed {topic}-0={offset_range.end - 1},", "its member stays"), 30,
               "the membership to find part of its range committed")
    assert group_members(bootstrap, group) == [stamp.instance_id]

    assert try_commit(producer, topic, stamp.metadata, offset_range.end) is None
    wait_until(lambda: group_members(bootstrap, group) == [], 30, "the batch read's member to leave the group")
    wait_until(lambda: logged(caplog, "is committed: its member left the group"), 30, "the member's leave")
    assert not membership_taken_over(caplog)


def test_a_later_batch_read_of_the_group_closes_the_earlier_reads_membership_instead_of_fencing_it(
        kafka, batch_read, caplog):
    caplog.set_level(logging.INFO, logger="pyspark_eos.source")
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("batch-again"))
    write_transactions(bootstrap, topic, [(True, [(0, b"a")])])
    group = unique_name("batch-again")
    batch_read(topic, group)
    _, planned = batch_read(topic, group)

    assert logged(caplog, f"closing the membership of an earlier batch read of consumer group '{group}'")
    assert not membership_taken_over(caplog)
    assert group_members(bootstrap, group) == [planned[0].group.instance_id]
    assert try_commit(transactional_producer(bootstrap), topic, planned[0].group.metadata) is None


class _Answer:
    def __init__(self, outcome):
        self.outcome = outcome

    def result(self, timeout=None):
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class _LoadingCoordinator:
    """An AdminClient whose DescribeGroups is answered ``errors`` first, then a description."""

    def __init__(self, *errors: int):
        self.answers = [KafkaException(KafkaError(code)) for code in errors] + ["description"]
        self.asked = 0

    def describe_consumer_groups(self, groups, request_timeout=None):
        self.asked += 1
        return {groups[0]: _Answer(self.answers.pop(0))}


def test_the_join_waits_for_a_loading_coordinator_which_would_cost_librdkafkas_join_two_seconds(monkeypatch):
    from pyspark_eos.kafka import backoff
    from pyspark_eos.source.group_rebalance import described_once_loaded

    admin, slept = _LoadingCoordinator(KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS), []
    monkeypatch.setattr(backoff.time, "sleep", slept.append)
    assert described_once_loaded(admin, "g", 10.0) == "description"
    assert admin.asked == 3 and 0 < sum(slept) < 0.5


@pytest.mark.parametrize("code, wait_s", [(KafkaError.GROUP_AUTHORIZATION_FAILED, 10.0),
                                          (KafkaError.NOT_COORDINATOR, 0.0)])
def test_a_coordinator_that_refuses_or_is_not_ready_in_time_is_not_waited_for(code, wait_s):
    from pyspark_eos.source.group_rebalance import described_once_loaded

    admin = _LoadingCoordinator(code, code)
    with pytest.raises(KafkaException):
        described_once_loaded(admin, "g", wait_s)
    assert admin.asked == 1
