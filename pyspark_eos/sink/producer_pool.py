"""One transactional producer (and AdminClient) per Python worker process, reused across tasks
and micro-batches while the worker keeps leasing the same slot (see transactional_id_factory),
held with the worker's other clients (worker_resources).

A producer that hit a fatal error (fenced, or its transaction timed out by the broker) is dropped
and rebuilt with the same transactional id: its ``init_transactions`` bumps the epoch and takes
over. So is one whose consumer group's coordinator moved since its last task (see
``_coordinator_moved``), and one that lost all its brokers since it was made (``BrokerOutages``),
as is the AdminClient.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from ..kafka.broker_outages import BrokerOutages, lost_all_brokers, watched
from ..kafka.clients import init_transactional_producer
from ..kafka.group_offsets import group_coordinator
from ..kafka.held_clients import Held, close_client
from .transactional_id_factory import SlotLease, process_token

log = logging.getLogger(__name__)

# A keyed record's partition as the Java producer of Spark's connector chooses it (murmur2 of the
# key): librdkafka's own default (consistent_random, CRC32) puts a key in another partition, and a
# pipeline switched over would split each key's records, and their order, over two partitions.
# kafka.partitioner chooses another.
JAVA_PARTITIONER = "murmur2_random"

COORDINATOR_LOOKUP_TIMEOUT_S = 5.0
# A send_offsets_to_transaction takes milliseconds: one still waiting this long while the group's
# coordinator answers this worker will not end by itself (offsets_wait_verdict).
STUCK_AFTER_S = 5.0


@dataclass
class WorkerProducer:
    transactional_id: str
    producer: Producer
    pid: int
    slot: int = -1
    # The group's coordinator when this producer's last task began (None: no group, or not known).
    group_coordinator: int | None = None
    outages: BrokerOutages | None = None
    # The claims topic's record (topic, offset) this producer's init_transactions came after: the
    # plan record of the task that made it, when it has one. A claim before it under this id was
    # fenced by that init.
    initialized_after: tuple[str, int] | None = None

    def close(self) -> None:
        close_client(self.producer)


# At most one producer per worker process and sink configuration: the one for the slot it last
# leased. Another slot, or a slot another worker has used since, needs a new producer.
PRODUCER = "producer"


def producer_for(held: Held, lease: SlotLease, group_id: str | None,
                 plan: tuple[str, int] | None = None) -> WorkerProducer:
    """The producer of ``lease``'s slot, recorded in the slot (SlotLease.record_producer);
    ``group_id``: the group whose input offsets its tasks send, if any; ``plan``: the task's plan
    record (topic, offset), appended before the task started, if it has one."""
    try:
        worker = _producer_for(held, lease, group_id, plan)
    except BaseException:
        lease.record_failure()
        raise
    lease.record_producer(worker.initialized_after)
    return worker


def _producer_for(held: Held, lease: SlotLease, group_id: str | None, plan: tuple[str, int] | None) -> WorkerProducer:
    cached = held.clients.get(PRODUCER)
    # Looked up for a new producer too: the coordinator its first task sends offsets to is the one
    # its next task must find unchanged.
    coordinator = _group_coordinator(held, group_id)
    ours = lease.previous_holder == process_token()
    if cached is not None and cached.transactional_id == lease.transactional_id and ours:
        if not _coordinator_moved(cached, coordinator) and not _brokers_lost(cached):
            cached.group_coordinator = coordinator
            return cached
    elif cached is not None:
        log.info("slot moved (%s -> %s); replacing this worker's producer", cached.transactional_id,
                 lease.transactional_id)
    held.drop(PRODUCER)
    return held.client(PRODUCER, lambda: _new_worker_producer(held, lease, coordinator, plan))


def _new_worker_producer(held: Held, lease: SlotLease, coordinator: int | None,
                         plan: tuple[str, int] | None) -> WorkerProducer:
    outages = BrokerOutages()
    producer = _new_producer(held, lease.transactional_id, outages)
    producer.poll(0)  # what happened before init_transactions succeeded is no outage of this producer
    outages.seen = False
    return WorkerProducer(lease.transactional_id, producer, os.getpid(), lease.slot, coordinator, outages, plan)


def _group_coordinator(held: Held, group_id: str | None) -> int | None:
    if group_id is None:
        return None
    coordinator = group_coordinator(admin_for(held), group_id, COORDINATOR_LOOKUP_TIMEOUT_S)
    if coordinator is None:
        # Its unanswered request stays open in librdkafka (group_offsets.coordinator_answer): the
        # next task asks with a new client, as a stable read does, instead of piling requests up.
        held.drop(ADMIN)
    return coordinator


def why_offsets_wait(held: Held, worker: WorkerProducer, group_id: str | None, waited_s: float) -> str | None:
    """Why ``worker``'s ``send_offsets_to_transaction``, waiting for ``waited_s``, will not end by
    itself (offsets_wait_verdict), asking where the group's coordinator is now; None if it may."""
    if worker.group_coordinator is None:
        return None
    return offsets_wait_verdict(worker.group_coordinator, _group_coordinator(held, group_id), waited_s)


