"""The sink's transactions: producers per worker slot, ownership (G4) and fencing (G3)."""
from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient

from pyspark_eos.protocol.claims_log import ClaimsLog
from pyspark_eos.protocol.commit_metadata import partition_metadata
from pyspark_eos.errors import UnassignedPartitionError
from pyspark_eos.source.group_membership import GroupMembership
from pyspark_eos.protocol.offset_range import OffsetRange
from pyspark_eos.sink.options import SinkOptions
from pyspark_eos.kafka.options import DEFAULT_CLAIMS_TOPIC
from pyspark_eos.protocol.handover import Provenance, record_read
from pyspark_eos.sink.records import KafkaRecord, columns_from_records
from pyspark_eos.sink.transactional_id_factory import slots_name
from pyspark_eos.sink.transactional_writer import write_task
from pyspark_eos.testing import fault_injection as faults
from pyspark_eos.testing.local_spark import executor_local_dirs

from .kafka_tools import (
    committed_offsets,
    create_topic,
    mixed_transactions,
    read_committed,
    transactional_ids,
    transactional_producer,
    unique_name,
    wait_until,
    write_transactions,
)
from .spark_tools import eos_pipeline


INPUT_PARTITIONS = 8


def ids_per_worker_slot(ids: set[str], prefix: str, group: str, topic: str) -> None:
    # In local mode the workers are this host's, and a task takes the lowest slot no live worker
    # keeps: slots 0 to n-1. Two tasks wrote at once, so two slots at least; a worker keeps its slot
    # from task to task, so fewer ids than one batch's tasks.
    assert ids == {f"{prefix}.{group}.{slots_name()}.{slot}" for slot in range(len(ids))}
    assert 2 <= len(ids) < INPUT_PARTITIONS, ids


