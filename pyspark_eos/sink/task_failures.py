"""What a failed write task says: which record Kafka refused and why (a record too large, and which
limit; a topic that does not exist), and what the other tasks of its batch left visible.

librdkafka reports refused records to delivery callbacks and refuses a produce request (many
records) whole, so the record a report names is any of them; the explanations here are built on
the failure path only, never per record.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import ClusterMetadata, ConfigResource, ConfigSource

from ..errors import ConfigurationError, EosKafkaError, FencedError, TransactionFailedError
from ..kafka.cluster import create_command, settled_metadata, unknown_topic
from ..kafka.held_clients import Held
from .producer_pool import admin_for
from .records import RecordColumns, SizedRecord, record_size

log = logging.getLogger(__name__)

DESCRIBE_TIMEOUT_S = 10.0
# librdkafka's default message.max.bytes: the producer refuses a larger record itself.
PRODUCER_MESSAGE_MAX_BYTES = 1_000_000
# At most what a record batch adds to one record's key, value and headers (its header, varints).
_BATCH_FRAMING_BYTES = 100
_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
# The broker refuses a TxnOffsetCommit of a static member whose instance id a later member took:
# another driver of the same pipeline joined the group while this batch was written.
_FENCED_INSTANCE = ("Kafka refused this task's offsets (FENCED_INSTANCE_ID): another member with this query's group "
                    "instance id joined the consumer group since the batch was planned. Most likely that is another "
                    "instance of the same pipeline (or, for a batch read, a later read of the same group), and this "
                    "one can no longer commit: stop the other instance or this one, then restart the one you keep. "
                    "If no other runs, this query's own membership rejoined the group (its session timed out): "
                    "restart the query")
_UNKNOWN_TOPIC = (KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART)
# A producer that initialized the same transactional id later ended this one's transaction: the
# same write slot's next attempt, or another instance of the pipeline (its ids are the same).
_FENCED_PRODUCER_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
_FENCED_PRODUCER = ("Kafka fenced this task's producer ({kafka}): another producer initialized its transactional id "
                    "since. Either a later attempt of this task did (this attempt is a zombie, and Spark discards its "
                    "result: nothing to do), or another instance of the same pipeline writes under the same "
                    "transactional ids: stop the other instance or this one, then restart the one you keep")


METADATA_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class FailureContext:
    """What a failed task's explanation draws on: the worker's clients and settings, and what the
    task's commit promises about the records of the batch's other tasks."""

    held: Held
    streaming: bool
    commits_input_offsets: bool
    records_progress: bool

    @property
    def bootstrap_servers(self) -> str:
        return self.held.settings.bootstrap_servers

    @property
    def producer_limit(self) -> int:
        return int(self.held.settings.kafka_params.get("message.max.bytes", PRODUCER_MESSAGE_MAX_BYTES))


class TopicCheck:
    """Fails a task at once, naming the topic, when its records are addressed to a topic that does
    not exist, rather than after librdkafka's topic.metadata.propagation.max.ms. A topic that
    exists costs one metadata request per worker; after that a set lookup per batch."""

    def __init__(self, held: Held, producer: Producer):
        # Topics this worker has seen the cluster hold: each is looked up once per configuration.
        self.known = held.fact("existing topics", set)
        self.producer = producer
        self.bootstrap_servers = held.settings.bootstrap_servers

    def require(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self.known:
                self._look_up(name)

    def _look_up(self, topic: str) -> None:
        metadata = settled_metadata(lambda: _producer_metadata(self.producer, topic), topic)
        if metadata is not None and unknown_topic(metadata, topic):
            raise ConfigurationError(missing_topic(topic, self.bootstrap_servers))
        self.known.add(topic)


def _producer_metadata(producer: Producer, topic: str) -> ClusterMetadata | None:
    # The producer's own metadata request, so that a cluster that creates topics on first use
    # creates this one now, as producing would. No answer at all is left to producing, which
    # reports it.
    try:
        return producer.list_topics(topic=topic, timeout=METADATA_TIMEOUT_S)
    except KafkaException:
        return None


def missing_partition(topic: str, partition: int) -> str:
    return (f"a record is addressed to partition {partition} of topic {topic!r}, which has no such partition: "
            "correct the 'partition' column (null lets the producer choose), or add partitions to the topic "
            "(kafka-topics.sh --alter --partitions)")


def missing_topic(topic: str, bootstrap_servers: str) -> str:
    return (f"records are addressed to topic {topic!r}, which does not exist at {bootstrap_servers} (and the "
            f"brokers do not create topics on first use): create it, e.g. {create_command(bootstrap_servers, [topic])}, "
            "or correct the 'topic' column or option that names it")


@dataclass(frozen=True)
class _Refusal:
    error: KafkaError
    size: int
    topic: str
    partition: int | None


class DeliveryErrors:
    """What happened to the running task's records that Kafka did not take: they explain an
    abortable commit failure better than the commit's own error. The producers report failed
    deliveries only, to ``producer_pool.delivery_failures``. The broker refuses a produce request
    (many records) whole, so the first refused record is any of them: the largest one is kept too."""

    def __init__(self):
        self.first: _Refusal | None = None
        self.largest: SizedRecord | None = None
        self.unsent: RecordColumns | None = None  # the batch that produce() stopped in

    def __call__(self, error, message) -> None:
        if error is None:
            return
        record = (record_size(message.value(), message.key(), message.headers()), message.topic(), message.partition())
        self.largest = max(self.largest or record, record, key=_size)
        # Records purged by our own abort are not a cause, they are its consequence.
        if self.first is None and error.code() not in _PURGED:
            self.first = _Refusal(error, *record)

    def largest_record(self) -> SizedRecord | None:
        """The largest record this task handed to the producer, or was about to."""
        known = [r for r in (self.largest, self.unsent.largest() if self.unsent else None) if r is not None]
        return max(known, key=_size, default=None)


def _size(record: SizedRecord) -> int:
    return record[0]


def explain_local_refusal(error: KafkaException, context: FailureContext, topic: str, size: int,
                          partition: int) -> None:
    """Raise what produce() refused, explained, when it is about the record itself."""
    code = error.args[0].code()
    if code == KafkaError.MSG_SIZE_TOO_LARGE:  # librdkafka checks its own limit before queueing
        raise TransactionFailedError(
            f"a record of {size} bytes (value, key and headers) to {_where(topic, partition)} is larger than the "
            f"producer takes: its message.max.bytes is {context.producer_limit} bytes, framing included. "
            "Raise the sink's kafka.message.max.bytes (and the topic's max.message.bytes, which the broker "
            "enforces), or make the records smaller") from error
    if code in _UNKNOWN_TOPIC:
        raise ConfigurationError(missing_topic(topic, context.bootstrap_servers)) from error
    if code == KafkaError._UNKNOWN_PARTITION:
        raise ConfigurationError(missing_partition(topic, partition)) from error


def _where(topic: str, partition: int | None) -> str:
    return topic if partition is None or partition < 0 else f"{topic}-{partition}"


def explain(error: Exception, where: str, delivery: DeliveryErrors, context: FailureContext) -> Exception:
    """The error a failed task raises: ``where`` (task, transactional id, input), the cause, and
    what the batch's other tasks left visible."""
    if isinstance(error, KafkaException):
        kind, cause = _kafka_cause(error, delivery, context)
    else:
        kind, cause = type(error) if isinstance(error, EosKafkaError) else TransactionFailedError, str(error)
    return kind(f"{where}: {cause}. The transaction was aborted: none of this task's records are visible. "
                f"{_other_tasks(context)}")


