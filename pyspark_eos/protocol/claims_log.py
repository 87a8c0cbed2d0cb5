"""The claims topic: where plans, generation stamps, claims and releases are appended in order
(claims_records), and read back by the attempts of a plan; which topic and partition each goes
to is the layout's (claims_layout).

The driver holds a ClaimsLog (plan records, stamps); each writing worker holds ClaimsClients
(claims, releases, and reading them back). Neither producer is transactional: a claim must be
visible to every other attempt the moment it is acknowledged.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ..errors import ConfigurationError, KafkaClientError, StaleAttemptError
from ..kafka.backoff import with_retries
from ..kafka.held_clients import close_client
from ..kafka.cluster import connected
from ..kafka.options import files_explained
from .claims_layout import CLAIMS_PARTITION, CONTROL_PARTITION, PIPELINE_PARTITIONS, claims_partition, claims_topic_of
from .claims_records import Claim, parse_record, plan_value, stamp_value
from .group_stamp import GroupStamp

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0
# Claims must outlive any attempt that could still act on them; a week is far beyond Spark's
# task and transaction timeouts. An attempt whose plan's claims are gone refuses (see read_claims).
CLAIMS_RETENTION_MS = 7 * 24 * 3600 * 1000
# librdkafka wants a group.id even for a consumer that only assign()s; nothing is ever committed.
CLAIMS_READER_GROUP = "eos-kafka-claims-reader"


@dataclass(frozen=True)
class PlanRecord:
    """Stamped on every input partition of one plan: where that plan's claims start."""

    topic: str
    offset: int  # of the plan's record in the claims topic (its acknowledged copy's), layout 2: its control log
    # Where its attempts start reading claims, when that is before its own record: claims of an
    # earlier run that may still commit (progress plans, see sink/attempt_fencing).
    since: int | None = None
    # Layout 2 (claims_layout): where the plan's claims start in the pipeline's claims log, its end
    # once the plan's record was appended. None in layout 1, where they follow the plan's record.
    claims_from: int | None = None

    @property
    def split(self) -> bool:
        """Whether the plan's claims are in a claims log of their own (layout 2)."""
        return self.claims_from is not None

    @property
    def claims_partition(self) -> int:
        return claims_partition(self.split)

    @property
    def appended_before_its_tasks(self) -> tuple[str, int]:
        """A record of the topic's claims partition appended before any task of this plan ran: (topic,
        offset). Layout 1: the plan's own record; layout 2: the claims log's last record when the plan
        was made (its control log's offsets are another partition's)."""
        return (self.topic, self.offset if self.claims_from is None else self.claims_from - 1)

    def reading_start(self, not_before: int | None = None) -> int:
        """Where an attempt of this plan starts reading claims (never after the plan's claims begin)."""
        own = self.offset if self.claims_from is None else self.claims_from
        if self.since is None:
            return own
        start = self.since if not_before is None else max(self.since, not_before)
        return min(own, start)


# ------------------------------------------------------------------------------ driver side