def test_transactional_ids_per_worker_slot(spark, kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    source = create_topic(bootstrap, unique_name("wide"), partitions=INPUT_PARTITIONS)
    sink = create_topic(bootstrap, unique_name("out"))
    write_transactions(bootstrap, source, mixed_transactions(partitions=INPUT_PARTITIONS, rounds=5))
    prefix, group = unique_name("ids"), unique_name("g")
    writer = eos_pipeline(spark, bootstrap, source, sink, group,
                          sink_options={"transactionalIdPrefix": prefix},
                          startingOffsets="earliest", maxOffsetsPerTrigger=24, minRecordsPerPartition=1)

    def another_task_committed() -> bool:  # task 0 cannot have: it is stalled before producing
        return any(offset >= 0 for offset in committed_offsets(bootstrap, group, source, INPUT_PARTITIONS).values())

    # Batch 0's task 0 stalls once its transaction has begun (its id taken).
    with faults.stalled_until_exit(faults.STALL_BEFORE_PRODUCE, sorted(executor_local_dirs(spark))[0], tmp_path,
                                   partition=0) as stall:
        # Started from this thread: started from another one, Spark did not find the eos-kafka
        # format (DATA_SOURCE_NOT_FOUND).
        query = writer.option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
        # A task that commits while task 0 holds its id proves two writers at once.
        wait_until(lambda: not query.isActive or (stall.report() and another_task_committed()), 120,
                   "another task to commit while the first is stalled in its transaction")
        assert query.isActive, "the query ended before two of its tasks were seen writing at once"
    assert query.awaitTermination(300)
    assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 3  # 8 tasks per batch
    ids_per_worker_slot(transactional_ids(bootstrap, prefix), prefix, group, source)
    # The driver's check at start initialized one producer under the tasks' prefix, and no other.
    assert transactional_ids(bootstrap, prefix, probe=True) - transactional_ids(bootstrap, prefix) == {
        f"{prefix}.{group}.driver-check.0"}
    written = sorted(r.value for r in read_committed(bootstrap, sink))
    assert written == sorted(r.value for r in read_committed(bootstrap, source, partitions=INPUT_PARTITIONS))
    assert len(written) == 3 * INPUT_PARTITIONS * 2  # rounds 0, 2 and 3 of 5 committed, 2 records per partition


class OtherMember:
    """A plain consumer in the pipeline's group that keeps its share of the partitions."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str):
        self.assigned: list = []
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "group.protocol": protocol})
        self.consumer.subscribe([topic], on_assign=lambda c, parts: self.assigned.__init__(parts))
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.2)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


# A member of the new consumer protocol (KIP-848) first makes the group a consumer group, which the
# source's classic member then joins as such a group's classic member: the same share, generation
# and refusals as beside a classic member.
@pytest.fixture(params=["classic", "consumer"])
def shared_group(kafka, request):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("owned"), partitions=2)
    group = unique_name("g")
    other = OtherMember(bootstrap, group, topic, request.param)
    wait_until(lambda: len(other.assigned) == 2, 60, "the other member to own both partitions")
    membership = GroupMembership(bootstrap, {}, group, topics=[topic]).start()
    stamp = wait_until(lambda: _split(membership), 60, "a rebalance that splits the partitions")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a destroyed client never answers
    described = admin.describe_consumer_groups([group])[group].result(30)
    assert described.type == {"classic": ConsumerGroupType.CLASSIC, "consumer": ConsumerGroupType.CONSUMER}[request.param]
    yield bootstrap, topic, group, stamp, membership
    membership.stop()
    other.close()


def _split(membership):
    stamp = membership.stamp()
    return stamp if len(stamp.assignment) == 1 else None


def write_as_task(bootstrap: str, group: str, output: str, provenance: Provenance, attempt: int):
    fencing = ClaimsLog(bootstrap, {}, DEFAULT_CLAIMS_TOPIC).open_plan(group)
    record_read(attempt, dataclasses.replace(provenance, fencing=fencing))
    options = SinkOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": output, "kafka.group.id": group,
                                 "transactionalIdPrefix": unique_name("g4")})
    return write_task(columns_from_records([KafkaRecord(output, None, None, b"result", None)]), options)


def test_a_plan_with_a_partition_of_another_member_is_refused(shared_group, monkeypatch):
    bootstrap, topic, group, stamp, _ = shared_group
    output = create_topic(bootstrap, unique_name("out"))
    (owned,) = stamp.assignment
    foreign = (topic, 1 - owned[1])
    ranges = tuple(OffsetRange(t, p, 0, 0 + 1) for t, p in sorted([owned, foreign]))
    monkeypatch.setattr("pyspark_eos.sink.task_info.TaskInfo.current",
                        classmethod(lambda cls: cls(9001, 0, "0", "q")))
    with pytest.raises(UnassignedPartitionError, match=rf"{foreign[0]}-{foreign[1]}\[0,1\).*not assigned to"):
        write_as_task(bootstrap, group, output, Provenance(ranges, stamp), 9001)
    assert read_committed(bootstrap, output) == []
    assert set(committed_offsets(bootstrap, group, topic, 2).values()) == {-1001}


def test_planning_does_not_wait_for_a_rebalance_to_bring_partitions_another_member_holds(shared_group):
    _, topic, _, stamp, membership = shared_group
    (owned,) = stamp.assignment
    foreign = (topic, 1 - owned[1])
    started = time.monotonic()
    planned = membership.stamp_holding([owned, foreign], timeout=600)
    # No rebalance can bring the other member's partition: the plan goes on (its tasks refuse
    # that partition, as above) instead of waiting out the timeout.
    assert planned.assignment == {owned} and time.monotonic() - started < 60


def test_offsets_committed_by_a_newer_generation_are_not_overwritten(shared_group, monkeypatch):
    bootstrap, topic, group, stamp, _ = shared_group
    output = create_topic(bootstrap, unique_name("out"))
    (owned,) = stamp.assignment
    newer = partition_metadata(stamp.generation + 1, "7", "other-query")
    producer = transactional_producer(bootstrap)
    producer.begin_transaction()
    metadata = Consumer({"bootstrap.servers": bootstrap, "group.id": group}).consumer_group_metadata()
    producer.send_offsets_to_transaction([TopicPartition(owned[0], owned[1], 0, metadata=newer)], metadata, 30)
    producer.commit_transaction(30)
    monkeypatch.setattr("pyspark_eos.sink.task_info.TaskInfo.current",
                        classmethod(lambda cls: cls(9002, 0, "0", "q")))
    with pytest.raises(UnassignedPartitionError, match="newer generation"):
        write_as_task(bootstrap, group, output, Provenance((OffsetRange(*owned, 0, 1),), stamp), 9002)
    assert read_committed(bootstrap, output) == []


@pytest.mark.parametrize("headers", [None, [("h", b"v")]], ids=["no-headers", "headers"])
def test_a_full_local_queue_is_waited_out_and_every_record_is_written_once_in_order(kafka, headers):
    bootstrap = kafka.bootstrap_servers
    output = create_topic(bootstrap, unique_name("small-queue"))
    options = SinkOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": output,
                                 "transactionalIdPrefix": unique_name("queue"),
                                 "kafka.queue.buffering.max.messages": "50", "kafka.linger.ms": "20"})
    records = [KafkaRecord(output, None, b"%d" % i, b"v%d" % i, headers) for i in range(3000)]
    message = write_task(columns_from_records(records), options)
    assert (message.outcome, message.records) == ("committed", 3000)
    # commit_transaction() returns before the markers reach the partition: poll for the records.
    written = wait_until(lambda: [r for r in [read_committed(bootstrap, output)] if len(r) == len(records)],
                         60, "every record to become visible")[0]
    assert [(r.key, r.value, r.headers) for r in written] == [(r.key, r.value, tuple(r.headers or ())) for r in records]
