"""Model step 2: a task's records into its transaction, the loop that costs the sink per record."""
from __future__ import annotations

import itertools
from typing import Iterable, Iterator, Protocol

from confluent_kafka import KafkaException

from ..kafka import fault_hooks as faults
from .records import RecordColumns, record_size
from .task_failures import DeliveryErrors, FailureContext, TopicCheck, explain_local_refusal
from .task_progress import RecordDigest


class FirstRecord(Protocol):
    """What a task does around its first record, the one that opens its transaction at the broker."""

    def before_first_record(self) -> None: ...

    def after_first_record(self) -> None: ...


def produce_records(producer, batches: Iterable[RecordColumns], topics: TopicCheck, delivery: DeliveryErrors,
                    context: FailureContext, digest: RecordDigest | None, first: FirstRecord) -> int:
    """produce() every record of ``batches``; ``digest`` (progress records) counts them in. Returns
    how many were handed to the producer."""
    count = 0
    for columns in batches:
        topics.require(columns.topic_names())
        if digest is not None:
            digest.add(columns)
        rows = columns.rows()
        if count == 0 and columns.values:  # the fault hook's "mid-produce" is after the first record
            first.before_first_record()
            _produce(producer, itertools.islice(rows, 1), columns, delivery, context)
            first.after_first_record()
            faults.stall_point(faults.STALL_MID_PRODUCE)
        _produce(producer, rows, columns, delivery, context)
        count += len(columns.values)
        producer.poll(0)  # serve delivery reports (failures only) once per batch
    return count


def _produce(producer, rows: Iterator[tuple], columns: RecordColumns, delivery: DeliveryErrors,
             context: FailureContext) -> None:
    """produce() ``rows`` of ``columns``; a refusal about the record itself is raised explained."""
    try:
        produce_rows(producer, rows, columns.headers is not None)
    except KafkaException as error:
        delivery.unsent = columns
        topic, value, key, partition, headers = error.row
        explain_local_refusal(error, context, topic, record_size(value, key, headers), partition)
        raise


def produce_rows(producer, rows: Iterator[tuple], with_headers: bool) -> None:
    """produce() each row: the loop is the sink's cost per record, so it holds nothing else.
    A full local queue (BufferError) is waited out for the row it refused; a KafkaException
    carries that row as ``row`` to explain it."""
    produce = producer.produce
    topic = value = key = partition = headers = None
    try:
        while True:
            try:
                if with_headers:
                    for topic, value, key, partition, headers in rows:
                        produce(topic, value, key, partition, headers=headers)
                else:
                    for topic, value, key, partition, headers in rows:
                        produce(topic, value, key, partition)
                return
            except BufferError:  # the local queue is full: let deliveries drain it, then go on
                _produce_when_queue_has_room(producer, topic, value, key, partition, headers)
    except KafkaException as error:
        error.row = (topic, value, key, partition, headers)
        raise


def _produce_when_queue_has_room(producer, topic, value, key, partition, headers) -> None:
    while True:
        producer.poll(0.1)
        try:
            producer.produce(topic, value, key, partition, headers=headers)
            return
        except BufferError:
            continue
