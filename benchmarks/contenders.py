"""The contenders: each copies (or only reads, or only writes) the same input, and every run's
output is counted.

Kafka -> Kafka copy contenders:
- ``eos-kafka``: the eos-kafka source and sink, exactly-once (a Structured Streaming query); the
  source reads only the key and value it copies (``COPY_SCHEMA``);
- ``eos-kafka at-least-once``: the same with the sink's ``deliveryGuarantee=at-least-once`` (a
  transaction per task, no input offsets);
- ``spark-kafka``: Spark's own Kafka source and sink (at-least-once), the same query shape;
- ``spark-kafka -> eos-kafka``: Spark's Kafka source into the eos-kafka sink without a group,
  exactly-once by progress records (the sink's mode for any replayable source);
- ``kafka-copier``: Kafka's TransactionalMessageCopier (JVM, KIP-447 consume-transform-produce);
- ``python-loop``: one Python process, confluent-kafka consumer -> transactional producer;
- ``python-stream``: a Python streaming source and sink that only hand Arrow batches over, no
  Kafka (python_stream.py): what Spark charges any Python pipeline;
- ``jvm-stream``: Spark's text file source into its noop sink, the same records and micro-batches,
  no Kafka and no Python: what Spark's engine costs any pipeline (the cold scenario's CPU split).

Copies run ``Trigger.AvailableNow`` with ``maxOffsetsPerTrigger``, so a run is a series of
micro-batches whose durations Spark reports; the loop and the copier commit a transaction every
``batch`` records. ``steady_copy`` runs a query as records come (``processingTime`` 0) while a
producer writes at a fixed rate: the latency and memory scenarios.

This is the one module of the benchmarks that reaches inside eos-kafka: ``claim_cost_ms`` times a
write task's claim alone with the runtime's claims protocol.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import Observation
from pyspark.sql import functions as F

from pyspark_eos.protocol.claims_log import ClaimsClients, ClaimsLog
from pyspark_eos.sink.attempt_fencing import claim_attempt
from pyspark_eos.testing.embedded_kafka import create_topic, kafka_tool_command
from pyspark_eos.testing.fault_injection import ATTEMPT_FENCING_OFF, HOOKS_ENV, arm
from pyspark_eos.testing.local_spark import (COMPILED_SPARK_HOME_ENV, SPARK_DEFAULTS,
                                             executor_local_dirs, jars_not_in_spark, local_spark_session,
                                             spark_home_with_compiled_zip)
from pyspark_eos.testing.maven_jars import SPARK_KAFKA_CONNECTOR
from pyspark_eos.testing.output_check import last_stable_offsets

from devtools.processes import WorkerSampler

from .python_stream import SCHEMA as NULL_STREAM_SCHEMA, NullStream, counted
from .workload import (SteadyInput, busy_fraction, count_committed, cpu_spent, cpu_times, process_cpu_seconds,
                       sent_at_ns, unique, write_input)

log = logging.getLogger(__name__)

# Contenders that may write a record more than once (a retried task): their output is checked for
# every record at least once, the others' for every record exactly once.
AT_LEAST_ONCE = ("spark-kafka", "eos-kafka at-least-once")


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
        """The Spark JVM's process id: its Python processes are the ones sampled."""
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


def measured(label: str, contender, ground: Ground, *args, **kwargs) -> Run:
    """One run of ``contender(ground, source, partitions, records, ...)``, with the memory and Kafka
    clients of Spark's Python processes sampled; a contender that fails is reported as failed
    (``extra["error"]``, no records out) instead of ending the whole benchmark."""
    try:
        with WorkerSampler(ground.jvm_pid) as sampler:
            run = contender(ground, *args, **kwargs)
        run.extra["workers"] = sampler.summary()
        return run
    except Exception as error:  # noqa: BLE001 - any failure of a contender is a result to report
        log.exception("%s failed", label)
        return Run(label, float("inf"), args[2], 0, extra={"error": str(error)[:2000]})


# ----------------------------------------------------------------------------- attempt fencing

@contextlib.contextmanager
def attempt_fencing(ground: Ground, on: bool):
    """Runs inside with the sink's attempt fencing on, or switched off (fault injection's switch,
    which the Spark processes read only when fault injection was enabled before Spark started)."""
    if not on and not os.environ.get(HOOKS_ENV):
        raise RuntimeError("attempt fencing can be switched off only with fault injection enabled before Spark "
                           "starts (pyspark_eos.testing.fault_injection.enable())")
    switches = [] if on else [arm(ATTEMPT_FENCING_OFF, d) for d in executor_local_dirs(ground.spark)]
    try:
        yield
    finally:
        for switch in switches:
            switch.unlink(missing_ok=True)


