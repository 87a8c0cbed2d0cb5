"""One transactional producer (and AdminClient) per Python worker process, reused across tasks
and micro-batches while the worker keeps leasing the same slot (see transactional_id_factory).

librdkafka does not survive fork(), so a producer is created lazily inside the worker that uses
it (never at import time, never in ``__main__``) and cached here by pid. A producer that hit a
fatal error (fenced, or its transaction timed out by the broker) is dropped and rebuilt with
the same transactional id: its ``init_transactions`` bumps the epoch and takes over. So is one
whose consumer group's coordinator moved since its last task (see ``_coordinator_moved``).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ..errors import KafkaClientError
from ..kafka.cluster import connected
from ..kafka.group_offsets import group_coordinator
from .options import ID_PER_PARTITION, SinkOptions
from .transactional_id_factory import PROCESS_TOKEN, SlotLease

log = logging.getLogger(__name__)

INIT_TIMEOUT_S = 120.0
COORDINATOR_LOOKUP_TIMEOUT_S = 5.0


@dataclass
class WorkerProducer:
    transactional_id: str
    producer: Producer
    pid: int
    slot: int = -1
    # The group's coordinator when this producer's last task began (None: no group, or not known).
    group_coordinator: int | None = None


# At most one producer per worker process and sink configuration: the one for the slot it last
# leased. Another slot, or a slot another worker has used since, needs a new producer. With
# transactionalIdPer=partition a worker keeps one producer per input partition it has written.
_producers: dict[tuple, WorkerProducer] = {}


def _key(options: SinkOptions) -> tuple:
    return (os.getpid(), options.bootstrap_servers, options.transactional_id_prefix, options.group_id,
            options.transaction_timeout_ms, tuple(sorted(options.kafka.items())))


def _producer_key(options: SinkOptions, transactional_id: str) -> tuple:
    return (*_key(options), transactional_id if options.transactional_id_per == ID_PER_PARTITION else None)


def producer_for(options: SinkOptions, lease: SlotLease) -> WorkerProducer:
    key = _producer_key(options, lease.transactional_id)
    cached = _producers.get(key)
    # Looked up for a new producer too: the coordinator its first task sends offsets to is the one
    # its next task must find unchanged.
    coordinator = _group_coordinator(options)
    if cached is not None and cached.transactional_id == lease.transactional_id and lease.previous_holder == PROCESS_TOKEN:
        if not _coordinator_moved(cached, coordinator):
            cached.group_coordinator = coordinator
            return cached
    elif cached is not None:
        log.info("slot moved (%s -> %s); replacing this worker's producer", cached.transactional_id,
                 lease.transactional_id)
    _producers[key] = WorkerProducer(lease.transactional_id, _new_producer(options, lease.transactional_id), os.getpid(),
                                     lease.slot, coordinator)
    return _producers[key]


def _group_coordinator(options: SinkOptions) -> int | None:
    if not options.commits_input_offsets:
        return None
    return group_coordinator(admin_for(options), options.group_id, COORDINATOR_LOOKUP_TIMEOUT_S)


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


def cached_slot(options: SinkOptions) -> int | None:
    """The write slot this worker's producer was made for, if it has one: the slot to lease first."""
    cached = _producers.get(_producer_key(options, None))
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


def _new_producer(options: SinkOptions, transactional_id: str) -> Producer:
    config = {**options.kafka, "delivery.report.only.error": True, "on_delivery": delivery_failures}
    producer = init_transactional_producer(options.bootstrap_servers, config, transactional_id,
                                           options.transaction_timeout_ms)
    log.info("transactional producer %s ready in worker %d", transactional_id, os.getpid())
    return producer