class ClaimsLog:
    """The driver's end of the claims topic: creates it once, appends a plan record per plan and a
    stamp record per generation of the group membership; a retry may write one twice
    (claims_producer). With ``pipeline`` (a consumer group), in that pipeline's own topic
    (layout 2, claims_layout); without, in ``topic`` itself (layout 1)."""

    def __init__(self, bootstrap_servers: str, kafka_params: dict[str, str], topic: str, pipeline: str | None = None):
        self.bootstrap_servers = bootstrap_servers
        self.kafka_params = kafka_params
        self.topic = claims_topic_of(topic, pipeline)
        self.split = pipeline is not None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()  # planning and the group membership's thread both append
        self._prepare_error: Exception | None = None  # prepare()'s failure, for the first append to raise

    def open_plan(self, group_id: str, lookback_ms: int | None = None) -> PlanRecord:
        """Append a plan record; with ``lookback_ms`` its attempts also read the claims appended
        that long before it (an earlier run's, which no group generation fences)."""
        appended_ms = int(time.time() * 1000)
        offset = append(self._ready_producer(), self.topic, group_id, plan_value(group_id), CONTROL_PARTITION)
        if self.split:
            # Listed only now: every attempt of this plan claims after it, once the plan is launched.
            return PlanRecord(self.topic, offset, claims_from=log_end(self._reader(), self.topic, CLAIMS_PARTITION))
        if lookback_ms is None:
            return PlanRecord(self.topic, offset)
        return PlanRecord(self.topic, offset, self._offset_at(appended_ms - lookback_ms, offset))

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({**self.kafka_params, "bootstrap.servers": self.bootstrap_servers,
                                       "group.id": CLAIMS_READER_GROUP, "enable.auto.commit": "false"})
        return self._consumer

    def _offset_at(self, timestamp_ms: int, plan_offset: int) -> int:
        """The first claims offset appended at or after ``timestamp_ms`` (at most ``plan_offset``)."""
        return min(offset_at_time(self._reader(), self.topic, 0, timestamp_ms, plan_offset), plan_offset)

    def prepare(self) -> None:
        """Make the producer now, in the background: the membership's first stamp is appended once
        the group join ends, and a producer made only then looks up the claims topic and its
        metadata on that path. Made here, it does both while the group is joined."""
        threading.Thread(target=self._prepare_quietly, name="eos-kafka-claims-producer", daemon=True).start()

    def _prepare_quietly(self) -> None:
        with self._lock:
            try:
                self._make_producer()
            except Exception as error:  # noqa: BLE001 - the first append raises it
                # Kept for the first append rather than tried again there: each try can take the
                # request timeout twice over, and the first append runs in the group's join, whose
                # timeout would then fail the query with a message about the group, not the cause.
                log.warning("making the claims producer for %s failed: %s", self.topic, error)
                self._prepare_error = error

    def record_stamp(self, stamp: GroupStamp) -> None:
        """Append a new generation's stamp: tasks of a plan stamped with an older generation of the
        same run commit under it (a rebalance during their batch)."""
        offset = append(self._ready_producer(), self.topic, stamp.group_id, stamp_value(stamp), CONTROL_PARTITION)
        log.info("generation %d of consumer group %r recorded at %s@%d", stamp.generation, stamp.group_id,
                 self.topic, offset)

    def close(self) -> None:
        """Let go of the clients: a batch read's driver-side process outlives the read."""
        with self._lock:
            clients, self._producer, self._consumer = (self._producer, self._consumer), None, None
        for client in clients:
            if client is not None:
                close_client(client)

    def _ready_producer(self) -> Producer:
        with self._lock:
            failed, self._prepare_error = self._prepare_error, None
            if failed is not None and self._producer is None:
                raise failed  # once: a later append tries again
            return self._make_producer()

    def _make_producer(self) -> Producer:  # with self._lock held
        if self._producer is None:
            ensure_claims_topic(self.bootstrap_servers, self.kafka_params, self.topic,
                                PIPELINE_PARTITIONS if self.split else 1)
            self._producer = connected(claims_producer(self.bootstrap_servers, self.kafka_params),
                                       self.bootstrap_servers, REQUEST_TIMEOUT_S, self.topic)
        return self._producer


def ensure_claims_topic(bootstrap_servers: str, kafka_params: dict[str, str], topic: str, partitions: int = 1) -> None:
    # librdkafka's AdminClient is a producer, and a producer's metadata request asks the broker to
    # create a topic it does not have (allow.auto.create.topics): on a cluster that auto-creates,
    # the lookup would make the claims topic with the broker's defaults (replication 1, perhaps
    # several partitions) before create_topics below could make it as the protocol needs.
    with files_explained(kafka_params):
        admin = AdminClient({**kafka_params, "bootstrap.servers": bootstrap_servers,
                             "allow.auto.create.topics": "false"})
    metadata = admin.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
    if topic in metadata.topics and metadata.topics[topic].error is None:
        _check_partitions(topic, len(metadata.topics[topic].partitions), partitions)
        return
    brokers = len(metadata.brokers)
    # Each log is one partition: every claim of a plan is totally ordered against every other. An
    # acknowledged claim must survive its leader's loss (a newer attempt that misses it would not
    # fence the older one): acks=all with two in-sync replicas where the cluster has them.
    config = {"retention.ms": str(CLAIMS_RETENTION_MS), "cleanup.policy": "delete"}
    if brokers >= 3:
        config["min.insync.replicas"] = "2"
    new = NewTopic(topic, partitions, min(3, brokers), config=config)
    try:
        admin.create_topics([new], operation_timeout=REQUEST_TIMEOUT_S)[topic].result(REQUEST_TIMEOUT_S)
        log.info("created the claims topic %s (%d partition(s), replication %d)", topic, partitions, min(3, brokers))
    except KafkaException as error:
        if error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise KafkaClientError(
            f"creating the claims topic {topic!r} failed: {error.args[0]}; create it ({partitions} partition(s)) or "
            "let the pipeline's principal CREATE it (topics named after the option claimsTopic and a '.')"
        ) from error


def _check_partitions(topic: str, found: int, wanted: int) -> None:
    # A pipeline's topic with one partition (created by hand, or auto-created by a broker that does)
    # has no claims log: its attempts would append claims where nobody reads them.
    if found != wanted:
        raise ConfigurationError(
            f"the claims topic {topic!r} has {found} partition(s), and eos-kafka needs {wanted}; delete it (while "
            f"no pipeline runs) and let eos-kafka create it, or create it with {wanted} partition(s)")


