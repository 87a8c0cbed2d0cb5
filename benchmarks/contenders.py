"""What is measured: each contender copies (or only reads, or only writes) the same input.

Kafka -> Kafka copy contenders:
- ``eos-kafka``: the eos-kafka source and sink, exactly-once (a Structured Streaming query); the
  source reads only the key and value it copies (``COPY_SCHEMA``);
- ``spark-kafka``: Spark's own Kafka source and sink (at-least-once), the same query shape;
- ``spark-kafka -> eos-kafka``: Spark's Kafka source into the eos-kafka sink without a group,
  exactly-once by progress records (the sink's mode for any replayable source): what skipping the
  eos-kafka source, and Spark's Python process that runs it for each query, comes to;
- ``kafka-copier``: Kafka's TransactionalMessageCopier (JVM, KIP-447 consume-transform-produce);
- ``python-loop``: one Python process, confluent-kafka consumer -> transactional producer.

Streaming contenders run ``Trigger.AvailableNow`` with ``maxOffsetsPerTrigger``, so a run is a
series of micro-batches whose durations Spark reports; the loop and the copier commit a
transaction every ``batch_records`` records.
"""
from __future__ import annotations

import contextlib
import json
import logging
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from pyspark_eos.sink.attempt_fencing import ClaimsLog, FencingClients, claim_attempt
from pyspark_eos.testing.embedded_kafka import create_topic, kafka_tool_command
from pyspark_eos.testing.fault_injection import ATTEMPT_FENCING_OFF, arm
from pyspark_eos.testing.local_spark import executor_local_dirs, jars_not_in_spark, local_spark_session
from pyspark_eos.testing.maven_jars import SPARK_KAFKA_CONNECTOR
from pyspark_eos.testing.output_check import last_stable_offsets

from .python_stream import NullStream, counted
from .workload import busy_fraction, count_committed, cpu_times, process_cpu_seconds, unique, write_input

log = logging.getLogger(__name__)


@dataclass
class Run:
    contender: str
    seconds: float
    records_in: int
    records_out: int
    batch_ms: list[float] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def records_per_second(self) -> float:
        return self.records_in / self.seconds


