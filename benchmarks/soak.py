"""The ``memory`` part: a long-running exactly-once copy at a steady input rate, Spark's Python
processes sampled all along (pyspark_eos.testing.processes), to show whether memory or Kafka clients grow with
the number of micro-batches.

The input is written while the query runs, at a fixed rate, so the query keeps running small
micro-batches (the case that runs the most batches per minute); at the end the output is checked
to hold every input record exactly once.
"""
from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import Producer

from pyspark_eos.testing.embedded_kafka import create_topic

from .contenders import Ground
from .workload import _produce as produce, count_committed, unique
from pyspark_eos.testing.processes import WorkerSampler

log = logging.getLogger(__name__)

RECORD_BYTES = 100


class SteadyInput(threading.Thread):
    """Writes ``rate`` records/s into ``topic`` until ``seconds`` have passed."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, seconds: float):
        super().__init__(name="steady-input", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate, self.seconds = rate, seconds
        self.written = 0
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self._write()
        except Exception as error:  # noqa: BLE001 - reported by the part
            self.error = error

    def _write(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 20})
        value = b"x" * RECORD_BYTES
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < self.seconds:
            due = int(elapsed * self.rate) - self.written
            for _ in range(due):
                produce(producer, self.topic, b"%d" % self.written, value, self.written % self.partitions)
                self.written += 1
            producer.poll(0.05)
        if producer.flush(120):
            raise RuntimeError(f"{self.topic}: input records still undelivered after 120 s")


def soak_copy(ground: Ground, minutes: float, rate: int, partitions: int, batch: int) -> dict:
    source = create_topic(ground.bootstrap, unique("soak-in"), partitions)
    output = create_topic(ground.bootstrap, unique("soak-out"), partitions)
    group = unique("bench-soak")
    query = _start(ground, source, output, group, batch)
    writer = SteadyInput(ground.bootstrap, source, partitions, rate, minutes * 60)
    with WorkerSampler(ground.jvm_pid, interval_s=5.0) as sampler:
        writer.start()
        while writer.is_alive():
            writer.join(60)
            if writer.is_alive():
                log.info("memory: %d records written, %d batches run", writer.written, _batches(query))
        if writer.error is not None:
            raise writer.error
        _wait_caught_up(query, writer.written)
    query.stop()
    written = writer.written
    out = count_committed(ground.bootstrap, output, partitions)
    return {"part": "memory", "contender": "eos-kafka", "minutes": minutes, "rate": rate, "records": written,
            "records_out": [out], "batches": _batches(query), "workers": sampler.summary(),
            "rss_mib_series": {str(t.pid): [(round(at), round(kb / 1024, 1)) for at, kb in t.rss_kb]
                               for t in sampler.traces.values() if t.role == "worker"}}


def _start(ground: Ground, source: str, output: str, group: str, batch: int):
    return (ground.spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", ground.bootstrap)
            .option("subscribe", source).option("startingOffsets", "earliest").option("kafka.group.id", group)
            .option("maxOffsetsPerTrigger", batch).load()
            .select("key", "value").writeStream.format("eos-kafka")
            .option("kafka.bootstrap.servers", ground.bootstrap).option("topic", output)
            .option("kafka.group.id", group).option("transactionalIdPrefix", unique("soak"))
            .option("checkpointLocation", str(ground.work / unique("checkpoint"))).start())


def _batches(query) -> int:
    progress = query.lastProgress
    return progress["batchId"] + 1 if progress else 0


def _wait_caught_up(query, written: int, timeout_s: float = 600) -> None:
    """Until the query's batches have read every record written (its progress' input rows)."""
    deadline = time.monotonic() + timeout_s
    read = 0
    while time.monotonic() < deadline:
        read = sum(p["numInputRows"] for p in query.recentProgress)
        if read >= written and not query.status["isDataAvailable"]:
            return
        time.sleep(1)  # polling the query's progress: nothing to wait on
    raise TimeoutError(f"the soak query read {read} of {written} records in {timeout_s:.0f} s after the input ended")