def claim_cost_ms(ground: Ground, tasks: int, tasks_per_plan: int = 8) -> list[float]:
    """Milliseconds a write task spends in the claims protocol (append a claim, read the plan's
    claims, release), timed one task after another in one process, with no rival attempt."""
    group = unique("bench-claims")
    claims = ClaimsLog(ground.bootstrap, {}, unique("bench-claims"))
    clients = ClaimsClients(ground.bootstrap, {}, group, 60000)
    timings = []
    try:
        for index in range(tasks + tasks_per_plan):
            if index % tasks_per_plan == 0:
                plan = claims.open_plan(group)
            started = time.perf_counter()
            claim = claim_attempt(clients, [plan], group, [("input", index % tasks_per_plan)], index,
                                  f"task {index}", f"bench.{index % 2}")
            claim.enforce()
            claim.release()
            timings.append((time.perf_counter() - started) * 1000)
        clients.producer().flush(30)
    finally:
        clients.close()
        claims.close()
    return timings[tasks_per_plan:]  # the first plan's tasks pay for connecting


# ----------------------------------------------------------------------------- copy pipelines

# What a copy reads from the eos-kafka source: only the columns it writes (docs/source.md, Schema).
COPY_SCHEMA = "key binary, value binary"


def eos_kafka_copy(ground: Ground, source: str, partitions: int, records: int, batch: int,
                   sink_options: dict | None = None, name: str = "eos-kafka", source_options: dict | None = None,
                   schema: str | None = COPY_SCHEMA) -> Run:
    """``sink_options``/``source_options`` change or, with a None value, drop an option."""
    group, prefix = unique("bench-eos"), unique("bench")
    reader = _stream(ground, "eos-kafka", source, batch, {"kafka.group.id": group, **(source_options or {})}, schema)
    writer_options = {"kafka.group.id": group, "transactionalIdPrefix": prefix, **(sink_options or {})}
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


def spark_kafka_copy(ground: Ground, source: str, partitions: int, records: int, batch: int,
                     sink_options: dict | None = None) -> Run:
    return _run_stream(ground, "spark-kafka", _spark_source(ground, source, batch), "kafka", sink_options or {},
                       partitions, records)


def spark_source_eos_sink(ground: Ground, source: str, partitions: int, records: int, batch: int) -> Run:
    return _run_stream(ground, "spark-kafka -> eos-kafka", _spark_source(ground, source, batch), "eos-kafka",
                       {"transactionalIdPrefix": unique("bench")}, partitions, records)


def _spark_source(ground: Ground, topic: str, batch: int | None):
    return _stream(ground, "kafka", topic, batch, {"kafka.isolation.level": "read_committed"})