def _kafka_cause(error: KafkaException, delivery: DeliveryErrors, context: FailureContext) -> tuple[type, str]:
    refused = delivery.first
    if refused is None and error.args[0].code() == KafkaError.FENCED_INSTANCE_ID:
        return FencedError, _FENCED_INSTANCE
    if refused is None and error.args[0].code() in _FENCED_PRODUCER_CODES:
        return FencedError, _FENCED_PRODUCER.format(kafka=error.args[0].str())
    if refused is None:
        return TransactionFailedError, error.args[0].str()
    if refused.error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        largest = delivery.largest_record() or (refused.size, refused.topic, refused.partition)
        return TransactionFailedError, _too_large_for_topic(refused, largest, context)
    if refused.error.code() in _UNKNOWN_TOPIC:
        return ConfigurationError, missing_topic(refused.topic, context.bootstrap_servers)
    if refused.error.code() == KafkaError._UNKNOWN_PARTITION:
        return ConfigurationError, missing_partition(refused.topic, refused.partition)
    return TransactionFailedError, (f"a record of {refused.size} bytes to {_where(refused.topic, refused.partition)} "
                                    f"was refused: {refused.error.str()}")


def _too_large_for_topic(refused: _Refusal, largest: SizedRecord, context: FailureContext) -> str:
    # The broker checks a whole record batch against the limit, not each record.
    size, topic, partition = largest
    limit = _topic_size_limit(context.held, refused.topic)
    text = (f"Kafka refused records to {_where(refused.topic, refused.partition)} as too large (MSG_SIZE_TOO_LARGE): "
            f"{_limit_text(refused.topic, limit)}, and the largest of this task's records so far was {size} bytes "
            f"(value, key and headers), to {_where(topic, partition)}")
    raise_limit = (f"raise the topic's limit (kafka-configs.sh --bootstrap-server {context.bootstrap_servers} --alter "
                   f"--entity-type topics --entity-name {refused.topic} --add-config max.message.bytes=<bytes>; "
                   f"above {context.producer_limit} bytes raise the sink's kafka.message.max.bytes too)")
    if limit is not None and size + _BATCH_FRAMING_BYTES <= limit[0]:
        return (f"{text}: no record is too large alone, but librdkafka batches records and the broker refuses a "
                f"batch above the limit whole. Set the sink's kafka.batch.size below the limit, or {raise_limit}")
    return f"{text}. Make the records smaller, or {raise_limit}"


