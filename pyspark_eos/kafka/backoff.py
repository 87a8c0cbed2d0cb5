"""Retrying Kafka admin requests that fail for a passing reason, with bounded back-off.

Right after a topic is created or a broker restarts, requests meet retriable errors such as
NOT_LEADER_FOR_PARTITION or COORDINATOR_LOAD_IN_PROGRESS; librdkafka's admin calls do not retry
them. Everything else fails at once.
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

from confluent_kafka import KafkaError, KafkaException

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off with jitter: initial, initial*factor, ... capped at maximum."""

    initial_s: float = 0.1
    maximum_s: float = 5.0
    factor: float = 2.0
    jitter: float = 0.25

    def delays(self, rng: random.Random | None = None) -> Iterable[float]:
        rng = rng or random.Random()
        delay = self.initial_s
        while True:
            yield delay * (1 + rng.uniform(-self.jitter, self.jitter))
            delay = min(delay * self.factor, self.maximum_s)


# Errors that pass once leadership, coordinators or connections settle. Listed by code: the
# KafkaError objects that admin futures raise do not carry librdkafka's retriable flag.
RETRIABLE_CODES = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION, KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.KAFKA_STORAGE_ERROR, KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
})


def error_code(error: BaseException) -> int | None:
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0].code()
    return None


def is_retriable(error: BaseException) -> bool:
    return error_code(error) in RETRIABLE_CODES


# Errors that say the client's metadata names the wrong leader (or an old leader epoch).
LEADERSHIP_CODES = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
})


def with_retries(call: Callable[[], T], what: str, timeout_s: float = 60.0, backoff: Backoff = Backoff(),
                 on_retry: Callable[[KafkaException], None] | None = None, also: frozenset[int] = frozenset(),
                 retriable: frozenset[int] = RETRIABLE_CODES) -> T:
    """``call()``, retried on the errors whose code is in ``retriable`` (by default those that pass
    once leadership, coordinators or connections settle) or in ``also`` for at most ``timeout_s``;
    ``on_retry(error)`` runs before each retry."""
    deadline = time.monotonic() + timeout_s
    for attempt, delay in enumerate(backoff.delays(), start=1):
        try:
            return call()
        except KafkaException as error:
            remaining = deadline - time.monotonic()
            if error_code(error) not in retriable | also or remaining <= 0:
                raise
            log.info("%s: %s; retry %d in %.2f s", what, error, attempt, min(delay, remaining))
            if on_retry is not None:
                on_retry(error)
            time.sleep(min(delay, remaining))
    raise AssertionError("unreachable")
