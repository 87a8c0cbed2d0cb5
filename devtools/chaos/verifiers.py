"""The campaign's three verifiers, each on plain Kafka clients (nothing of eos-kafka's reader):

- ``OutputWatcher``: a read_committed consumer of the output running all along the campaign; a
  record seen twice is a duplicate the moment it becomes visible;
- ``final_check``: at the end, the input and the output read back with read_committed: every
  committed input record's result exactly once, none from an aborted input transaction, the input
  offset each output record carries is the record's, and per input partition the output keeps
  the input's order;
- ``offsets_at_end`` and ``open_transactions``: the group's committed offsets equal the input's
  end, and no transaction of the query's transactional ids is left open (Kafka's own
  TransactionsCommand).

Each names the first record that breaks it.
"""
from __future__ import annotations

import functools
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from pyspark_eos.testing.embedded_kafka import kafka_tool_command
from pyspark_eos.testing.output_check import Record, committed_offsets, last_stable_offsets, read_committed

_OPEN_STATES = {"Ongoing", "PrepareCommit", "PrepareAbort"}
# The campaign's own clients reconnect to a restarted broker within a second, as the query's do
# (pyspark_eos.kafka.options), not after librdkafka's default back-off of up to 10 s: their checks
# then see the cluster as the query does.
CAMPAIGN_CLIENT = {"reconnect.backoff.max.ms": 1000}


def input_id(value: bytes) -> str:
    """``topic/partition/sequence`` of an input record's or an output record's value."""
    return "/".join(value.decode().split("/", 3)[:3])


def carried_offset(value: bytes) -> int:
    return int(value.decode().rsplit("|", 1)[1])


class OutputWatcher(threading.Thread):
    """Reads the output with read_committed while the campaign runs; keeps the first duplicate."""

    def __init__(self, bootstrap: str, output: str, partitions: int):
        super().__init__(name="chaos-output-watcher", daemon=True)
        self.seen: dict[str, tuple[int, int]] = {}
        self.duplicates = 0
        self.first_duplicate: str | None = None
        self._consumer = Consumer({**CAMPAIGN_CLIENT, "bootstrap.servers": bootstrap,
                                   "group.id": f"chaos-watch-{uuid.uuid4().hex[:8]}",
                                   "isolation.level": "read_committed", "enable.auto.commit": False,
                                   "enable.partition.eof": True})
        self._assignment = [TopicPartition(output, p, 0) for p in range(partitions)]
        self._consumer.assign(self._assignment)
        self.output, self.bootstrap, self.partitions = output, bootstrap, partitions
        self.positions: dict[int, int] = {}
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            eof: dict[int, int] = {}
            for message in self._consumer.consume(500, 0.5):
                if message.error() is None:
                    self._saw(message.value(), (message.partition(), message.offset()))
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    eof[message.partition()] = message.offset()  # past a trailing transaction marker
            self.positions = {tp.partition: max(tp.offset, eof.get(tp.partition, -1), self.positions.get(tp.partition, -1))
                              for tp in self._consumer.position(self._assignment)}

    def catch_up(self, timeout_s: float = 120.0) -> bool:
        """Wait until it has read the output up to its last stable offsets."""
        ends = last_stable_offsets(self.bootstrap, self.output, self.partitions, admin=_admin(self.bootstrap))
        deadline = time.monotonic() + timeout_s
        while any(self.positions.get(p, -1) < end for p, end in ends.items() if end > 0):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def _saw(self, value: bytes, where: tuple[int, int]) -> None:
        record = input_id(value)
        if record in self.seen:
            self.duplicates += 1
            self.first_duplicate = self.first_duplicate or (
                f"input record {record} seen twice in the output: at partition/offset {self.seen[record]} and {where}")
        else:
            self.seen[record] = where

    def stop(self) -> None:
        self._stopped.set()
        self.join(30)
        self._consumer.close()


@dataclass
class FinalCheck:
    input_records: int = 0
    output_records: int = 0
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    from_aborted: int = 0
    wrong_offset: int = 0
    out_of_order: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.unexpected or self.from_aborted or self.wrong_offset
                    or self.out_of_order)

    def problem(self, text: str) -> None:
        if len(self.problems) < 10:
            self.problems.append(text)


def final_check(bootstrap: str, topics: list[str], output: str, output_partitions: int, aborted: set[str]) -> FinalCheck:
    check = FinalCheck()
    expected = {input_id(r.value): r for topic in topics
                for r in read_committed(bootstrap, topic, _partitions(bootstrap, topic), timeout=300)}
    outputs = read_committed(bootstrap, output, output_partitions, timeout=300)
    check.input_records, check.output_records = len(expected), len(outputs)
    seen: dict[str, Record] = {}
    last_sequence: dict[str, tuple[int, Record]] = {}
    for record in outputs:  # in partition, then offset order
        _check_one(check, record, expected, seen, last_sequence, aborted)
    for missing in sorted(set(expected) - set(seen))[:10]:
        check.problem(f"input record {missing} (offset {expected[missing].offset}) is missing from the output")
    check.missing = len(set(expected) - set(seen))
    return check