def _limit_text(topic: str, limit: tuple[int, bool] | None) -> str:
    if limit is None:
        return (f"a record batch exceeded topic {topic}'s max.message.bytes (or the broker's message.max.bytes, "
                "which applies when the topic does not set it)")
    limit_bytes, own = limit
    whose = "its max.message.bytes" if own else "the broker's message.max.bytes; the topic sets no max.message.bytes"
    return f"topic {topic} takes record batches of up to {limit_bytes} bytes ({whose})"


def _topic_size_limit(held: Held, topic: str) -> tuple[int, bool] | None:
    """The topic's max.message.bytes and whether the topic sets it (else it is the broker's
    message.max.bytes), or None when the cluster does not tell (e.g. no DESCRIBE_CONFIGS)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        futures = admin_for(held).describe_configs([resource], request_timeout=DESCRIBE_TIMEOUT_S)
        entry = next(iter(futures.values())).result(timeout=DESCRIBE_TIMEOUT_S)["max.message.bytes"]
        return int(entry.value), entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    except Exception as error:  # only an explanation is lost: the task fails with what Kafka said
        log.info("could not read max.message.bytes of topic %s: %s", topic, error)
        return None


def _other_tasks(context: FailureContext) -> str:
    # One transaction per task, not per batch: the tasks that finished first stay committed.
    streaming = context.streaming
    unit = "batch" if streaming else "write"
    committed = f"Other tasks of this {unit} may already have committed: their records stay visible, and "
    if context.commits_input_offsets:
        again = "a replay of the batch" if streaming else "a rerun from the group's offsets"
        return f"{committed}{again} will not write them again (their input offsets are committed with them)"
    if streaming and context.records_progress:
        return f"{committed}a replay of the batch will not write them again (their progress is committed with them)"
    if context.records_progress:
        return (f"{committed}a rerun under the same txnAppId and txnVersion, or Spark's replay of the foreachBatch "
                "batch this write runs in, will not write them again (their progress is committed with them); a "
                "rerun without either writes them again")
    return (f"{committed}writing the same input again writes them again (without kafka.group.id the sink commits "
            "no input offsets)")