def init_transactional_producer(bootstrap_servers: str, kafka_params: dict[str, str], transactional_id: str,
                                transaction_timeout_ms: int) -> Producer:
    """A producer for ``transactional_id`` after init_transactions: whatever held the id before
    (a dead predecessor, or an older attempt being fenced) has its open transaction aborted and
    can no longer send offsets or commit."""
    producer = Producer({
        **kafka_params,
        "bootstrap.servers": bootstrap_servers,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": transaction_timeout_ms,
    })
    try:
        # Every topic's metadata: the records' topics are not known yet, and asking for one the
        # cluster lacks could create it (a producer's metadata requests allow auto-creation).
        connected(producer, bootstrap_servers, INIT_TIMEOUT_S).init_transactions(INIT_TIMEOUT_S)
    except (KafkaException, KafkaClientError) as error:
        raise KafkaClientError(
            f"initializing transactions for transactional id {transactional_id!r} failed: {error.args[0]}; "
            "check that the brokers are reachable and the principal may WRITE that transactional id"
        ) from error
    return producer


_clients: dict[tuple, object] = {}


def worker_client(options: SinkOptions, kind: str, make):
    """This worker's client of ``kind`` for the sink configuration, made once by ``make()``."""
    key = (*_key(options), kind)
    if key not in _clients:
        _clients[key] = make()
    return _clients[key]


def admin_for(options: SinkOptions, renew: bool = False) -> AdminClient:
    """This worker's AdminClient for the sink's stable reads of the group's offsets; ``renew``
    replaces it (see group_offsets.fetch_stable_commits)."""
    if renew:
        _clients.pop((*_key(options), "admin"), None)
    return worker_client(options, "admin",
                         lambda: AdminClient({**options.kafka, "bootstrap.servers": options.bootstrap_servers}))


# A worker outlives the queries it writes for, and each sink configuration (a query's options) has
# its own producers and clients, with librdkafka threads, buffers and connections: a worker that
# had written for 10 queries held 40 clients and 300 MiB. Those of a configuration no task of this
# worker used for IDLE_CLOSE_S, or beyond the KEPT_CONFIGURATIONS most recently used, are closed.
# A query whose batches come further apart pays a producer's start (init_transactions) per batch.
IDLE_CLOSE_S = 120.0
KEPT_CONFIGURATIONS = 4
_last_used: dict[tuple, float] = {}
_clock = time.monotonic


def close_idle_configurations(options: SinkOptions) -> None:
    """Mark ``options``' configuration used now, and close this worker's clients of the others that
    are idle or too many. Called at a write task's start: no other task runs in this worker then,
    so none of them has a transaction open."""
    now = _clock()
    _last_used.pop(_key(options), None)
    _last_used[_key(options)] = now  # dicts keep insertion order: the least recently used first
    stale = [c for c, used in _last_used.items() if now - used > IDLE_CLOSE_S]
    stale += list(_last_used)[len(stale):-KEPT_CONFIGURATIONS]
    for config in stale:
        idle_s = now - _last_used.pop(config)
        producers = [k for k in _producers if k[:len(config)] == config]
        clients = [k for k in _clients if k[:len(config)] == config]
        log.info("closing %d producer(s) and %d other client(s) of a sink configuration last used %.0f s ago",
                 len(producers), len(clients), idle_s)
        for client in [_producers.pop(key).producer for key in producers] + [_clients.pop(key) for key in clients]:
            close_client(client)


def close_client(client) -> None:
    """Close a client without waiting for what it still holds: a failure is logged, not raised,
    since it must not fail the task of another query that triggered the closing."""
    try:
        # close() flushes, which waits up to message.timeout.ms for records a broker no longer
        # takes; nothing an idle configuration left queued is waited for.
        getattr(client, "purge", lambda: None)()
        # An AdminClient, and a Producer before confluent-kafka 2.13, have no close(): dropped,
        # they are destroyed.
        getattr(client, "close", lambda: None)()
    except Exception as error:  # noqa: BLE001 - see above
        log.warning("closing an idle Kafka client failed: %s", error)


def discard(options: SinkOptions, transactional_id: str) -> None:
    """Forget this worker's producer after a fatal error; the next task builds a new one."""
    dropped = _producers.pop(_producer_key(options, transactional_id), None)
    if dropped is not None:
        log.warning("dropping transactional producer %s after a fatal error", dropped.transactional_id)
