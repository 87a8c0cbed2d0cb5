"""The benchmarks' ground: sizes, input topics in committed transactions, counting output.

Input is written once per (records, size, partitions) and shared by every contender; each run
writes to an output topic of its own, and its committed records are counted afterwards with a
plain read_committed consumer, so a contender that loses or repeats records shows in the table
instead of passing for fast.
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from pyspark_eos.testing.output_check import last_stable_offsets
from pyspark_eos.testing.processes import PROC, python_descendants

log = logging.getLogger(__name__)
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Scale:
    name: str
    copy_cases: tuple[tuple[int, int], ...]   # (record bytes, records) of the Kafka -> Kafka copy
    partitions: int
    repeats: int
    batch_records: int         # records per micro-batch (maxOffsetsPerTrigger) and per loop transaction
    alone_records: int         # source alone, sink alone
    scaling_partitions: tuple[int, ...]
    scaling_records: int
    scaling_repeats: int
    txn_batch_sizes: tuple[int, ...]
    txn_batches: int           # micro-batches per run: the input is this many batches of each size
    fencing_records: int       # the copy with and without attempt fencing (8 micro-batches)
    memory_minutes: float      # the memory part: a copy of this long at memory_rate records/s
    memory_rate: int


SCALES = {
    "quick": Scale("quick", copy_cases=((100, 40_000), (1000, 40_000)), partitions=8, repeats=1,
                   batch_records=10_000, alone_records=40_000, scaling_partitions=(8, 64), scaling_records=16_000,
                   scaling_repeats=1, txn_batch_sizes=(1_000, 5_000), txn_batches=4, fencing_records=40_000,
                   memory_minutes=1, memory_rate=2_000),
    # About 8 minutes on 2 cores: enough records per batch to compare one change's effect.
    "medium": Scale("medium", copy_cases=((100, 400_000), (1000, 200_000)), partitions=8, repeats=2,
                    batch_records=50_000, alone_records=200_000, scaling_partitions=(8, 64, 256), scaling_records=64_000,
                    scaling_repeats=1, txn_batch_sizes=(1_000, 10_000), txn_batches=12, fencing_records=100_000,
                    memory_minutes=3, memory_rate=5_000),
    # About 40 minutes on 2 cores; per-task costs make 256 partitions slow, hence one repeat there.
    "full": Scale("full", copy_cases=((100, 3_000_000), (1000, 2_000_000)), partitions=8, repeats=3,
                  batch_records=100_000, alone_records=500_000, scaling_partitions=(8, 64, 256, 1024),
                  scaling_records=256_000, scaling_repeats=1, txn_batch_sizes=(1_000, 10_000, 100_000),
                  txn_batches=8, fencing_records=400_000, memory_minutes=20, memory_rate=5_000),
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def write_input(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> None:
    """``records`` records of ``size`` bytes, round-robin over partitions, idempotently with acks=all.

    Not in transactions: Kafka's TransactionalMessageCopier counts the records left by offsets and
    would wait forever for transaction markers to arrive as records. Every reader still reads
    with read_committed; the tests cover input with markers and aborted transactions.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "batch.size": 1_000_000})
    value = b"x" * size
    started = time.monotonic()
    for i in range(records):
        _produce(producer, topic, b"%d" % i, value, i % partitions)
        if (i + 1) % 200_000 == 0 or i + 1 == records:
            producer.flush(120)
            log.info("input %s: %d/%d records (%.0f s)", topic, i + 1, records, time.monotonic() - started)
    if producer.flush(120):
        raise RuntimeError(f"input {topic}: records still undelivered after 120 s")


def _produce(producer: Producer, topic: str, key: bytes, value: bytes, partition: int) -> None:
    while True:
        try:
            producer.produce(topic, key=key, value=value, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


def count_committed(bootstrap: str, topic: str, partitions: int, timeout: float = 600.0) -> int:
    """Committed records in ``topic``, read with read_committed up to the last stable offsets."""
    ends = last_stable_offsets(bootstrap, topic, partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bench-count"),
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
    done = {p for p in range(partitions) if ends[p] == 0}
    counted = 0
    deadline = time.monotonic() + timeout
    try:
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"counting {topic} did not finish in {timeout:.0f} s")
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is None:
                    counted += 1
                    if message.offset() + 1 >= ends[message.partition()]:
                        done.add(message.partition())
                elif error.code() == KafkaError._PARTITION_EOF:
                    done.add(message.partition())
    finally:
        consumer.close()
    return counted


def cpu_times() -> tuple[int, int]:
    """(busy, all) clock ticks of the whole machine so far, from /proc/stat: two readings give how
    busy its cores were in between, every process counted (the broker, the JVM, Python workers)."""
    # user nice system idle iowait irq softirq steal; guest time is inside user and nice already,
    # and stolen time was no core of this machine's.
    user, nice, system, idle, iowait, irq, softirq, steal = (
        int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9])
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait


def busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    return (after[0] - before[0]) / max(1, after[1] - before[1])


def process_cpu_seconds(jvm_pid: int) -> dict[str, float]:
    """CPU seconds so far of a run's processes, by group: ``spark jvm``; ``python``, the Spark JVM's
    Python processes (task workers, the Python sources' and sinks' driver-side runners), with the
    time of those that exited, which their parents hold as waited-for children's; ``kafka broker``;
    ``benchmark``, this process (the driver's Python side)."""
    own, waited = _stat_seconds(jvm_pid)
    groups = {"spark jvm": own, "python": waited, "kafka broker": 0.0, "benchmark": _stat_seconds(os.getpid())[0]}
    for pid in python_descendants(jvm_pid):
        groups["python"] += sum(_stat_seconds(pid))
    for pid in _kafka_brokers():
        groups["kafka broker"] += _stat_seconds(pid)[0]
    return groups


def _stat_seconds(pid: int) -> tuple[float, float]:
    """(own, waited-for children's) user + system CPU seconds of ``pid``; zeros once it is gone."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) / _TICKS, (cutime + cstime) / _TICKS


def _kafka_brokers() -> list[int]:
    found = []
    for entry in PROC.iterdir():
        try:
            if entry.name.isdigit() and b"\0kafka.Kafka\0" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
