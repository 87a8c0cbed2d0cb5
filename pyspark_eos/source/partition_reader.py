"""Executor side of the source: reads a task's offset ranges with read_committed into Arrow batches.

A range [start, end) is done when the consumer's position reaches ``end``, or when the partition
end is reached at or past it. Counting records would never finish: transaction markers and
aborted records take offsets that a read_committed consumer never returns, so a range that
starts or ends on a marker, or holds an aborted transaction, has fewer records than offsets.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from ..errors import DataLossError, KafkaClientError, MalformedRecordError
from ..kafka.schema import arrow_schema
from ..protocol.offset_range import OffsetRange
from .consumer_pool import lent_consumer

log = logging.getLogger(__name__)

# librdkafka timestamp types -> Spark's timestampType column (0 CreateTime, 1 LogAppendTime).
_TIMESTAMP_TYPES = {1: 0, 2: 1}


# At most this many records of a partition wait fetched in a task's consumer: enough to keep the
# task busy while librdkafka fetches more (10,000 records of 100 B are tens of ms of reading), and
# what a task may fetch past the end of its ranges.
PREFETCH_RECORDS = 10_000


@dataclass(frozen=True)
class ReaderSettings:
    """What an executor needs to read ranges; pickled into every task."""

    consumer_config: dict[str, str]
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_s: float = 120.0
    batch_records: int = 8192
    columns: tuple[str, ...] | None = None  # the Kafka columns to yield, in this order (None: all)


def consumer_config(bootstrap_servers: str, kafka_params: dict[str, str], group_id: str | None) -> dict[str, str]:
    return {
        # librdkafka postpones a partition's next fetch by this much whenever its prefetch queue is
        # over a threshold (default 1000 ms): a task reading its ranges as fast as it can waited
        # for it again and again (benchmarks/JOURNAL.md); a kafka.fetch.queue.backoff.ms option
        # overrides it.
        "fetch.queue.backoff.ms": "50",
        **kafka_params,
        "bootstrap.servers": bootstrap_servers,
        # Only assign() is used: the group is never joined and nothing is committed from here.
        "group.id": group_id or "eos-kafka-source-reader",
        "isolation.level": "read_committed",
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "true",
        "auto.offset.reset": "error",
    }


_TIMESTAMPED = {"timestamp", "timestampType"}  # the columns made from Message.timestamp()


class _Columns:
    """The messages of one Arrow batch in Spark's Kafka schema (or the columns asked for), turned
    into columns at once.

    A column is built by one pass of a C method over the batch's messages (``map(Message.value,
    ...)``) instead of a Python loop appending a row's values to each column: per record, the
    reader's Python work was most of its time."""

    def __init__(self, include_headers: bool, columns: tuple[str, ...] | None = None):
        full = arrow_schema(include_headers)
        self.schema = full if columns is None else pa.schema([full.field(name) for name in columns])
        self._timestamped = bool(_TIMESTAMPED & set(self.schema.names))
        self.messages: list[Message] = []

    def __len__(self) -> int:
        return len(self.messages)

    def append(self, message: Message) -> None:
        self.messages.append(message)

    def to_batch(self) -> pa.RecordBatch:
        messages, self.messages = self.messages, []
        timestamps = list(map(Message.timestamp, messages)) if self._timestamped else []
        columns = {
            "key": lambda: list(map(Message.key, messages)),
            "value": lambda: list(map(Message.value, messages)),
            "topic": lambda: list(map(Message.topic, messages)),
            "partition": lambda: list(map(Message.partition, messages)),
            "offset": lambda: list(map(Message.offset, messages)),
            "timestamp": lambda: [ms * 1000 if kind else None for kind, ms in timestamps],
            "timestampType": lambda: [_TIMESTAMP_TYPES.get(kind) for kind, _ in timestamps],
            "headers": lambda: [[{"key": k, "value": v} for k, v in headers] if headers else None
                                for headers in map(Message.headers, messages)],
        }
        try:
            arrays = [pa.array(columns[field.name](), type=field.type) for field in self.schema]
        except (OverflowError, pa.ArrowInvalid) as failed:
            malformed = _out_of_range(messages)
            if malformed is None:
                raise
            raise malformed from failed
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


