"""Reading a consumer group's committed offsets, stably (KIP-447's PENDING_TRANSACTION).

While a transaction that called ``send_offsets_to_transaction`` for the group is open, the
broker answers an OffsetFetch with ``require_stable`` with UNSTABLE_OFFSET_COMMIT (error 88) for
the partitions it holds. The committed offset it would otherwise return is stale: the open
transaction is about to replace it (commit) or not (abort). Reading it anyway is how a restarted
pipeline re-processes or skips records, so we back off until the transaction resolves.

librdkafka's ``Consumer.committed()`` under read_committed retries this forever with an infinite
default timeout; ``AdminClient.list_consumer_group_offsets(require_stable=True)`` does not retry,
which lets the back-off be bounded, jittered and logged here.
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from .errors import KafkaClientError, PendingTransactionError

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
NO_COMMITTED_OFFSET = None


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off with jitter: initial, initial*factor, ... capped at maximum."""

    initial_s: float = 0.1
    maximum_s: float = 5.0
    factor: float = 2.0
    jitter: float = 0.25

    def delays(self, rng: random.Random) -> Iterable[float]:
        delay = self.initial_s
        while True:
            yield delay * (1 + rng.uniform(-self.jitter, self.jitter))
            delay = min(delay * self.factor, self.maximum_s)


@dataclass(frozen=True)
class Committed:
    """A committed offset (None: the group never committed the partition) and its metadata string."""

    offset: int | None
    metadata: str


def fetch_committed_once(admin, group: str, partitions: list[TopicPartitionKey],
                         request_timeout: float = 30.0) -> tuple[dict[TopicPartitionKey, Committed], list[TopicPartitionKey]]:
    """One stable OffsetFetch: (what is committed, partitions held by an open transaction)."""
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in partitions])]
    try:
        result = admin.list_consumer_group_offsets(request, require_stable=True,
                                                   request_timeout=request_timeout)[group].result()
    except KafkaException as error:
        raise KafkaClientError(
            f"fetching the committed offsets of consumer group {group!r} failed: {error.args[0]}; "
            "check that the brokers are reachable and that the principal may DESCRIBE the group"
        ) from error
    offsets: dict[TopicPartitionKey, Committed] = {}
    unstable: list[TopicPartitionKey] = []
    for tp in result.topic_partitions:
        key = (tp.topic, tp.partition)
        if tp.error is not None and tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT:
            unstable.append(key)
        elif tp.error is not None:
            raise KafkaClientError(f"fetching the committed offset of {key} for group {group!r} failed: {tp.error}")
        else:
            offset = tp.offset if tp.offset >= 0 else NO_COMMITTED_OFFSET
            offsets[key] = Committed(offset, tp.metadata or "")
    return offsets, unstable


def fetch_stable_committed_offsets(admin, group: str, partitions: list[TopicPartitionKey],
                                   timeout_ms: int) -> dict[TopicPartitionKey, int | None]:
    commits = fetch_stable_commits(admin, group, partitions, timeout_ms)
    return {key: committed.offset for key, committed in commits.items()}


def fetch_stable_commits(
    admin,
    group: str,
    partitions: list[TopicPartitionKey],
    timeout_ms: int,
    backoff: Backoff = Backoff(),
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> dict[TopicPartitionKey, Committed]:
    """What the group has committed, once no open transaction holds any of the partitions.

    Waits with exponential, jittered back-off for at most ``timeout_ms`` (the writers'
    transaction timeout plus a margin by default: the broker aborts a transaction left open by a
    dead writer after its timeout), then raises PendingTransactionError.
    """
    if not partitions:
        return {}
    deadline = clock() + timeout_ms / 1000
    delays = backoff.delays(rng or random.Random())
    attempt = 0
    while True:
        offsets, unstable = fetch_committed_once(admin, group, partitions)
        if not unstable:
            if attempt:
                log.info("group %r: pending transaction resolved after %d retries; offsets are stable", group, attempt)
            return offsets
        remaining = deadline - clock()
        if remaining <= 0:
            raise _pending_error(group, unstable, timeout_ms)
        attempt += 1
        delay = min(next(delays), remaining)
        log.warning(
            "group %r: committed offsets of %s are held by an open transaction (UNSTABLE_OFFSET_COMMIT); "
            "retry %d in %.2f s, giving up in %.0f s", group, _names(unstable), attempt, delay, remaining,
        )
        sleep(delay)


def _names(partitions: list[TopicPartitionKey]) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition in sorted(partitions))


def _pending_error(group: str, unstable: list[TopicPartitionKey], timeout_ms: int) -> PendingTransactionError:
    return PendingTransactionError(
        f"the committed offsets of consumer group {group!r} for {_names(unstable)} are still held by an "
        f"open transaction after {timeout_ms / 1000:.0f} s. Most likely a writer of this group (another "
        "running instance of the pipeline, or one that crashed) has an open transaction; it will be "
        "aborted when its transaction.timeout.ms passes. Stop the other instance or wait, then restart; "
        "raise stableOffsetsTimeoutMs if your transactions legitimately run longer"
    )