def offsets_wait_verdict(before: int, now: int | None, waited_s: float) -> str | None:
    """Why a ``send_offsets_to_transaction`` that began with the group's coordinator on broker
    ``before``, finds it on ``now`` (None: not found) and has waited ``waited_s``, will not end by
    itself (deadline.py), or None while it may.

    librdkafka can wait until the task's deadline (the transaction timeout) in two cases: for the
    old coordinator after the coordinator moved, and for the answer to a request lost with its
    connection (held by a network partition, then reset: it is not sent again). A coordinator that
    cannot be found is most likely moving or cut off, and a new producer would wait as well."""
    if now is None:
        return None
    if now != before:
        return f"the group's coordinator moved from broker {before} to broker {now} meanwhile"
    if waited_s >= STUCK_AFTER_S:
        return (f"the group's coordinator, broker {now}, answers this worker, yet the call has waited "
                f"{waited_s:.0f} s: its request was lost with a connection")
    return None


def _coordinator_moved(cached: WorkerProducer, coordinator: int | None) -> bool:
    # librdkafka's producer kept sending a transaction's offsets to the group's coordinator it had
    # found before, on a broker that had stopped, until the call's deadline (the transaction
    # timeout): a producer made now finds the new one. A coordinator that cannot be found now is
    # most likely moving. Between tasks nothing is open to lose.
    moved = cached.group_coordinator is not None and cached.group_coordinator != coordinator
    if moved:
        log.warning("the group's coordinator moved from broker %s (now %s) since producer %s last wrote; replacing "
                    "the producer", cached.group_coordinator, "unknown" if coordinator is None else f"broker {coordinator}",
                    cached.transactional_id)
    return moved


def _brokers_lost(cached: WorkerProducer) -> bool:
    return lost_all_brokers(cached.producer, cached.outages, f"producer {cached.transactional_id}")


def cached_slot(held: Held) -> int | None:
    """The write slot this worker's producer was made for, if it has one: the slot to lease first."""
    cached = held.clients.get(PRODUCER)
    return cached.slot if cached is not None and cached.slot >= 0 else None


class _DeliveryFailures:
    """Where the worker's producers report failed deliveries: to the write task running in this
    worker (one at a time), which sets ``current``. Successful deliveries are not reported at all
    (delivery.report.only.error): a Python callback per record would cost more than its produce()."""

    def __init__(self):
        self.current = lambda error, message: None

    def __call__(self, error, message) -> None:
        self.current(error, message)


delivery_failures = _DeliveryFailures()


def _new_producer(held: Held, transactional_id: str, outages: BrokerOutages) -> Producer:
    settings = held.settings
    config = {"partitioner": JAVA_PARTITIONER, **settings.kafka_params, "delivery.report.only.error": True,
              "on_delivery": delivery_failures, "error_cb": outages}
    producer = init_transactional_producer(settings.bootstrap_servers, config, transactional_id,
                                           settings.transaction_timeout_ms)
    log.info("transactional producer %s ready in worker %d", transactional_id, os.getpid())
    return producer


ADMIN = "admin"


def admin_for(held: Held, renew: bool = False) -> AdminClient:
    """This worker's AdminClient for the sink's stable reads of the group's offsets; ``renew``
    replaces it (see group_offsets.fetch_stable_commits)."""
    cached = held.clients.get(ADMIN)
    if cached is not None and (renew or cached.lost_all_brokers("this worker's AdminClient")):
        held.drop(ADMIN)
    return held.client(ADMIN, lambda: watched(AdminClient, held.settings.config())).client


def discard(held: Held) -> None:
    """Forget this worker's producer after a fatal error; the next task builds a new one."""
    dropped = held.drop(PRODUCER)
    if dropped is not None:
        log.warning("dropping transactional producer %s after a fatal error", dropped.transactional_id)