def _check_one(check: FinalCheck, record: Record, expected: dict[str, Record], seen: dict[str, Record],
               last_sequence: dict[str, tuple[int, Record]], aborted: set[str]) -> None:
    identity = input_id(record.value)
    where = f"output partition {record.partition} offset {record.offset}"
    if identity in seen:
        check.duplicates += 1
        check.problem(f"duplicate: input record {identity} at {where} and at offset {seen[identity].offset}")
        return
    seen[identity] = record
    if identity in aborted:
        check.from_aborted += 1
        check.problem(f"input record {identity} of an aborted transaction is in the output at {where}")
    if identity not in expected:
        check.unexpected += 1
        check.problem(f"{where} holds {identity}, which is not a committed input record")
        return
    if carried_offset(record.value) != expected[identity].offset:
        check.wrong_offset += 1
        check.problem(f"{where}: input record {identity} carries offset {carried_offset(record.value)}, "
                      f"its offset is {expected[identity].offset}")
    partition, sequence = identity.rsplit("/", 1)
    previous = last_sequence.get(partition)
    if previous is not None and previous[0] > int(sequence):
        check.out_of_order += 1
        check.problem(f"order: input record {identity} at {where} comes after {partition}/{previous[0]} "
                      f"(offset {previous[1].offset})")
    last_sequence[partition] = (int(sequence), record)


@functools.lru_cache(maxsize=None)
def _admin(bootstrap: str) -> AdminClient:
    """One admin client per cluster for the campaign's frequent checks (a client each time would
    cost a connection and a line of librdkafka noise per check)."""
    return AdminClient({**CAMPAIGN_CLIENT, "bootstrap.servers": bootstrap})


def _committed(bootstrap: str, group: str, topic: str, require_stable: bool) -> dict[int, int]:
    """The group's committed offsets of ``topic``, asked through a new client after a DescribeGroups:
    librdkafka crashes the process when a client's OffsetFetch is answered NOT_COORDINATOR, which
    happens while the coordinator moves (see pyspark_eos.kafka.group_offsets)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    return committed_offsets(bootstrap, group, topic, _partitions(bootstrap, topic), require_stable=require_stable,
                             admin=admin)


def _partitions(bootstrap: str, topic: str) -> int:
    return len(_admin(bootstrap).list_topics(topic, timeout=30).topics[topic].partitions)


def offsets_lag(bootstrap: str, group: str, topics: list[str]) -> dict[str, int]:
    """Per input partition whose committed offset is not its last stable offset: the difference."""
    lag = {}
    for topic in topics:
        partitions = _partitions(bootstrap, topic)
        ends = last_stable_offsets(bootstrap, topic, partitions, admin=_admin(bootstrap))
        committed = _committed(bootstrap, group, topic, require_stable=True)
        # A partition that is still empty has nothing to commit (-1001: no committed offset).
        behind = {p: end - max(0, committed.get(p, -1)) for p, end in ends.items()}
        lag.update({f"{topic}-{p}": count for p, count in behind.items() if count != 0})
    return lag


def input_end_total(bootstrap: str, topics: list[str]) -> int:
    """The sum of the input's last stable offsets: what ``committed_total`` reaches once the query
    has caught up with the input written so far."""
    return sum(offset for topic in topics for offset in last_stable_offsets(
        bootstrap, topic, _partitions(bootstrap, topic), admin=_admin(bootstrap)).values())


def committed_total(bootstrap: str, group: str, topics: list[str]) -> int:
    """The sum of the group's committed offsets over the input: grows with every committed batch.
    While the group's coordinator is unreachable some offsets read as missing (a lower sum)."""
    wanted = [TopicPartition(topic, p) for topic in topics for p in range(_partitions(bootstrap, topic))]
    return sum(max(0, tp.offset) for tp in _group_reader(bootstrap, group).committed(wanted, timeout=10)
               if tp.error is None)


@functools.lru_cache(maxsize=None)
def _group_reader(bootstrap: str, group: str) -> Consumer:
    """The progress sampler's client, asked every second: a consumer follows the group's coordinator
    from broker to broker, where admin clients' OffsetFetch requests crashed the campaign's process
    (SIGSEGV) during broker bounces. read_uncommitted: it does not wait for open transactions."""
    return Consumer({**CAMPAIGN_CLIENT, "bootstrap.servers": bootstrap, "group.id": group,
                     "isolation.level": "read_uncommitted",
                     "enable.auto.commit": "false", "log_level": 0})


def transactions(bootstrap: str, prefix: str) -> list[dict[str, str]]:
    """The transactions Kafka's TransactionsCommand lists for ids starting with ``prefix``: a dict
    of its columns (TransactionalId, Coordinator, ProducerId, TransactionState) each."""
    command = [*kafka_tool_command("org.apache.kafka.tools.TransactionsCommand"), "--bootstrap-server", bootstrap, "list"]
    listing = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    lines = listing.splitlines()
    # The tool logs to stdout too: the table starts at its header.
    table = [line.split() for line in lines[next(i for i, line in enumerate(lines) if line.startswith("TransactionalId")):]]
    return [dict(zip(table[0], row)) for row in table[1:] if row and row[0].startswith(prefix)]


def open_transactions(bootstrap: str, prefix: str) -> list[str]:
    """Transactions of ids starting with ``prefix`` that are not complete."""
    return [f"{t['TransactionalId']} ({t['TransactionState']})" for t in transactions(bootstrap, prefix)
            if t.get("TransactionState") in _OPEN_STATES]
