"""The benchmarks' ground: scales, input topics, a steady producer, counting output, CPU time.

Input is written once per case and shared by every contender; each run writes to an output
topic of its own, and its committed records are counted afterwards with a plain read_committed
consumer, so a contender that loses or repeats records shows in the results (``out ok``) instead
of passing for fast.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from devtools.processes import descendants, fork_servers, python_descendants
from pyspark_eos.protocol.process_stat import PROC, USER_TICKS, stat_fields
from pyspark_eos.testing.output_check import high_watermarks, last_stable_offsets

log = logging.getLogger(__name__)
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Scale:
    """Sizes of every scenario at one scale."""

    name: str
    partitions: int                # input partitions of copy, alone, per-batch, latency, memory, variants
    repeats: int                   # runs of each contender per case (scaling and latency: one)
    warm_up: bool                  # an unmeasured copy of each Spark contender before a case's runs
    copy_cases: tuple[tuple[int, int], ...]   # (record bytes, records)
    batch_records: int             # records per micro-batch (maxOffsetsPerTrigger) and per loop transaction
    alone_records: int
    scaling_partitions: tuple[int, ...]
    scaling_records: int           # in four micro-batches
    per_batch_sizes: tuple[int, ...]   # records per micro-batch
    per_batch_batches: int         # measured micro-batches per run
    per_batch_skipped: int         # each run's first micro-batches, left out (each worker's clients start there)
    fencing_partitions: tuple[int, ...]
    fencing_records: int
    fencing_batches: int           # micro-batches per copy
    fencing_claims: int            # write tasks' claims timed alone
    latency_rates: tuple[int, ...]  # records/s of the steady producer, a run of each contender at each
    latency_seconds: float         # per contender
    memory_minutes: float
    memory_rate: int
    variants_case: tuple[int, int, int]  # (record bytes, records, records per micro-batch)
    cold_cases: tuple[tuple[int, int], ...]  # (record bytes, records), each job in a fresh driver process
    cold_batch: int                # records per micro-batch of a cold job
    # The cold scenario's contenders (None: all): each job is a fresh driver of its own, tens of
    # seconds however few its records, so the smoke runs the two the comparison is between.
    cold_contenders: tuple[str, ...] | None = None

    def with_repeats(self, repeats: int) -> Scale:
        return replace(self, repeats=repeats)


SCALES = {
    # A few seconds per scenario: the test suite's check that every scenario still runs.
    "smoke": Scale("smoke", partitions=4, repeats=1, warm_up=False,
                   copy_cases=((100, 2_000),), batch_records=1_000, alone_records=2_000,
                   scaling_partitions=(8,), scaling_records=2_000,
                   per_batch_sizes=(500, 1_000), per_batch_batches=1, per_batch_skipped=1,
                   fencing_partitions=(4,), fencing_records=2_000, fencing_batches=2, fencing_claims=16,
                   latency_rates=(500,), latency_seconds=2, memory_minutes=0.05, memory_rate=500,
                   variants_case=(100, 2_000, 1_000),
                   cold_cases=((100, 2_000),), cold_batch=1_000, cold_contenders=("eos-kafka", "spark-kafka")),
    # About 5 minutes on 2 cores: every scenario, small inputs, one repeat; to try a change.
    "quick": Scale("quick", partitions=8, repeats=1, warm_up=True,
                   copy_cases=((100, 40_000), (1000, 40_000)), batch_records=10_000, alone_records=40_000,
                   scaling_partitions=(8, 64), scaling_records=16_000,
                   per_batch_sizes=(1_000, 5_000), per_batch_batches=4, per_batch_skipped=4,
                   fencing_partitions=(8, 64), fencing_records=40_000, fencing_batches=8, fencing_claims=200,
                   latency_rates=(1_000,), latency_seconds=30, memory_minutes=1, memory_rate=2_000,
                   variants_case=(1000, 100_000, 20_000),
                   cold_cases=((1000, 100_000), (100, 200_000)), cold_batch=25_000),
    # Enough records per batch to compare one change's effect.
    "medium": Scale("medium", partitions=8, repeats=2, warm_up=True,
                    copy_cases=((100, 400_000), (1000, 200_000)), batch_records=50_000, alone_records=200_000,
                    scaling_partitions=(8, 64, 256), scaling_records=64_000,
                    per_batch_sizes=(1_000, 10_000), per_batch_batches=12, per_batch_skipped=4,
                    fencing_partitions=(8, 64), fencing_records=100_000, fencing_batches=8, fencing_claims=200,
                    latency_rates=(2_000,), latency_seconds=60, memory_minutes=3, memory_rate=5_000,
                    variants_case=(1000, 600_000, 100_000),
                    cold_cases=((1000, 400_000), (100, 800_000)), cold_batch=100_000),
    # The figures to quote; per-task costs make 1024 partitions slow, hence one run per case there.
    "full": Scale("full", partitions=8, repeats=3, warm_up=True,
                  copy_cases=((100, 3_000_000), (1000, 2_000_000)), batch_records=100_000, alone_records=500_000,
                  scaling_partitions=(8, 64, 256, 1024), scaling_records=256_000,
                  per_batch_sizes=(1_000, 10_000, 100_000), per_batch_batches=8, per_batch_skipped=4,
                  fencing_partitions=(8, 64), fencing_records=400_000, fencing_batches=8, fencing_claims=200,
                  latency_rates=(5_000, 50_000), latency_seconds=120, memory_minutes=20, memory_rate=5_000,
                  variants_case=(1000, 2_000_000, 100_000),
                  cold_cases=((1000, 400_000), (1000, 1_000_000), (100, 800_000), (100, 2_000_000)),
                  cold_batch=100_000),
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
        produce(producer, topic, b"%d" % i, value, i % partitions)
        if (i + 1) % 200_000 == 0 or i + 1 == records:
            producer.flush(120)
            log.info("input %s: %d/%d records (%.0f s)", topic, i + 1, records, time.monotonic() - started)
    if producer.flush(120):
        raise RuntimeError(f"input {topic}: records still undelivered after 120 s")


def produce(producer: Producer, topic: str, key: bytes, value: bytes, partition: int) -> None:
    """One record, waiting out a full local queue."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


