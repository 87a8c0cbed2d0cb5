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

import concurrent.futures
import logging
import random
import time
from dataclasses import dataclass
from typing import Callable

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from ..errors import KafkaClientError, PendingTransactionError
from . import fault_hooks as faults
from .backoff import Backoff, error_code, is_retriable

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
# Answers that mean the client asked a broker that is not (or no longer) the group's coordinator,
# or one that is gone: a request to a stopped broker times out.
COORDINATOR_MOVED_CODES = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                     KafkaError._TIMED_OUT, KafkaError._TRANSPORT})
# One request of a stable read: the coordinator answers in milliseconds, so one that has not after
# this long is gone, and the read asks again (with a new client) while its deadline allows.
STABLE_READ_REQUEST_TIMEOUT_S = 5.0
NO_COMMITTED_OFFSET = None
# How long librdkafka itself may take over a request to a group's coordinator; see coordinator_answer.
_LIBRDKAFKA_COORDINATOR_TIMEOUT_S = 600.0


def coordinator_answer(request: Callable[[float], dict], group: str, timeout_s: float):
    """The answer for ``group`` of an AdminClient request to its coordinator, ``request(timeout)``,
    awaited ``timeout_s``; past it, a KafkaException _TIMED_OUT as librdkafka's own would be.

    librdkafka (2.16) aborts the whole process (``rdkafka_queue.h: rd_kafka_enq_once_del_source_return:
    Assertion `eonce->refcnt > 0' failed``) when such a request times out inside librdkafka while
    the coordinator's broker stops or comes back, and the client then stopped answering coordinator
    requests at all. Both were seen within a few restarts of a lone broker while requests timed
    out in librdkafka, and neither with librdkafka's timeout far away and the wait bounded here. A
    request left behind ends when the broker answers or the client is closed (callers renew a
    client whose request went unanswered), at the latest at librdkafka's timeout.
    """
    future = request(_LIBRDKAFKA_COORDINATOR_TIMEOUT_S)[group]
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no answer from the coordinator of group {group!r} "
                                        f"in {timeout_s:g} s")) from None


@dataclass(frozen=True)
class Committed:
    """A committed offset (None: the group never committed the partition) and its metadata string."""

    offset: int | None
    metadata: str


@dataclass(frozen=True)
class FetchAttempt:
    """One stable OffsetFetch: what is committed, the partitions an open transaction holds, and a
    retriable error of the whole request (the group coordinator not ready yet)."""

    commits: dict[TopicPartitionKey, Committed]
    unstable: list[TopicPartitionKey]
    retriable: str | None = None  # the error's text: the KafkaError object must not outlive its request
    coordinator_moved: bool = False  # the error says the client asked a broker that is not the coordinator

    @property
    def settled(self) -> bool:
        return not self.unstable and self.retriable is None

    def reason(self) -> str:
        if self.retriable is not None:
            return f"the group coordinator is not ready ({self.retriable})"
        return (f"committed offsets of {_names(self.unstable)} are held by an open transaction "
                "(UNSTABLE_OFFSET_COMMIT)")


def fetch_committed_once(admin, group: str, partitions: list[TopicPartitionKey],
                         request_timeout: float = 30.0) -> FetchAttempt:
    not_ready = _coordinator_not_ready(admin, group, request_timeout)
    if not_ready is not None:
        return not_ready
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in partitions])]
    try:
        result = coordinator_answer(
            lambda timeout: admin.list_consumer_group_offsets(request, require_stable=True, request_timeout=timeout),
            group, request_timeout)
    except KafkaException as error:
        if is_retriable(error):
            # e.g. COORDINATOR_LOAD_IN_PROGRESS while a new or moved __consumer_offsets partition loads
            return _not_ready(error)
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
    return FetchAttempt(offsets, unstable)


def _not_ready(error: KafkaException) -> FetchAttempt:
    return FetchAttempt({}, [], str(error), error_code(error) in COORDINATOR_MOVED_CODES)