@dataclass
class Ground:
    """Where a contender runs: the broker, the Spark session, a directory for checkpoints."""

    bootstrap: str
    spark: object
    work: Path

    @property
    def jvm_pid(self) -> int:
        """The Spark JVM's process id: its Python processes are the ones sampled (pyspark_eos.testing.processes)."""
        return int(self.spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def start_ground(bootstrap: str, work: Path, conf: dict[str, str] | None = None) -> Ground:
    """A local[2] session with Spark's own Kafka connector beside eos-kafka, on the given broker;
    ``conf``: more Spark settings for the session."""
    jars = ",".join(str(j) for j in jars_not_in_spark(SPARK_KAFKA_CONNECTOR.jars()))
    spark = local_spark_session("local[2]", app_name="eos-kafka benchmarks", conf={
        "spark.jars": jars, "spark.sql.streaming.numRecentProgressUpdates": "10000", **(conf or {})})
    return Ground(bootstrap, spark, work)


def warm_up(ground: Ground) -> None:
    """One small copy with each Spark contender, unmeasured: JVM code paths, Python workers and
    their imports start before the first measured run instead of inside it."""
    source = create_topic(ground.bootstrap, unique("warm-up"), 2)
    write_input(ground.bootstrap, source, 2000, 100, 2)
    eos_kafka_copy(ground, source, 2, 2000, 1000)
    spark_kafka_copy(ground, source, 2, 2000, 1000)


@contextlib.contextmanager
def attempt_fencing(ground: Ground, on: bool):
    """Runs inside with the sink's attempt fencing on, or switched off (fault injection's switch)."""
    switches = [] if on else [arm(ATTEMPT_FENCING_OFF, d) for d in executor_local_dirs(ground.spark)]
    try:
        yield
    finally:
        for switch in switches:
            switch.unlink(missing_ok=True)


def claim_cost_ms(ground: Ground, tasks: int = 200, tasks_per_plan: int = 8) -> list[float]:
    """Milliseconds a write task spends in the claims protocol (append a claim, read the plan's
    claims, release), timed one task after another in one process, with no rival attempt."""
    group = unique("bench-claims")
    claims = ClaimsLog(ground.bootstrap, {}, unique("bench-claims"))
    clients = FencingClients(ground.bootstrap, {}, group, 60000)
    timings = []
    for index in range(tasks):
        if index % tasks_per_plan == 0:
            plan = claims.open_plan(group)
        started = time.perf_counter()
        claim = claim_attempt(clients, [plan], group, [("input", index % tasks_per_plan)], index,
                              f"task {index}", f"bench.{index % 2}")
        claim.enforce()
        claim.release()
        timings.append((time.perf_counter() - started) * 1000)
    clients.producer().flush(30)
    return timings[tasks_per_plan:]  # the first plan's tasks pay for connecting


# ----------------------------------------------------------------------------- copy pipelines

# What a copy reads from the eos-kafka source: only the columns it writes (docs/source.md, Schema).
COPY_SCHEMA = "key binary, value binary"


def eos_kafka_copy(ground: Ground, source: str, partitions: int, records: int, batch: int,
                   sink_options: dict | None = None, name: str = "eos-kafka", source_options: dict | None = None,
                   schema: str | None = COPY_SCHEMA) -> Run:
    group, prefix = unique("bench-eos"), unique("bench")
    source_options = {"kafka.group.id": group, **(source_options or {})}
    if (sink_options or {}).get("transactionalIdPer") == "partition":
        source_options["minRecordsPerPartition"] = 1  # its ids need one input partition per task
    reader = _stream(ground, "eos-kafka", source, batch, source_options, schema)
    writer_options = {"kafka.group.id": group, "transactionalIdPrefix": prefix, **(sink_options or {})}
    writer_options = {key: value for key, value in writer_options.items() if value is not None}
    run = _run_stream(ground, name, reader, "eos-kafka", writer_options, partitions, records)
    run.extra["prefix"] = prefix
    return run


def eos_kafka_at_least_once(ground: Ground, source: str, partitions: int, records: int, batch: int) -> Run:
    """The sink's deliveryGuarantee=at-least-once: a transaction per task, no input offsets."""
    return eos_kafka_copy(ground, source, partitions, records, batch,
                          {"kafka.group.id": None, "deliveryGuarantee": "at-least-once"}, "eos-kafka at-least-once")


def transactional_ids(ground: Ground, prefix: str) -> int:
    """How many transactional ids (one producer each) a run used, per Kafka's TransactionsCommand."""
    listing = _kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", ground.bootstrap, "list")
    return sum(1 for line in listing.splitlines()[1:] if line.split() and line.split()[0].startswith(prefix + "."))


def _kafka_tool(main_class: str, *args: str, timeout: float = 120) -> str:
    result = subprocess.run([*kafka_tool_command(main_class), *args], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{main_class} failed: {result.stderr[-3000:]}")
    return result.stdout


def spark_kafka_copy(ground: Ground, source: str, partitions: int, records: int, batch: int) -> Run:
    return _run_stream(ground, "spark-kafka", _spark_source(ground, source, batch), "kafka", {}, partitions, records)


def spark_source_eos_sink(ground: Ground, source: str, partitions: int, records: int, batch: int) -> Run:
    return _run_stream(ground, "spark-kafka -> eos-kafka", _spark_source(ground, source, batch), "eos-kafka",
                       {"transactionalIdPrefix": unique("bench")}, partitions, records)


def _spark_source(ground: Ground, topic: str, batch: int):
    return _stream(ground, "kafka", topic, batch, {"kafka.isolation.level": "read_committed"})


def _stream(ground: Ground, fmt: str, topic: str, batch: int, options: dict, schema: str | None = None):
    reader = (ground.spark.readStream.format(fmt).option("kafka.bootstrap.servers", ground.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", batch))
    reader = reader if schema is None else reader.schema(schema)
    for key, value in options.items():
        if value is not None:  # None: an option a variant dropped
            reader = reader.option(key, value)
    return reader.load()


def python_stream_copy(ground: Ground, source: str, partitions: int, records: int, batch: int, size: int) -> Run:
    """Spark's part of a Python pipeline: python_stream's source and sink, the same records in the
    same micro-batches and read tasks as eos-kafka's copy (one per core), no Kafka (``source`` unused)."""
    ground.spark.dataSource.register(NullStream)
    counts = ground.work / unique("null-stream-counts")
    frame = (ground.spark.readStream.format(NullStream.name()).option("records", records).option("size", size)
             .option("tasks", ground.spark.sparkContext.defaultParallelism).option("maxOffsetsPerTrigger", batch)
             .load())
    return _run_stream(ground, "python-stream", frame, NullStream.name(), {"counts": str(counts)}, partitions,
                       records, written=lambda _: counted(counts))


def _run_stream(ground: Ground, name: str, frame, fmt: str, options: dict, partitions: int, records: int,
                written=None) -> Run:
    """``written(output topic)``: the records the run wrote (default: those committed in the topic)."""
    output = create_topic(ground.bootstrap, unique("out-" + re.sub(r"[^A-Za-z0-9]+", "-", name)), partitions)
    writer = (frame.select("key", "value").writeStream.format(fmt)
              .option("kafka.bootstrap.servers", ground.bootstrap).option("topic", output)
              .option("checkpointLocation", str(ground.work / unique("checkpoint")))
              .trigger(availableNow=True))
    for key, value in options.items():
        writer = writer.option(key, value)
    jvm = ground.jvm_pid
    started, cpu, by_process = time.perf_counter(), cpu_times(), process_cpu_seconds(jvm)
    query = writer.start()
    query.awaitTermination()
    seconds, busy = time.perf_counter() - started, busy_fraction(cpu, cpu_times())
    cpu_s = {group: spent - by_process[group] for group, spent in process_cpu_seconds(jvm).items()}
    every = query.recentProgress
    progress = [p for p in every if p["numInputRows"] > 0]
    batches = [p["durationMs"]["triggerExecution"] for p in progress]
    # The run's time that no batch accounts for: starting and stopping the query (its source's and
    # sink's set-up and close among them), and the empty batch that ends an AvailableNow run.
    outside = seconds * 1000 - sum(p["durationMs"].get("triggerExecution", 0) for p in every)
    written = written or (lambda topic: count_committed(ground.bootstrap, topic, partitions))
    return Run(name, seconds, records, written(output), batches,
               {"batches": len(batches), "cpu_busy": busy, "outside_batches_ms": round(outside), "cpu_s": cpu_s,
                "phases_ms": phase_medians([p["durationMs"] for p in progress]),
                "batch_phases_ms": [p["durationMs"] for p in progress]})


# Spark's phases of a micro-batch (StreamingQueryProgress.durationMs): the source's latestOffset,
# planning, addBatch (the tasks, reading and writing, and the sink's commit), the offset and
# commit logs.
PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def phase_medians(durations: list[dict]) -> dict[str, float]:
    """Median milliseconds of each phase over the micro-batches (those that read something)."""
    return {phase: statistics.median(d.get(phase, 0) for d in durations) for phase in PHASES} if durations else {}


def kafka_copier(ground: Ground, source: str, partitions: int, records: int, batch: int) -> Run:
    """TransactionalMessageCopier in group mode: one JVM consuming every partition of the input."""
    output = create_topic(ground.bootstrap, unique("out-copier"), partitions)
    started = time.perf_counter()
    stdout = _kafka_tool("org.apache.kafka.tools.TransactionalMessageCopier",
                         "--broker-list", ground.bootstrap, "--input-topic", source, "--input-partition", "0",
                         "--output-topic", output, "--transactional-id", unique("copier"),
                         "--consumer-group", unique("bench-copier"), "--transaction-size", str(batch),
                         "--max-messages", str(records), "--group-mode", "--use-group-metadata", timeout=3600)
    seconds = time.perf_counter() - started
    status = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return Run("kafka-copier", seconds, records, count_committed(ground.bootstrap, output, partitions), [],
               {"status": status[-1] if status else None, "includes_jvm_start": True})


def python_loop(ground: Ground, source: str, partitions: int, records: int, batch: int) -> Run:
    """The Python client's ceiling here: consume -> produce -> send offsets -> commit, one process."""
    output = create_topic(ground.bootstrap, unique("out-loop"), partitions)
    ends = last_stable_offsets(ground.bootstrap, source, partitions)
    consumer = Consumer({"bootstrap.servers": ground.bootstrap, "group.id": unique("bench-loop"),
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(source, p, 0) for p in range(partitions)])
    producer = Producer({"bootstrap.servers": ground.bootstrap, "transactional.id": unique("loop"),
                         "linger.ms": 5})
    producer.init_transactions(60)
    batches: list[float] = []
    positions: dict[int, int] = {}
    started = time.perf_counter()
    try:
        while any(positions.get(p, 0) < ends[p] for p in range(partitions) if ends[p] > 0):
            batch_started = time.perf_counter()
            producer.begin_transaction()
            _copy_some(consumer, producer, source, output, positions, batch, ends)
            producer.send_offsets_to_transaction([TopicPartition(source, p, o) for p, o in positions.items()],
                                                 consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(120)
            batches.append((time.perf_counter() - batch_started) * 1000)
    finally:
        consumer.close()
    seconds = time.perf_counter() - started
    return Run("python-loop", seconds, records, count_committed(ground.bootstrap, output, partitions), batches)


def _copy_some(consumer: Consumer, producer: Producer, source: str, output: str, positions: dict[int, int],
               batch: int, ends: dict[int, int]) -> int:
    copied = 0
    while copied < batch and any(positions.get(p, 0) < end for p, end in ends.items() if end > 0):
        for message in consumer.consume(min(10_000, batch - copied), 0.2):
            if message.error() is not None:
                raise RuntimeError(f"consume failed: {message.error()}")
            while True:
                try:
                    producer.produce(output, key=message.key(), value=message.value(), partition=message.partition())
                    break
                except BufferError:
                    producer.poll(0.05)
            copied += 1
        # The consumer's position, not the last record + 1: it has passed transaction markers too.
        for tp in consumer.position([TopicPartition(source, p) for p in ends]):
            if tp.offset >= 0:
                positions[tp.partition] = tp.offset
    return copied


# --------------------------------------------------------------------------- source, sink alone

def read_into_noop(ground: Ground, fmt: str, source: str, options: dict) -> float:
    reader = (ground.spark.read.format(fmt).option("kafka.bootstrap.servers", ground.bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    started = time.perf_counter()
    reader.load().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


FORMATS = {"eos-kafka": "eos-kafka", "spark-kafka": "kafka"}


def source_alone(ground: Ground, source: str, partitions: int, records: int, name: str) -> Run:
    options = {"kafka.isolation.level": "read_committed"} if name == "spark-kafka" else {}
    return Run(name, read_into_noop(ground, FORMATS[name], source, options), records, records)


def sink_alone(ground: Ground, source: str, partitions: int, records: int, name: str, size: int = 100) -> Run:
    frame = ground.spark.range(records, numPartitions=partitions).selectExpr(
        "CAST(id AS STRING) AS key", f"repeat('x', {size}) AS value")
    output = create_topic(ground.bootstrap, unique(f"out-sink-{name}"), partitions)
    started = time.perf_counter()
    (frame.write.format(FORMATS[name]).mode("append").option("kafka.bootstrap.servers", ground.bootstrap)
     .option("topic", output).save())
    seconds = time.perf_counter() - started
    return Run(name, seconds, records, count_committed(ground.bootstrap, output, partitions))