def claims_producer(bootstrap_servers: str, kafka_params: dict[str, str]) -> Producer:
    """The producer of the claims topic, on the driver (plan records, generation stamps) and on the
    executors (claims, releases).

    Not idempotent: an idempotent producer's first record waits for a producer id, and
    librdkafka, when it asked while no broker connection was up (its bootstrap connection just
    dropped for the broker's own), asks again only on a 500 ms timer, which a query's first batch
    and a worker's first claim often waited out. Without idempotence a retry may write a record
    twice, which no reader minds: a plan's offset is the one its append reports; a second stamp
    names the same generation; a second copy of a claim or release names the same attempt (order
    and transactional id), and claims are taken by attempt, releases as a set. One request in
    flight keeps each producer's appends in the order they were made (a release after its claim).
    """
    with files_explained(kafka_params):
        return Producer({**kafka_params, "bootstrap.servers": bootstrap_servers, "acks": "all",
                         "enable.idempotence": False, "max.in.flight.requests.per.connection": 1, "linger.ms": 0})


def append(producer: Producer, topic: str, key: str, value: bytes, partition: int = 0,
           timeout_s: float = REQUEST_TIMEOUT_S) -> int:
    """Produce one record to ``partition`` and wait for its offset (acks=all)."""
    result: list = []
    producer.produce(topic, key=key.encode(), value=value, partition=partition,
                     on_delivery=lambda error, message: result.append((error, message)))
    deadline = time.monotonic() + timeout_s
    while not result and time.monotonic() < deadline:
        producer.poll(0.05)
    if not result:
        raise KafkaClientError(f"appending to the claims topic {topic!r} timed out after {timeout_s:.0f} s; "
                               "check that the brokers are reachable and the principal may WRITE it")
    error, message = result[0]
    if error is not None:
        raise KafkaClientError(f"appending to the claims topic {topic!r} failed: {error.str()}; "
                               "check that the principal may WRITE it")
    return message.offset()


# ---------------------------------------------------------------------------- executor side

@dataclass
class ReadCount:
    """What a worker's reads of the claims topic took: records and their bytes (the protocol's load)."""

    records: int = 0
    bytes: int = 0

class ClaimsClients:
    """A worker's claims producer and consumer, and what fencing an older attempt needs."""

    def __init__(self, bootstrap_servers: str, kafka_params: dict[str, str], group: str,
                 transaction_timeout_ms: int):
        self.bootstrap_servers = bootstrap_servers
        self.kafka_params = kafka_params
        self.group = group
        self.transaction_timeout_ms = transaction_timeout_ms
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self.read = ReadCount()

    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = claims_producer(self.bootstrap_servers, self.kafka_params)
        return self._producer

    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({
                **self.kafka_params,
                "bootstrap.servers": self.bootstrap_servers,
                # The pipeline's group, which its principal may already use; never joined: assign() only.
                # Without one (progress records) librdkafka still wants a name; nothing is committed.
                "group.id": self.group or CLAIMS_READER_GROUP,
                "enable.auto.commit": "false",
                "enable.partition.eof": "true",
                "auto.offset.reset": "error",
                "isolation.level": "read_uncommitted",
                "fetch.wait.max.ms": 10,
            })
        return self._consumer

    def close(self) -> None:
        for client in (self._producer, self._consumer):
            if client is not None:
                close_client(client)


def read_claims(consumer: Consumer, topic: str, start: int, last: int, group: str, partition: int = 0,
                counter: ReadCount | None = None) -> list["Claim | GroupStamp"]:
    """The claims, releases and stamps in the claims topic's ``partition`` from ``start`` to ``last``
    inclusive (``group``'s in a format this version does not read fail the read, claims_records)."""
    if last < start:
        raise StaleAttemptError(
            f"the claims topic {topic!r} ends at {last}, before this plan's record at {start}: it was deleted "
            "and created again since the batch was planned; refusing to commit. Restart the query"
        )
    consumer.assign([TopicPartition(topic, partition, start)])
    try:
        return _read_assigned(consumer, topic, start, last, group, counter)
    finally:
        # No background fetch at the partition's end while the worker does other work: the next
        # assign() would wait for it (up to fetch.wait.max.ms) before fetching from its own start.
        consumer.unassign()


# A client that has not seen a just-created topic answers _UNKNOWN_PARTITION until its metadata
# names it; a leader lost answers _TIMED_OUT or NOT_LEADER until the next one is elected, and
# _DESTROY_BROKER while librdkafka drops a broker the cluster's metadata no longer names.
_LOG_END_RETRIABLE = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                                KafkaError._DESTROY_BROKER})
_LOG_END_REQUEST_S = 5.0