# Spark holds a timestamp as int64 microseconds; Kafka's is int64 milliseconds, and a producer that
# wrote another unit there (nanoseconds) makes a record no timestamp column can hold. Spark's
# connector fails on it too (SPARK-56243).
_MAX_MS = (2 ** 63 - 1) // 1000


def _out_of_range(messages: list[Message]) -> MalformedRecordError | None:
    for message in messages:
        kind, ms = message.timestamp()
        if kind and not -_MAX_MS <= ms <= _MAX_MS:
            return MalformedRecordError(
                f"{message.topic()}-{message.partition()} offset {message.offset()}: timestamp {ms} is not a time in "
                f"milliseconds Spark can hold (up to {_MAX_MS}): its producer set another unit (nanoseconds). Fix "
                "the producer; to read on, read the other columns only (a .schema(...) without timestamp, as in "
                f"\"key binary, value binary\"), or start a new checkpoint past offset {message.offset()} "
                "(startingOffsets, or the group's offset moved there with kafka-consumer-groups.sh --reset-offsets "
                "and startingOffsets=group)")
    return None


def read_range(offset_range: OffsetRange, settings: ReaderSettings) -> Iterator[pa.RecordBatch]:
    """Yield the committed records of ``offset_range`` as Arrow record batches."""
    return read_ranges((offset_range,), settings)


def read_ranges(ranges: tuple[OffsetRange, ...], settings: ReaderSettings) -> Iterator[pa.RecordBatch]:
    """Yield the committed records of a task's ranges (one per partition) as Arrow record batches.

    One consumer reads them all at once, the worker's from an earlier task when it has one
    (consumer_pool): a consumer connects and starts fetching before its first record, and a task
    reads several small partitions (input_partition).
    """
    todo = {r.key: r for r in ranges if r.start < r.end}
    if not todo:
        return
    with lent_consumer(_with_prefetch(settings.consumer_config, todo.values())) as consumer:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in todo.values()])
        yield from _consume(consumer, todo, {key: r.start for key, r in todo.items()}, settings)


def _with_prefetch(config: dict[str, str], ranges) -> dict[str, str]:
    """``config`` with librdkafka's prefetch per partition sized to the task's ranges (unless a
    kafka.queued.min.messages option sets it).

    librdkafka keeps fetching a partition until 100,000 of its records (or 64 MiB) wait in the
    consumer's queue, and knows nothing of a range's end: while the task's Python side worked
    through its ranges, its consumer fetched and parsed records past them, which the next batch's
    task fetched again (benchmarks/JOURNAL.md). Rounded up to a power of two, so that the tasks of
    similar batches share their worker's pooled consumer (consumer_pool)."""
    largest = max((r.end - r.start for r in ranges), default=1)
    return {"queued.min.messages": str(min(1 << max(0, largest - 1).bit_length(), PREFETCH_RECORDS)), **config}


def _skip_removed(consumer: Consumer, offset_range: OffsetRange, position: int, settings: ReaderSettings) -> int:
    """Where to read on from after Kafka found ``position`` out of range (or DataLossError).

    Asked only when a fetch finds its offset gone, not for every range: a watermark request per
    range cost each read task a round trip per partition before its first record."""
    tp = TopicPartition(offset_range.topic, offset_range.partition)
    low, high = consumer.get_watermark_offsets(tp, timeout=30)
    if low <= position:
        raise KafkaClientError(f"reading {offset_range} failed: offset {position} is outside the partition's "
                               f"offsets [{low}, {high}); was the topic deleted and created again?")
    message = (f"{offset_range}: offsets [{position}, {min(low, offset_range.end)}) were removed from "
               f"Kafka before they were read (earliest available: {low}), most likely by retention")
    if settings.fail_on_data_loss:
        raise DataLossError(message + ". Set failOnDataLoss=false to skip them and go on")
    log.warning("data loss (failOnDataLoss=false, going on): %s", message)
    if low < offset_range.end:  # the fetcher stopped at the error: assign the partition again, from low
        consumer.incremental_unassign([tp])
        consumer.incremental_assign([TopicPartition(offset_range.topic, offset_range.partition, low)])
    return low