STEADY_RECORD_BYTES = 100


def sent_at_ns(value: bytes) -> int:
    """When SteadyInput produced the record with this value (nanoseconds since the epoch)."""
    return int(value[:20])


class SteadyInput(threading.Thread):
    """Writes ``rate`` records/s of STEADY_RECORD_BYTES into ``topic`` until ``seconds`` have
    passed; each value starts with the time it was produced (``sent_at_ns``)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, seconds: float):
        super().__init__(name="steady-input", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate, self.seconds = rate, seconds
        self.written = 0
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self._write()
        except Exception as error:  # noqa: BLE001 - raised by whoever waits for the writer
            self.error = error

    def _write(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        padding = b"x" * (STEADY_RECORD_BYTES - 20)
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < self.seconds:
            for _ in range(int(elapsed * self.rate) - self.written):
                produce(producer, self.topic, b"%d" % self.written, b"%020d" % time.time_ns() + padding,
                        self.written % self.partitions)
                self.written += 1
            producer.poll(0.01)
        if producer.flush(120):
            raise RuntimeError(f"{self.topic}: input records still undelivered after 120 s")

    def finish(self, progress=None, every_s: float = 60) -> int:
        """Waits for the writer to end, calling ``progress()`` every ``every_s``; the records written."""
        while self.is_alive():
            self.join(every_s)
            if self.is_alive() and progress is not None:
                progress()
        if self.error is not None:
            raise self.error
        return self.written


def count_committed(bootstrap: str, topic: str, partitions: int, timeout: float = 600.0) -> int:
    """Committed records in ``topic``, read with read_committed up to the last stable offsets."""
    ends = settled_ends(bootstrap, topic, partitions)
    # A fetch at a partition's end returns at once instead of waiting for records that never come.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bench-count"),
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 10})
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


def settled_ends(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> dict[int, int]:
    """The last stable offsets once every transaction on ``topic`` has ended (they reach the high
    watermarks), or after ``timeout``: a producer's commit returns before the broker has written
    the transaction's markers on every partition, and a count right after it would miss records."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        stable = last_stable_offsets(bootstrap, topic, partitions, admin)
        if stable == high_watermarks(bootstrap, topic, partitions, admin) or time.monotonic() > deadline:
            return stable
        time.sleep(0.05)  # the broker writes the markers; nothing to wait on


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


def process_cpu_seconds(jvm_pid: int) -> dict[str, object]:
    """CPU seconds so far of a run's processes, by group: ``spark jvm``; ``python``, the Spark JVM's
    Python processes (task workers, the Python sources' and sinks' driver-side runners), with the
    time of those that exited, which their parents hold as waited-for children's; ``kafka broker``;
    ``benchmark``, this process (the driver's Python side). Subtract two with ``cpu_spent``."""
    own, waited = stat_seconds(jvm_pid)
    # Each fork server with the processes it forked, counted together: a server that ends between
    # two readings (the suite's other Spark applications stop beside its benchmark smoke) then
    # takes its children's earlier time with it, instead of leaving it to be subtracted.
    servers = {server: [server, *descendants(server)] for server in fork_servers()}
    forked = {pid for pids in servers.values() for pid in pids}
    python = waited + sum(sum(stat_seconds(pid)) for pid in python_descendants(jvm_pid) if pid not in forked)
    return {"spark jvm": own, "python": python, "benchmark": stat_seconds(os.getpid())[0],
            "kafka broker": {pid: stat_seconds(pid)[0] for pid in _kafka_brokers()},
            "fork server": {server: sum(sum(stat_seconds(pid)) for pid in pids) for server, pids in servers.items()}}


def cpu_spent(before: dict, after: dict) -> dict[str, float]:
    """The CPU seconds of each group between two ``process_cpu_seconds``. Brokers count only when
    they ran at both: another's broker stopping meanwhile (the test suite's, beside the smoke) is no
    CPU of the run's."""
    spent = {group: after[group] - before[group] for group in after if group not in ("kafka broker", "fork server")}
    brokers_before, brokers_after = before["kafka broker"], after["kafka broker"]
    both = brokers_after.keys() & brokers_before.keys()
    spent["kafka broker"] = sum(brokers_after[pid] - brokers_before[pid] for pid in both)
    # What a fork server and the processes it forked ran (an exited child's time is the server's,
    # which waits for it). A server started meanwhile counts whole; one gone by then, not at all.
    servers_before = before["fork server"]
    spent["python"] += sum(seconds - servers_before.get(pid, 0.0) for pid, seconds in after["fork server"].items())
    return spent


def stat_seconds(pid: int) -> tuple[float, float]:
    """(own, waited-for children's) user + system CPU seconds of ``pid``; zeros once it is gone."""
    try:
        fields = stat_fields(pid)
    except OSError:
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(f) for f in fields[USER_TICKS:USER_TICKS + 4])
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