def log_end(consumer: Consumer, topic: str, partition: int) -> int:
    """The offset after the last record of ``partition`` acknowledged to its producers (its high
    watermark), asked of its leader now."""
    tp = TopicPartition(topic, partition)
    try:
        _, end = with_retries(lambda: consumer.get_watermark_offsets(tp, _LOG_END_REQUEST_S, cached=False),
                              f"listing the end of {topic} [{partition}]", 2 * REQUEST_TIMEOUT_S,
                              on_retry=lambda _: _refresh_metadata(consumer, topic), also=_LOG_END_RETRIABLE)
    except KafkaException as error:
        raise KafkaClientError(f"listing the end of the claims topic {topic!r} (partition {partition}) failed: "
                               f"{error.args[0]}; check that the principal may DESCRIBE and READ it") from error
    return end


def offset_at_time(consumer: Consumer, topic: str, partition: int, timestamp_ms: int, default: int) -> int:
    """The first offset of ``partition`` appended at or after ``timestamp_ms`` (``default`` when none is)."""
    found = consumer.offsets_for_times([TopicPartition(topic, partition, max(timestamp_ms, 0))], REQUEST_TIMEOUT_S)[0]
    if found.error is not None:
        raise KafkaClientError(f"looking up the claims topic {topic!r} by time failed: {found.error}; "
                               "check that the principal may DESCRIBE and READ it")
    return default if found.offset < 0 else found.offset


def lookback_start(consumer: Consumer, topic: str, partition: int, lookback_ms: int, default: int) -> int:
    """The first offset of ``partition`` appended in the last ``lookback_ms`` (``default`` when none was)."""
    return offset_at_time(consumer, topic, partition, int(time.time() * 1000) - lookback_ms, default)


def _refresh_metadata(consumer: Consumer, topic: str) -> None:
    """Ask for the topic's metadata: its partitions' leaders as they are now."""
    try:
        consumer.list_topics(topic, timeout=_LOG_END_REQUEST_S)
    except KafkaException as error:
        log.debug("refreshing the metadata of %s: %s", topic, error)


def read_to_end(consumer: Consumer, topic: str, partition: int, start: int, group: str,
                counter: ReadCount | None = None) -> list["Claim | GroupStamp"]:
    """The records of ``partition`` from ``start`` to its end as listed now: every record whose
    append was acknowledged before this call."""
    end = log_end(consumer, topic, partition)
    return read_claims(consumer, topic, start, end - 1, group, partition, counter) if end > start else []


def await_record(consumer: Consumer, topic: str, start: int, group: str, wanted: Callable[[object], bool],
                 timeout_s: float, partition: int = 0):
    """The first record from ``start`` on for which ``wanted`` is true, or None after ``timeout_s``."""
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not _skippable(message.error(), topic, start):
                record = parse_record(message.value(), message.offset(), group)
                if wanted(record):
                    return record
        return None
    finally:
        consumer.unassign()


def _read_assigned(consumer: Consumer, topic: str, start: int, last: int, group: str,
                   counter: ReadCount | None) -> list:
    records: list = []
    position = start
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while position <= last:
        if time.monotonic() > deadline:
            raise KafkaClientError(f"reading the claims topic {topic!r} from {start} to {last} timed out after "
                                   f"{REQUEST_TIMEOUT_S:.0f} s (at {position})")
        # poll, not consume(n, timeout): consume waits out its timeout unless n records arrive.
        message = consumer.poll(0.5)
        if message is None or _skippable(message.error(), topic, start):
            continue
        position = message.offset() + 1
        if counter is not None and message.offset() <= last:
            counter.records += 1
            counter.bytes += len(message.value() or b"")
        record = parse_record(message.value(), message.offset(), group) if message.offset() <= last else None
        if record is not None:
            records.append(record)
    return records


def _skippable(error: KafkaError | None, topic: str, start: int) -> bool:
    """True for an error to read past; raises for one that ends the read."""
    if error is None:
        return False
    if error.code() == KafkaError._AUTO_OFFSET_RESET:  # the plan's offset is below the log start
        raise StaleAttemptError(
            f"reading the claims topic {topic!r} from this plan's record at {start} failed ({error.str()}): the "
            "claims are gone (retention?), so this attempt cannot show that it is the newest; refusing to commit. "
            "Restart the query to re-plan the batch"
        )
    if error.code() == KafkaError._PARTITION_EOF or error.retriable():
        return True
    if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
        # librdkafka looks up the coordinator of the group.id a consumer must have; without the
        # pipeline's group this one names a placeholder and only reads (assign(), no offsets): a
        # principal without rights on that group may still read the claims.
        return True
    raise KafkaClientError(f"reading the claims topic {topic!r} failed: {error.str()}; check that the principal "
                           "may READ it")
