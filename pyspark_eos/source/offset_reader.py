"""Driver-side questions to Kafka about offsets: which partitions, where they begin and end.

"Latest" is the last stable offset (LSO): the first offset of the oldest still-open transaction,
or the high watermark when none is open. A read_committed consumer cannot go past it, so a
planned range never ends inside an undecided transaction. All questions go through one
AdminClient kept for the life of the driver-side reader process; the question asked every batch
about the group's committed offsets goes through a consumer (see committed_now).
"""
from __future__ import annotations

import logging
import time
from typing import Iterable

from confluent_kafka import OFFSET_INVALID, Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ..errors import ConfigurationError, KafkaClientError
from ..kafka.cluster import create_command, first_contact, reachable_admin, unreachable_error
from ..kafka.group_offsets import fetch_stable_committed_offsets
from ..kafka.backoff import LEADERSHIP_CODES, error_code, is_retriable, with_retries
from .options import SourceOptions

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]
REQUEST_TIMEOUT_S = 30.0
# One ListOffsets request: a leader answers in milliseconds, so one that has not after this long
# went to a broker that stopped (or through a client that lost track of it), and is asked again.
LIST_OFFSETS_REQUEST_TIMEOUT_S = 10.0
# Answers after which the admin client is replaced: it names the wrong leader (or an old leader
# epoch), or its request went unanswered. librdkafka's admin client kept asking an old leader for
# minutes after its broker stopped.
# librdkafka's answer to a ListOffsets while no partition has a leader it knows ("No leaders
# found"): what the only broker's restart looks like. The client that said it kept saying it for
# a minute after the broker was back.
NO_LEADERS = KafkaError._NOENT
STALE_CLIENT_CODES = LEADERSHIP_CODES | {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, NO_LEADERS}


def _answered(answered: list[TopicPartition] | None) -> Offsets | None:
    if answered is None or any(tp.error is not None for tp in answered):
        return None
    return {(tp.topic, tp.partition): tp.offset for tp in answered if tp.offset >= 0}


