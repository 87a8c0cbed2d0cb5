"""Checking a pipeline's result with a plain Kafka consumer, independent of eos-kafka's reader.

Used by the example pipeline's report and by the tests: a confluent-kafka consumer with
read_committed, reading each partition until its position (or the partition end it reports)
reaches the last stable offset. Offsets have gaps (transaction markers, aborted records), so
records are never counted to decide that a partition is done.

A producer's ``commit_transaction`` returns once the transaction coordinator has logged the
decision; the markers that move each partition's last stable offset are written after that. A
read right after a write can therefore meet one partition whose stable offset already covers the
transaction and another whose marker is still on its way: the reader first waits, briefly, for
the stable offsets to reach the high watermarks it saw, and reads up to where they stand then (a
transaction a test leaves open keeps its partition back).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def last_stable_offsets(bootstrap: str, topic: str, partitions: int, admin: AdminClient | None = None) -> dict[int, int]:
    return _end_offsets(bootstrap, topic, partitions, admin, IsolationLevel.READ_COMMITTED)


def high_watermarks(bootstrap: str, topic: str, partitions: int, admin: AdminClient | None = None) -> dict[int, int]:
    return _end_offsets(bootstrap, topic, partitions, admin, IsolationLevel.READ_UNCOMMITTED)


def _end_offsets(bootstrap: str, topic: str, partitions: int, admin: AdminClient | None,
                 isolation: IsolationLevel) -> dict[int, int]:
    admin = admin or AdminClient({"bootstrap.servers": bootstrap})
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=30)
    return {tp.partition: future.result().offset for tp, future in futures.items()}


def held_partitions(bootstrap: str, topic: str, partitions: int, admin: AdminClient | None = None
                    ) -> dict[int, tuple[int, int]]:
    """The partitions an open transaction holds back now: (last stable offset, high watermark) of
    each whose read_committed end is short of its end."""
    admin = admin or AdminClient({"bootstrap.servers": bootstrap})
    stable = last_stable_offsets(bootstrap, topic, partitions, admin)
    high = high_watermarks(bootstrap, topic, partitions, admin)
    return {p: (stable[p], high[p]) for p in high if stable[p] < high[p]}


# Markers follow a commit within milliseconds on a healthy broker; the wait's bound is what a
# read of a partition that a test holds open pays.
MARKERS_WAIT_SECONDS = 5.0


def settled_stable_offsets(bootstrap: str, topic: str, partitions: int,
                           wait: float = MARKERS_WAIT_SECONDS) -> dict[int, int]:
    """The last stable offsets once they reach the high watermarks seen first, or after ``wait``
    seconds: the transactions committed before the call are then visible on every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    high = high_watermarks(bootstrap, topic, partitions, admin)
    deadline = time.monotonic() + wait
    while True:
        stable = last_stable_offsets(bootstrap, topic, partitions, admin)
        if all(stable[p] >= high[p] for p in high) or time.monotonic() > deadline:
            return stable
        time.sleep(0.05)


def read_committed(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 60.0) -> list[Record]:
    """Every committed record of ``topic``, in partition order."""
    ends = settled_stable_offsets(bootstrap, topic, partitions)
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"eos-kafka-check-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[Record] = []
    eof_at: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while not _reached(consumer, topic, ends, eof_at):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read_committed of {topic} did not reach {ends} in {timeout:.0f} s")
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    eof_at[message.partition()] = message.offset()
                continue
            records.append(Record(message.topic(), message.partition(), message.offset(),
                                  message.key(), message.value(), tuple(message.headers() or ())))
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))


def _reached(consumer: Consumer, topic: str, ends: dict[int, int], eof_at: dict[int, int]) -> bool:
    """Done when the position, or the partition end seen, is at or past the last stable offset."""
    positions = consumer.position([TopicPartition(topic, p) for p in ends])
    return all(max(tp.offset, eof_at.get(tp.partition, -1)) >= ends[tp.partition] for tp in positions)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int,
                      require_stable: bool = True, admin: AdminClient | None = None) -> dict[int, int]:
    """The group's committed offsets; -1001 where it never committed. ``require_stable`` waits
    for offsets pending in an open transaction (else those partitions show their last commit)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = admin or AdminClient({"bootstrap.servers": bootstrap})
    _wait_for_coordinator(admin, group)
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]
    result = admin.list_consumer_group_offsets(request, require_stable=require_stable)[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def _wait_for_coordinator(admin: AdminClient, group: str, timeout: float = 60.0) -> None:
    """librdkafka crashes the process when an AdminClient's OffsetFetch is answered NOT_COORDINATOR
    (issue #5040), as it is while a new broker loads the group's coordinator: a DescribeGroups,
    which takes that answer safely, goes first until it succeeds (an admin client's errors do not
    say whether they are retriable: each one is tried again until the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.describe_consumer_groups([group], request_timeout=10)[group].result()
            return
        except KafkaException as error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