def _stream(ground: Ground, fmt: str, topic: str, batch: int | None, options: dict, schema: str | None = None):
    """A streaming read of ``topic`` from its start, ``batch`` records per micro-batch at most."""
    reader = (ground.spark.readStream.format(fmt).option("kafka.bootstrap.servers", ground.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    reader = reader if schema is None else reader.schema(schema)
    if batch is not None:
        reader = reader.option("maxOffsetsPerTrigger", batch)
    return reader.options(**_set(options)).load()


def _set(options: dict) -> dict:
    """The options that have a value (None: an option a variant dropped)."""
    return {key: value for key, value in options.items() if value is not None}


def _writer(ground: Ground, frame, fmt: str, output: str, options: dict):
    return (frame.select("key", "value").writeStream.format(fmt)
            .option("kafka.bootstrap.servers", ground.bootstrap).option("topic", output)
            .option("checkpointLocation", str(ground.work / unique("checkpoint"))).options(**_set(options)))


def python_stream_copy(ground: Ground, source: str, partitions: int, records: int, batch: int, size: int,
                       tasks: int | None = None, name: str = "python-stream") -> Run:
    """Spark's part of a Python pipeline: python_stream's source and sink, the same records in the
    same micro-batches and read tasks as eos-kafka's copy (one per core, or ``tasks``), no Kafka
    (``source`` unused).
    Its schema is given, as the eos-kafka copy's is (COPY_SCHEMA): without one Spark makes the
    source's Python instance in load(), before the query's clock starts; with one, at the query's
    start (PythonDataSourceV2.getOrCreateDataSourceInPython), and each contender pays that there."""
    ground.spark.dataSource.register(NullStream)
    counts = ground.work / unique("null-stream-counts")
    frame = (ground.spark.readStream.format(NullStream.name()).schema(NULL_STREAM_SCHEMA)
             .option("records", records).option("size", size)
             .option("tasks", tasks or ground.spark.sparkContext.defaultParallelism)
             .option("maxOffsetsPerTrigger", batch).load())
    return _run_stream(ground, name, frame, NullStream.name(), {"counts": str(counts)}, partitions,
                       records, written=lambda *_: counted(counts))


def jvm_stream_copy(ground: Ground, source: str, partitions: int, records: int, batch: int, size: int) -> Run:
    """What Spark's engine costs a copy without Python or Kafka: the same records as text files, one
    per input partition and micro-batch, through Spark's file source into its noop sink (``source``
    unused). Reading a text file costs more than nothing, so its CPU is a ceiling of the engine's
    part of Spark's connector's, and python-stream's CPU over it a floor of what Spark charges a
    Python pipeline."""
    directory = ground.work / unique("jvm-stream")
    _write_text_files(directory, records, -(-batch // partitions), size)
    frame = (ground.spark.readStream.format("text").option("maxFilesPerTrigger", partitions).load(str(directory))
             .select(F.lit(None).cast("binary").alias("key"), F.col("value").cast("binary").alias("value")))
    try:
        return _run_stream(ground, "jvm-stream", frame, "noop", {}, partitions, records,
                           written=lambda _, progress: sum(p["numInputRows"] for p in progress))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _write_text_files(directory: Path, records: int, per_file: int, size: int) -> None:
    """``records`` lines of ``size`` bytes in files of ``per_file`` lines, named in the order the
    file source takes them (by modification time, then by name)."""
    directory.mkdir(parents=True)
    line = b"x" * size + b"\n"
    for number, first in enumerate(range(0, records, per_file)):
        (directory / f"{number:06d}.txt").write_bytes(line * min(per_file, records - first))


def _run_stream(ground: Ground, name: str, frame, fmt: str, options: dict, partitions: int, records: int,
                written=None) -> Run:
    """``written(output topic, the query's progress)``: the records the run wrote (default: those
    committed in the topic)."""
    output = create_topic(ground.bootstrap, unique("out-" + re.sub(r"[^A-Za-z0-9]+", "-", name)), partitions)
    writer = _writer(ground, frame, fmt, output, options).trigger(availableNow=True)
    jvm = ground.jvm_pid
    started, cpu, by_process = time.perf_counter(), cpu_times(), process_cpu_seconds(jvm)
    query = writer.start()
    query.awaitTermination()
    seconds, busy = time.perf_counter() - started, busy_fraction(cpu, cpu_times())
    cpu_s = cpu_spent(by_process, process_cpu_seconds(jvm))
    every = query.recentProgress
    progress = [p for p in every if p["numInputRows"] > 0]
    batches = [p["durationMs"]["triggerExecution"] for p in progress]
    # The run's time that no batch accounts for: starting and stopping the query (its source's and
    # sink's set-up and close among them), and the empty batch that ends an AvailableNow run.
    outside = seconds * 1000 - sum(p["durationMs"].get("triggerExecution", 0) for p in every)
    written = written or (lambda topic, _: count_committed(ground.bootstrap, topic, partitions))
    return Run(name, seconds, records, written(output, every), batches,
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


# ------------------------------------------------------------------------------- cold jobs

BENCHMARKS_ROOT = Path(__file__).resolve().parent.parent


# A cold job's contender run with Spark's Python processes started from a pyspark.zip holding
# compiled bytecode (``python -m pyspark_eos compile-pyspark-zip``), in a Spark home of its own;
# the others from the installed PySpark's, whatever the benchmark itself was started with.
COMPILED_ZIP = " + compiled pyspark.zip"
# A cold job's contender without the recommended settings that local_spark_session applies: Spark
# starts its Python processes from this interpreter, not warm from pyspark-eos-python, and talks to
# them over loopback TCP, Spark's default.
WITH_SPARK_DEFAULTS = " + Spark's defaults"


def cold_job(ground: Ground, source: str, partitions: int, records: int, batch: int, name: str, size: int,
             driver_log: Path | None = None) -> Run:
    """``name``'s copy in a fresh driver process of its own (``cold_job.py``): a Spark session, one
    AvailableNow query, the end. Timed from the query's start(); the process's whole life, Spark's
    start included, is ``extra["process_s"]``. ``driver_log``: where the driver's log goes."""
    copy = name.removesuffix(COMPILED_ZIP).removesuffix(WITH_SPARK_DEFAULTS)
    command = [sys.executable, "-m", "benchmarks.cold_job", "--contender", copy, "--bootstrap", ground.bootstrap,
               "--source", source, "--partitions", str(partitions), "--records", str(records), "--batch", str(batch),
               "--size", str(size), "--work", str(ground.work / unique("cold"))]
    env = {key: value for key, value in os.environ.items() if key != COMPILED_SPARK_HOME_ENV}
    if name.endswith(WITH_SPARK_DEFAULTS):
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        command += [f"--conf={key}={value}" for key, value in SPARK_DEFAULTS.items()]
    if name.endswith(COMPILED_ZIP):
        env[COMPILED_SPARK_HOME_ENV] = str(spark_home_with_compiled_zip())
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=BENCHMARKS_ROOT, env=env)
    process_s = time.perf_counter() - started
    if driver_log is not None:
        driver_log.write_text(result.stderr)
    if result.returncode != 0:
        raise RuntimeError(f"the cold job of {name} exited with {result.returncode}: {result.stderr[-3000:]}")
    run = Run(**json.loads(result.stdout.strip().splitlines()[-1]))
    run.contender = name
    run.extra["process_s"] = round(process_s, 3)
    return run


# --------------------------------------------------------------------------- source, sink alone

FORMATS = {"eos-kafka": "eos-kafka", "spark-kafka": "kafka"}


def source_alone(ground: Ground, source: str, partitions: int, records: int, name: str) -> Run:
    """A batch read of ``source`` into Spark's noop sink; the rows read are counted as they pass."""
    reader = (ground.spark.read.format(FORMATS[name]).option("kafka.bootstrap.servers", ground.bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest"))
    if name == "spark-kafka":
        reader = reader.option("kafka.isolation.level", "read_committed")
    rows = Observation(unique("read"))
    started = time.perf_counter()
    reader.load().observe(rows, F.count(F.lit(1)).alias("rows")).write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    return Run(name, seconds, records, rows.get["rows"])


def sink_alone(ground: Ground, source: str, partitions: int, records: int, name: str, size: int = 100) -> Run:
    """A batch write of ``records`` generated rows (``source`` unused)."""
    frame = ground.spark.range(records, numPartitions=partitions).selectExpr(
        "CAST(id AS STRING) AS key", f"repeat('x', {size}) AS value")
    output = create_topic(ground.bootstrap, unique(f"out-sink-{name}"), partitions)
    started = time.perf_counter()
    (frame.write.format(FORMATS[name]).mode("append").option("kafka.bootstrap.servers", ground.bootstrap)
     .option("topic", output).save())
    seconds = time.perf_counter() - started
    return Run(name, seconds, records, count_committed(ground.bootstrap, output, partitions))


# --------------------------------------------------------------------- copies as records come

@dataclass
class SteadyRun:
    contender: str
    seconds: float
    records: int
    records_out: int
    batches: int
    latencies: list[tuple[int, float]]  # (sent at, ns since the epoch; ms until a read_committed consumer had it)
    workers: list[dict]
    rss_mib_series: dict[str, list[tuple[int, float]]]  # per Python worker: (seconds, MiB)
    catch_up_s: float  # from the input's end until the query had read every record
    batch_ms: list[float]  # the query's last micro-batches with input (Spark keeps 100): each one's duration
    between_ms: list[float]  # from each of those batches' end to the next one's start (between_batches_ms)


def steady_copy(ground: Ground, name: str, partitions: int, rate: int, seconds: float, batch: int | None = None,
                sample_every_s: float | None = None, probe: bool = False) -> SteadyRun:
    """``name`` (eos-kafka or spark-kafka) copying records as a producer writes ``rate`` records/s
    for ``seconds``, the query started first and running micro-batches back to back; with
    ``sample_every_s`` Spark's Python processes are sampled, with ``probe`` each record's latency
    from its producer to a read_committed consumer of the output is kept."""
    source = create_topic(ground.bootstrap, unique("steady-in"), partitions)
    output = create_topic(ground.bootstrap, unique("steady-out"), partitions)
    query = _continuous_copy(ground, name, source, output, batch)
    latency = LatencyProbe(ground.bootstrap, output, partitions) if probe else None
    writer = SteadyInput(ground.bootstrap, source, partitions, rate, seconds)
    sampler = WorkerSampler(ground.jvm_pid, sample_every_s or 3600.0)
    try:
        _wait_for_start(query)
        with sampler if sample_every_s else contextlib.nullcontext():
            if latency:
                latency.start()
            started = time.monotonic()
            writer.start()
            written = writer.finish(lambda: log.info("%s: %d records written, %d batches run", name, writer.written,
                                                     _batches(query)))
            input_ended = time.monotonic()
            _wait_caught_up(query, written)
            catch_up_s = time.monotonic() - input_ended
            elapsed = time.monotonic() - started
        if latency:
            latency.wait_for(written)
    finally:
        query.stop()
        if latency:
            latency.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    return SteadyRun(name, elapsed, written, count_committed(ground.bootstrap, output, partitions), _batches(query),
                     latency.latencies if latency else [], sampler.summary() if sample_every_s else [],
                     {str(t.pid): [(round(at), round(kb / 1024, 1)) for at, kb in t.rss_kb]
                      for t in sampler.traces.values() if t.role == "worker"}, catch_up_s,
                     [p["durationMs"]["triggerExecution"] for p in progress], between_batches_ms(progress))


def between_batches_ms(progress: list[dict]) -> list[float]:
    """From each micro-batch's end (its start, ``timestamp``, plus ``triggerExecution``) to the next
    one's start, for consecutive progress entries: what a query running batches back to back spends
    outside Spark's trigger (reporting the progress, the trigger's own loop)."""
    def start_ms(entry: dict) -> float:
        return datetime.fromisoformat(entry["timestamp"]).timestamp() * 1000

    return [start_ms(b) - start_ms(a) - a["durationMs"]["triggerExecution"] for a, b in zip(progress, progress[1:])]


def _continuous_copy(ground: Ground, name: str, source: str, output: str, batch: int | None):
    if name == "eos-kafka":
        group = unique("bench-steady")
        frame = _stream(ground, "eos-kafka", source, batch, {"kafka.group.id": group}, COPY_SCHEMA)
        fmt, options = "eos-kafka", {"kafka.group.id": group, "transactionalIdPrefix": unique("steady")}
    elif name == "spark-kafka":
        frame, fmt, options = _spark_source(ground, source, batch), "kafka", {}
    else:
        raise ValueError(f"no steady copy for {name!r}")
    return _writer(ground, frame, fmt, output, options).trigger(processingTime="0 seconds").start()


def _wait_for_start(query, timeout_s: float = 120) -> None:
    """Until the query has set up its source and sink and found no input yet."""
    deadline = time.monotonic() + timeout_s
    while query.status["message"] != "Waiting for data to arrive":
        if query.exception() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the query did not start in {timeout_s:.0f} s: {query.exception() or query.status}")
        time.sleep(0.1)  # polling the query's status: nothing to wait on


def _batches(query) -> int:
    progress = query.lastProgress
    return progress["batchId"] + 1 if progress else 0


def _wait_caught_up(query, written: int, timeout_s: float = 600) -> None:
    """Until the query's batches have read every record written (its progress' input rows)."""
    deadline = time.monotonic() + timeout_s
    read = 0
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        read = sum(p["numInputRows"] for p in query.recentProgress)
        if read >= written and not query.status["isDataAvailable"]:
            return
        time.sleep(0.2)  # polling the query's progress: nothing to wait on
    raise TimeoutError(f"the query read {read} of {written} records in {timeout_s:.0f} s after the input ended")


class LatencyProbe(threading.Thread):
    """Reads a topic with read_committed as its records become visible, keeping each record's
    latency from the time its value says it was produced (SteadyInput) to the time read here."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        super().__init__(name="latency-probe", daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bench-latency"),
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 10})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.latencies: list[tuple[int, float]] = []
        self._stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopped.is_set():
                for message in self.consumer.consume(1000, 0.1):
                    read = time.time_ns()
                    if message.error() is None:
                        sent = sent_at_ns(message.value())
                        self.latencies.append((sent, (read - sent) / 1e6))
        finally:
            self.consumer.close()

    def wait_for(self, records: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.latencies) < records and time.monotonic() < deadline:
            time.sleep(0.1)  # the probe's thread appends; nothing to wait on

    def stop(self) -> None:
        self._stopped.set()
        self.join(30)
