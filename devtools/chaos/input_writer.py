"""The campaign's input: a transactional producer writing all along, about one transaction in ten
aborted, into several topics whose partitions may grow while it runs.

Every record names itself: key ``topic/partition`` and value ``topic/partition/sequence/payload``,
the sequence counting up per input partition, so the verifiers can tell each committed record,
its order within its partition, and a record of an aborted transaction. What the writer
believes it committed is never the truth the verifiers use (a commit that failed under a broker
fault may still have landed): they read the input topics back with read_committed.
"""
from __future__ import annotations

import logging
import random
import threading
import time

from confluent_kafka import KafkaException, Producer

from .verifiers import CAMPAIGN_CLIENT

log = logging.getLogger(__name__)

_TIMEOUT_S = 60


def record_id(topic: str, partition: int, sequence: int) -> str:
    return f"{topic}/{partition}/{sequence}"


class InputWriter(threading.Thread):
    """Writes ``rate`` records per second in transactions of ``per_transaction`` records until
    ``stop()``; ``aborted`` holds the ids of every record of a transaction it aborted."""

    def __init__(self, bootstrap: str, topics: list[str], seed: int, rate: int = 300, per_transaction: int = 30,
                 abort_ratio: float = 0.1, payload: int = 40):
        super().__init__(name="chaos-input", daemon=True)
        self.bootstrap = bootstrap
        self.topics = topics
        self.rate = rate
        self.per_transaction = per_transaction
        self.abort_ratio = abort_ratio
        self.payload = "x" * payload
        self.transactional_id = f"chaos-input-{seed}"
        self.aborted: set[str] = set()
        self.transactions = {"committed": 0, "aborted": 0, "failed": 0}
        self.error: Exception | None = None
        self._random = random.Random(seed)
        self._sequences: dict[tuple[str, int], int] = {}
        self._partitions: list[tuple[str, int]] = []
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()
        self.join(_TIMEOUT_S * 3)

    def run(self) -> None:
        producer = self._producer()
        refreshed = 0.0
        started, written = time.monotonic(), 0
        try:
            while not self._stopped.is_set():
                if time.monotonic() - refreshed > 2:
                    self._partitions, refreshed = self._current_partitions(producer), time.monotonic()
                producer = self._one_transaction(producer)
                written += self.per_transaction
                # Paced to the rate: ahead of it, wait; behind it (a broker fault), go on at once.
                self._stopped.wait(max(0.0, started + written / self.rate - time.monotonic()))
        except Exception as error:  # the campaign reports it; the input stopping is a failure of the rig
            log.exception("the input writer failed")
            self.error = error

    def _producer(self) -> Producer:
        producer = Producer({**CAMPAIGN_CLIENT, "bootstrap.servers": self.bootstrap,
                             "transactional.id": self.transactional_id, "transaction.timeout.ms": 60000,
                             "linger.ms": 5})
        producer.init_transactions(_TIMEOUT_S)
        return producer

    def _current_partitions(self, producer: Producer) -> list[tuple[str, int]]:
        # The producer's own metadata: a partition an admin client sees first is one the producer
        # refuses (unknown partition) until its next metadata refresh.
        metadata = producer.list_topics(timeout=30)
        return [(topic, p) for topic in self.topics for p in sorted(metadata.topics[topic].partitions)]

    def _one_transaction(self, producer: Producer) -> Producer:
        commit = self._random.random() >= self.abort_ratio
        ids = []
        producer.begin_transaction()
        for _ in range(self.per_transaction):
            topic, partition = self._random.choice(self._partitions)
            sequence = self._sequences.get((topic, partition), 0)
            self._sequences[(topic, partition)] = sequence + 1
            ids.append(record_id(topic, partition, sequence))
            producer.produce(topic, key=f"{topic}/{partition}", value=f"{ids[-1]}/{self.payload}", partition=partition)
        try:
            producer.flush(_TIMEOUT_S)  # aborted records take offsets too, as a writer failing late leaves them
            if commit:
                producer.commit_transaction(_TIMEOUT_S)
                self.transactions["committed"] += 1
                return producer
            producer.abort_transaction(_TIMEOUT_S)
        except KafkaException as error:
            return self._after_failure(producer, error, ids)
        self.aborted.update(ids)
        self.transactions["aborted"] += 1
        return producer

    def _after_failure(self, producer: Producer, error: KafkaException, ids: list[str]) -> Producer:
        """A transaction whose end failed under a broker fault: abort it when Kafka allows, else
        start a new producer (its init_transactions aborts it). A failed commit may still have
        landed: those records' fate is left to the read-back."""
        self.transactions["failed"] += 1
        kafka_error = error.args[0]
        log.warning("input transaction failed (%s)", error)
        if kafka_error.txn_requires_abort() or kafka_error.retriable():
            try:
                producer.abort_transaction(_TIMEOUT_S)
                self.aborted.update(ids)
                return producer
            except KafkaException as abort_error:
                log.warning("aborting the failed input transaction failed too (%s); starting a new producer",
                            abort_error)
        return self._producer()
