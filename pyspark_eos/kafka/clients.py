"""Kafka clients every side makes the same way: a transactional producer taken over with
init_transactions."""
from __future__ import annotations

from confluent_kafka import KafkaException, Producer

from ..errors import KafkaClientError
from .cluster import connected
from .options import files_explained

INIT_TIMEOUT_S = 120.0


def init_transactional_producer(bootstrap_servers: str, kafka_params: dict[str, str], transactional_id: str,
                                transaction_timeout_ms: int) -> Producer:
    """A producer for ``transactional_id`` after init_transactions: whatever held the id before
    (a dead predecessor, or an older attempt being fenced) has its open transaction aborted and
    can no longer send offsets or commit."""
    with files_explained(kafka_params):
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