def _next_messages(consumer: Consumer, most: int) -> list:
    """What the consumer has fetched, up to ``most``; else wait up to 100 ms for the next message.

    consume(n, timeout) returns only when n messages arrived or the timeout passed, and a range
    rarely holds exactly n records (markers and aborted records take offsets too): every read
    would idle for a whole timeout, a fixed cost on each task of each micro-batch."""
    return consumer.consume(num_messages=most, timeout=0) or consumer.consume(num_messages=1, timeout=0.1)


def _consume(consumer: Consumer, ranges: dict, starts: dict, settings: ReaderSettings) -> Iterator[pa.RecordBatch]:
    columns = _Columns(settings.include_headers, settings.columns)
    positions = {key: starts[key] for key in ranges}
    lowest_end = min(r.end for r in ranges.values())
    last_progress = time.monotonic()
    while unfinished := [key for key, position in positions.items() if position < ranges[key].end]:
        messages = _next_messages(consumer, max(1, min(settings.batch_records - len(columns), 10_000)))
        before = sum(positions[key] for key in unfinished)
        if _all_records_before(messages, lowest_end):
            # The common case, without a Python step per record: each message is a record inside
            # its range (below every range's end), and the positions come from the consumer below.
            columns.messages.extend(messages)
            messages = ()
        for message in messages:
            key = (message.topic(), message.partition())
            if message.error() is None:
                offset = message.offset()
                if offset < ranges[key].end:
                    columns.append(message)
                # Offsets only grow within a partition: no max() here, on every record.
                positions[key] = offset + 1
            elif key in positions:
                positions[key] = _at_error(consumer, message, ranges[key], positions[key], settings)
            elif message.error().code() != KafkaError.GROUP_AUTHORIZATION_FAILED:  # a client-level error
                raise KafkaClientError(f"reading {', '.join(map(str, ranges.values()))} failed: {message.error()}")
            # else: librdkafka looks up the coordinator of the group.id a consumer must have, though
            # this one only fetches (no join, no offsets, no commit): a principal with READ on the
            # topics alone is refused that lookup, which reading does not need.
        for key, position in _positions(consumer, unfinished).items():
            positions[key] = max(positions[key], position)
        _pause_finished(consumer, ranges, positions, unfinished)
        if sum(positions[key] for key in unfinished) > before:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > settings.poll_timeout_s:
            stuck = ", ".join(f"{ranges[key]} at offset {positions[key]}" for key in unfinished)
            raise KafkaClientError(
                f"reading {stuck} made no progress for {settings.poll_timeout_s:g} s (option "
                "kafkaConsumer.pollTimeoutMs); check that the partitions' leaders are reachable from this executor"
            )
        if len(columns) >= settings.batch_records:
            yield columns.to_batch()
    if len(columns):
        yield columns.to_batch()


def _all_records_before(messages: list, end: int) -> bool:
    return bool(messages) and not any(map(Message.error, messages)) and max(map(Message.offset, messages)) < end


def _pause_finished(consumer: Consumer, ranges: dict, positions: dict, unfinished: list) -> None:
    """Stop fetching partitions that reached their range's end while others are still read."""
    done = [TopicPartition(*key) for key in unfinished if positions[key] >= ranges[key].end]
    if done:
        consumer.pause(done)


def _at_error(consumer: Consumer, message, offset_range: OffsetRange, position: int, settings: ReaderSettings) -> int:
    """How far a partition's error event shows it has been read; raises for a failure."""
    error = message.error()
    if error.code() == KafkaError._PARTITION_EOF:
        # At the partition end: everything before this offset has been delivered.
        return max(position, message.offset())
    if error.code() == KafkaError._AUTO_OFFSET_RESET:
        return _skip_removed(consumer, offset_range, position, settings)
    raise KafkaClientError(f"reading {offset_range} failed: {error}")


def _positions(consumer: Consumer, keys: list) -> dict:
    """The consumer's positions of ``keys`` where it has one (a partition not fetched yet has none)."""
    found = consumer.position([TopicPartition(topic, partition) for topic, partition in keys])
    return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}
