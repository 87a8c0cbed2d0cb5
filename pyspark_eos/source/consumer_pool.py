"""A Python worker's read consumers, kept from read task to read task as Spark's Kafka connector
keeps its consumers: a consumer made for each task connects to the brokers, asks for metadata and
starts its fetchers before its first record, on every task of every micro-batch.

A consumer is lent to one read at a time and given back only by a read that ended as it should,
with nothing assigned and nothing paused; a read that failed or was given up closes its consumer.
A lent consumer's ``assign()`` of new ranges is all a read needs: librdkafka drops what it had
fetched for an earlier assignment (a partition's fetched messages carry its fetch version, which
each assign, unassign and seek moves on). Consumers are kept per configuration in a registry of
their own (held_clients): librdkafka does not survive fork(), so its keys name the process, and
what a worker stopped reading for is closed once idle. One that lost all its brokers since it was
made is replaced, as the sink's clients are (broker_outages).
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

from confluent_kafka import Consumer

from ..kafka.broker_outages import Watched, watched
from ..kafka.held_clients import IDLE_CLOSE_S, KEPT_CONFIGURATIONS, Registry
from ..kafka.options import ClientSettings, files_explained

log = logging.getLogger(__name__)

CONSUMER = "consumer"

READERS = Registry("a source configuration", IDLE_CLOSE_S, KEPT_CONFIGURATIONS)


@contextmanager
def lent_consumer(config: dict[str, str]) -> Iterator[Consumer]:
    """A consumer of ``config``, this worker's own from an earlier read when it has one."""
    held = READERS.use(_settings(config))
    kept = held.drop(CONSUMER)
    if kept is not None and not _usable(kept):
        kept.close()
        kept = None
    kept = kept or _new(config)
    try:
        yield kept.client
    except BaseException:  # GeneratorExit too: a read given up mid-way leaves fetchers running
        kept.close()
        raise
    if _cleared(kept.client) and CONSUMER not in held.clients:
        held.clients[CONSUMER] = kept
    else:
        kept.close()


def _new(config: dict[str, str]) -> Watched[Consumer]:
    with files_explained(config):
        return watched(Consumer, config)


def _usable(kept: Watched[Consumer]) -> bool:
    try:
        return not kept.lost_all_brokers("a read consumer")
    except Exception as error:  # noqa: BLE001 - a consumer that cannot be polled is closed, not lent
        log.warning("a kept read consumer failed (%s); making a new one", error)
        return False


def _cleared(consumer: Consumer) -> bool:
    """Stop fetching for the next read: resume what the read paused (librdkafka keeps a pause across
    an unassign and a later assign of the partition), unassign, and serve what is left queued. The
    unassign outdates every fetched message, which serving drops, but not an error event without a
    partition's fetch version (a failed offset reset): the next read would take it for its own."""
    try:
        assigned = consumer.assignment()
        if assigned:
            consumer.resume(assigned)
        consumer.unassign()
        while left := consumer.consume(num_messages=10_000, timeout=0):
            if any(message.error() is None for message in left):
                log.warning("a read consumer still delivered records after its unassign; closing it")
                return False
        return True
    except Exception as error:  # noqa: BLE001 - a consumer that cannot be cleared is closed, not lent again
        log.warning("clearing a read consumer failed (%s); closing it", error)
        return False


def _settings(config: dict[str, str]) -> ClientSettings:
    rest = {key: value for key, value in config.items() if key != "bootstrap.servers"}
    return ClientSettings.of(config["bootstrap.servers"], rest)