class KafkaOffsetReader:
    def __init__(self, options: SourceOptions):
        self.options = options
        self._admin: AdminClient | None = None
        self._group_readers: dict[str, Consumer] = {}  # by isolation level

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = reachable_admin(self.options.kafka, self.options.bootstrap_servers,
                                          self.options.connect_timeout_ms / 1000)
        return self._admin

    def ensure_reachable(self) -> None:
        """Fail within connectTimeoutMs, saying what to check, when no broker answers: before a
        request of another client (the group membership's join) waits its own, longer timeout."""
        _ = self.admin

    def topic_partitions(self) -> list[TopicPartitionKey]:
        """The partitions the subscription selects now, sorted; new partitions show up here."""
        subscription = self.options.subscription
        if subscription.kind == "assign":
            return list(subscription.assigned)
        # Asked as at the query's first contact: a cluster that went away is waited for, up to
        # connectTimeoutMs, and then named.
        metadata = first_contact(self.admin, self.options.bootstrap_servers, self._cluster_wait_s)
        found = sorted(
            (topic.topic, partition)
            for topic in metadata.topics.values()
            if topic.error is None and subscription.matches(topic.topic)
            for partition in topic.partitions
        )
        if subscription.kind == "subscribe":
            missing = set(subscription.topics) - {topic for topic, _ in found}
            if missing:
                raise ConfigurationError(
                    f"subscribed topic(s) {', '.join(sorted(missing))} do not exist at "
                    f"{self.options.bootstrap_servers}; create them (e.g. "
                    f"{create_command(self.options.bootstrap_servers, sorted(missing))}) or fix the subscribe option"
                )
        return found

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> Offsets:
        return self._list_offsets({tp: OffsetSpec.earliest() for tp in partitions}, "earliest")

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> Offsets:
        """Last stable offsets (read_committed)."""
        return self._list_offsets({tp: OffsetSpec.latest() for tp in partitions}, "latest")

    def for_timestamps(self, timestamps: dict[TopicPartitionKey, int]) -> Offsets:
        """First offset with a timestamp at or after the given one; -1 where there is none."""
        return self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()}, "timestamp")

    def committed(self, group: str, partitions: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int | None]:
        """The group's committed offsets, waiting out open transactions (G5)."""
        return fetch_stable_committed_offsets(self.admin, group, partitions, self.options.stable_offsets_timeout_ms,
                                              renew=self._renewed_admin)

    def committed_now(self, group: str, partitions: list[TopicPartitionKey]) -> Offsets:
        """The group's committed offsets now, not waiting for open transactions: a partition that
        one holds has its previous commit; one the group never committed is left out, and so is
        every partition while the group's coordinator is unreachable (librdkafka then answers
        OFFSET_INVALID, as for a partition never committed).

        Asked through a consumer, which follows the coordinator from broker to broker as part of
        its job: an AdminClient's coordinator request still pending when the coordinator's broker
        died made librdkafka abort the driver's reader process (the query died), and a long-lived
        one waited out its timeout batch after batch once the coordinator had moved.
        """
        answered = self._ask_committed(group, partitions)
        return {(tp.topic, tp.partition): tp.offset for tp in answered or () if tp.error is None and tp.offset >= 0}

    def committed_answer(self, group: str, partitions: list[TopicPartitionKey]) -> Offsets | None:
        """committed_now, or None unless every partition was answered (left out: never committed)."""
        return _answered(self._ask_committed(group, partitions))

    def committed_stable_answer(self, group: str, partitions: list[TopicPartitionKey],
                                timeout_s: float) -> Offsets | None:
        """committed_answer once no open transaction holds an offset of ``partitions`` pending,
        waiting up to ``timeout_s`` for that; None when the wait gave up or a partition was not
        answered."""
        return _answered(self._ask_committed(group, partitions, "read_committed", timeout_s))

    def _ask_committed(self, group: str, partitions: list[TopicPartitionKey], isolation: str = "read_uncommitted",
                       timeout_s: float = REQUEST_TIMEOUT_S) -> list[TopicPartition] | None:
        try:
            return self._group_reader(group, isolation).committed(
                [TopicPartition(topic, partition) for topic, partition in partitions], timeout=timeout_s)
        except KafkaException as error:
            log.warning("consumer group %r: no committed offsets (%s)", group, error.args[0])
            return None

    def _group_reader(self, group: str, isolation: str) -> Consumer:
        if isolation not in self._group_readers:
            # Never subscribes, so never joins the group. librdkafka asks for stable offsets (and
            # waits while open transactions hold them) only under read_committed.
            self._group_readers[isolation] = Consumer({
                **self.options.kafka, "bootstrap.servers": self.options.bootstrap_servers, "group.id": group,
                "isolation.level": isolation, "enable.auto.commit": "false",
                "enable.auto.offset.store": "false"})
        return self._group_readers[isolation]

    @property
    def _cluster_wait_s(self) -> float:
        """How long planning waits for brokers that stopped answering, or partitions without a
        leader, before the query fails: the bound of the query's first contact."""
        return self.options.connect_timeout_ms / 1000

    def _list_offsets(self, request: dict[TopicPartitionKey, OffsetSpec], what: str) -> Offsets:
        if not request:
            return {}
        deadline = time.monotonic() + self._cluster_wait_s
        try:
            # No request outlives the wait: an unanswered one (a network that drops everything) ends then.
            return with_retries(
                lambda: self._list_offsets_once(request, min(LIST_OFFSETS_REQUEST_TIMEOUT_S,
                                                             deadline - time.monotonic())),
                f"listing {what} offsets", timeout_s=self._cluster_wait_s, on_retry=self._forget_stale_client,
                also={NO_LEADERS})
        except KafkaException as error:
            if is_retriable(error) or error_code(error) == NO_LEADERS:  # still failing at the end of the wait
                raise unreachable_error(self.options.bootstrap_servers, self._cluster_wait_s) from error
            raise KafkaClientError(
                f"listing the {what} offsets of {sorted(request)} failed: {error.args[0]}; "
                "check that the topics exist and the principal may DESCRIBE them"
            ) from error

    def _list_offsets_once(self, request: dict[TopicPartitionKey, OffsetSpec], timeout_s: float) -> Offsets:
        futures = self.admin.list_offsets(
            {TopicPartition(topic, partition): spec for (topic, partition), spec in request.items()},
            isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=max(timeout_s, 0.5),
        )
        offsets = {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
        unanswered = sorted(key for key, offset in offsets.items() if offset == OFFSET_INVALID)
        if unanswered:
            # Seen right after a partition's leader stopped: librdkafka answers OFFSET_INVALID
            # without an error for the partitions it sent to the old leader.
            raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE,
                                            f"no offset returned for {unanswered} (their leader moved)"))
        return offsets

    def _renewed_admin(self) -> AdminClient:
        self._admin = None
        return self.admin

    def _forget_stale_client(self, error: KafkaException) -> None:
        if error_code(error) in STALE_CLIENT_CODES and self._admin is not None:
            log.info("asking again with a new admin client (%s)", error.args[0])
            self._admin = None