def _coordinator_not_ready(admin, group: str, request_timeout: float) -> FetchAttempt | None:
    """Make sure the group's coordinator is found and loaded before the OffsetFetch.

    librdkafka (2.4 to 2.16 at least) crashes the process when an AdminClient's OffsetFetch is
    answered NOT_COORDINATOR: its response handler hands the error to a consumer-group handle an
    AdminClient does not have (librdkafka issue #5040). That answer comes while a group's
    coordinator is being created or moved, so a DescribeGroups, which handles it safely, goes
    first; its retriable errors are backed off like an unstable offset.
    """
    try:
        describe_group(admin, group, request_timeout)
    except KafkaException as error:
        if is_retriable(error):
            return _not_ready(error)
        raise KafkaClientError(
            f"describing consumer group {group!r} failed: {error}; check that the brokers are reachable "
            "and that the principal may DESCRIBE the group"
        ) from error
    return None


def group_coordinator(admin, group: str, request_timeout: float) -> int | None:
    """The broker id of ``group``'s coordinator now, or None when the cluster does not say."""
    try:
        return describe_group(admin, group, request_timeout).coordinator.id
    except KafkaException as error:
        log.info("group %r: its coordinator is not known now (%s)", group, error)
        return None


def describe_group(admin, group: str, timeout_s: float):
    """``group``'s ConsumerGroupDescription (see coordinator_answer)."""
    return coordinator_answer(lambda timeout: admin.describe_consumer_groups([group], request_timeout=timeout),
                              group, timeout_s)


def fetch_stable_committed_offsets(admin, group: str, partitions: list[TopicPartitionKey],
                                   timeout_ms: int, renew: Callable[[], object] | None = None
                                   ) -> dict[TopicPartitionKey, int | None]:
    commits = fetch_stable_commits(admin, group, partitions, timeout_ms, renew=renew)
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
    renew: Callable[[], object] | None = None,
) -> dict[TopicPartitionKey, Committed]:
    """What the group has committed, once no open transaction holds any of the partitions.

    Waits with exponential, jittered back-off for at most ``timeout_ms`` (the writers'
    transaction timeout plus a margin by default: the broker aborts a transaction left open by a
    dead writer after its timeout), then raises PendingTransactionError. ``renew()`` gives a new
    admin client when the group's coordinator moved: librdkafka's admin client kept asking the old
    one (NOT_COORDINATOR) for a minute after its broker stopped.
    """
    if not partitions:
        return {}
    deadline = clock() + timeout_ms / 1000
    delays = backoff.delays(rng)
    attempt = 0
    while True:
        result = fetch_committed_once(admin, group, partitions, STABLE_READ_REQUEST_TIMEOUT_S)
        if result.settled:
            if attempt:
                log.info("group %r: offsets are stable after %d retries", group, attempt)
            return result.commits
        remaining = deadline - clock()
        if remaining <= 0:
            raise _timeout_error(group, result, timeout_ms)
        attempt += 1
        if result.coordinator_moved and renew is not None:
            admin = renew()
        delay = min(next(delays), remaining)
        log.warning("group %r: %s; retry %d in %.2f s, giving up in %.0f s",
                    group, result.reason(), attempt, delay, remaining)
        if result.unstable:
            faults.stall_point(faults.STALL_OFFSETS_PENDING)
        sleep(delay)


def _names(partitions: list[TopicPartitionKey]) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition in sorted(partitions))


def _timeout_error(group: str, result: FetchAttempt, timeout_ms: int) -> Exception:
    if result.retriable is not None:
        return KafkaClientError(
            f"fetching the committed offsets of consumer group {group!r}: {result.reason()} after "
            f"{timeout_ms / 1000:.0f} s; check the brokers' health"
        )
    return PendingTransactionError(
        f"the committed offsets of consumer group {group!r} for {_names(result.unstable)} are still held by an "
        f"open transaction after {timeout_ms / 1000:.0f} s. Most likely a writer of this group (another "
        "running instance of the pipeline, or one that crashed) has an open transaction; it will be "
        "aborted when its transaction.timeout.ms passes. Stop the other instance or wait, then restart; "
        "raise stableOffsetsTimeoutMs if your transactions legitimately run longer"
    )
