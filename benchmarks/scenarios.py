"""The scenarios: each measures one question on the ground (``contenders.Ground``) at a scale
(``workload.Scale``), prints its table and returns its result rows (``report.summarize``).

Every scenario checks its output: each run's records are counted in its output topic (or, for
the source alone, as they pass), and the tables' ``out ok`` says whether every input record came
out exactly once (at least once for the at-least-once contenders, ``contenders.AT_LEAST_ONCE``).
"""
from __future__ import annotations

import contextlib
import logging
import statistics
from dataclasses import dataclass, field

from pyspark_eos.testing.embedded_kafka import create_topic

from . import cold_job, contenders, report
from .contenders import Ground, Run, measured
from .workload import Scale, unique, write_input

log = logging.getLogger("benchmarks")


@dataclass(frozen=True)
class Variant:
    """eos-kafka with some options changed: ``source.<option>=<value>``, ``sink.<option>=<value>``
    and ``conf.<Spark setting>=<value>`` (a Spark setting for this variant's runs only; an empty
    value drops an option or unsets a setting). ``source.schema=`` reads every Kafka column
    (default ``contenders.COPY_SCHEMA``)."""

    name: str
    source: dict = field(default_factory=dict)
    sink: dict = field(default_factory=dict)
    conf: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, name: str, settings: list[str]) -> Variant:
        options: dict[str, dict] = {"source": {}, "sink": {}, "conf": {}}
        for setting in settings:
            side, _, assignment = setting.partition(".")
            key, equals, value = assignment.partition("=")
            if side not in options or not equals:
                raise ValueError(f"variant {name}: {setting!r} is not source.<option>=<value>, sink.<option>=<value> "
                                 "or conf.<Spark setting>=<value>")
            options[side][key] = value or None
        if name in BASELINES and settings:
            raise ValueError(f"variant {name} is a contender of its own and takes no settings")
        return cls(name, options["source"], options["sink"], options["conf"])

    def describe(self) -> str:
        return " ".join(f"{side}.{key}={value or ''}" for side, settings in
                        (("source", self.source), ("sink", self.sink), ("conf", self.conf))
                        for key, value in settings.items())


# Variants that are other contenders: Spark's connector and eos-kafka with its defaults always
# run; python-stream (a Python source and sink with no Kafka) when named.
SPARK, EOS, PYTHON_STREAM = "spark-kafka", "eos-kafka", "python-stream"
BASELINES = (SPARK, EOS, PYTHON_STREAM)


@dataclass(frozen=True)
class Options:
    """What a run asks of the scenarios beyond its scale: the variants scenario's variants
    (default: python-stream) and its case (record bytes, records, records per micro-batch;
    default: the scale's)."""

    variants: tuple[Variant, ...] = (Variant(PYTHON_STREAM),)
    variants_case: tuple[int, int, int] | None = None


def prepared_input(ground: Ground, records: int, size: int, partitions: int) -> str:
    topic = create_topic(ground.bootstrap, unique(f"in-{size}b-{partitions}p"), partitions)
    write_input(ground.bootstrap, topic, records, size, partitions)
    return topic


# ------------------------------------------------------------------------------------ copy

COPY_CONTENDERS = {
    "eos-kafka": contenders.eos_kafka_copy,
    "eos-kafka at-least-once": contenders.eos_kafka_at_least_once,
    "spark-kafka": contenders.spark_kafka_copy,
    "spark-kafka -> eos-kafka": contenders.spark_source_eos_sink,
    "kafka-copier": contenders.kafka_copier,
    "python-loop": contenders.python_loop,
}
# Spark stops a Python worker idle for a minute (PythonWorkerFactory, not configurable): the Spark
# contenders' repeats run one after another, after an unmeasured warm-up copy of their own, and
# the contenders outside Spark after them, so that every Spark run finds warm workers, as its JVM
# code is warm (a query that starts new workers pays 2-3 s more in its first batch, JOURNAL.md).
SPARK_COPY_CONTENDERS = ("eos-kafka", "eos-kafka at-least-once", "spark-kafka", "spark-kafka -> eos-kafka")


def copy(ground: Ground, scale: Scale, options: Options) -> list[dict]:
    rows = []
    outside_spark = [name for name in COPY_CONTENDERS if name not in SPARK_COPY_CONTENDERS]
    for size, records in scale.copy_cases:
        source = prepared_input(ground, records, size, scale.partitions)
        runs: dict[str, list[Run]] = {name: [] for name in COPY_CONTENDERS}
        if scale.warm_up:
            contenders.warm_up(ground)
        for names in (SPARK_COPY_CONTENDERS, outside_spark):
            for repeat in range(scale.repeats):
                for name in names:
                    run = measured(name, COPY_CONTENDERS[name], ground, source, scale.partitions, records,
                                   scale.batch_records)
                    runs[name].append(run)
                    log.info("copy %d B, repeat %d/%d: %s %.1f s (%.0f records/s)", size, repeat + 1, scale.repeats,
                             name, run.seconds, run.records_per_second)
        rows += [report.summarize("copy", {"record_bytes": size}, r) for r in runs.values()]
    report.print_table("Kafka -> Kafka copy", rows, ("record_bytes",))
    report.print_worker_peaks(rows, ("eos-kafka", "spark-kafka"))
    return rows


# ----------------------------------------------------------------------------------- alone

def alone(ground: Ground, scale: Scale, options: Options) -> list[dict]:
    source = prepared_input(ground, scale.alone_records, 100, scale.partitions)
    rows = []
    for side, measure in (("source", contenders.source_alone), ("sink", contenders.sink_alone)):
        runs: dict[str, list[Run]] = {EOS: [], SPARK: []}
        for repeat in range(scale.repeats):
            for name in runs:
                runs[name].append(measured(name, measure, ground, source, scale.partitions, scale.alone_records, name))
            log.info("%s alone, repeat %d/%d done", side, repeat + 1, scale.repeats)
        rows += [report.summarize("alone", {"side": side}, r) for r in runs.values()]
    report.print_table("Source alone (into noop) and sink alone (generated rows)", rows, ("side",))
    return rows


# --------------------------------------------------------------------------------- scaling

SCALING_BATCHES = 4
SCALING_RECORD_BYTES = 100


# Spark's connector's idempotent producer, answered NOT_LEADER_OR_FOLLOWER by a partition of the
# just-created output topic, retried the batches in flight behind it on OUT_OF_ORDER_SEQUENCE_NUMBER
# until their delivery timeout (120 s) expired them: the tasks failed and ran again, at 64
# partitions and more. Without idempotence (the connector is at-least-once either way) it completes.
SCALING_SPARK_SINK = {"kafka.enable.idempotence": "false"}


# eos-kafka again with a task per input partition, as Spark's connector runs (minRecordsPerPartition=1
# keeps ranges from sharing a task): its protocol's cost per task, against the connector's per task.
TASK_PER_PARTITION = EOS + " task per partition"


def _task_per_partition(ground: Ground, source: str, partitions: int, records: int, batch: int) -> Run:
    return contenders.eos_kafka_copy(ground, source, partitions, records, batch, name=TASK_PER_PARTITION,
                                     source_options={"minRecordsPerPartition": "1"})


# python-stream with as many read tasks as partitions: what Spark charges any Python source and
# sink for that many tasks a batch, with no Kafka and no protocol.
PYTHON_TASK_PER_PARTITION = PYTHON_STREAM + " task per partition"


def _python_task_per_partition(ground: Ground, source: str, partitions: int, records: int, batch: int) -> Run:
    return contenders.python_stream_copy(ground, source, partitions, records, batch, SCALING_RECORD_BYTES,
                                         tasks=partitions, name=PYTHON_TASK_PER_PARTITION)


def scaling(ground: Ground, scale: Scale, options: Options) -> list[dict]:
    rows = []
    for partitions in scale.scaling_partitions:
        source = prepared_input(ground, scale.scaling_records, SCALING_RECORD_BYTES, partitions)
        batch = max(scale.scaling_records // SCALING_BATCHES, partitions)
        for name, copy_run, settings in ((EOS, contenders.eos_kafka_copy, ()),
                                         (TASK_PER_PARTITION, _task_per_partition, ()),
                                         (PYTHON_TASK_PER_PARTITION, _python_task_per_partition, ()),
                                         (SPARK, contenders.spark_kafka_copy, (SCALING_SPARK_SINK,))):
            run = measured(name, copy_run, ground, source, partitions, scale.scaling_records, batch, *settings)
            ids = (contenders.transactional_ids(ground, run.extra["prefix"])
                   if "prefix" in run.extra else 0)  # Spark's connector: no transactions
            log.info("scaling %d partitions: %s %.1f s, %d transactional ids", partitions, name, run.seconds, ids)
            row = report.summarize("scaling", {"partitions": partitions}, [run])
            row["transactional_ids"] = ids
            # The first batch also carries the query's start: the cost of a batch is that of the others.
            steady = run.batch_ms[1:] or run.batch_ms
            row["steady_batch_ms"] = statistics.median(steady) if steady else None  # None: the contender failed
            rows.append(row)
    report.print_table("Scaling with input partitions (same total records)", rows, ("partitions",))
    for row in rows:
        print(f"  {row['partitions']:>4} partitions  {row['contender']:<12} batches after the first: "
              f"{report.ms(row['steady_batch_ms'])} ms (median); transactional ids (= producers): "
              f"{row['transactional_ids']}")
    return rows


# ------------------------------------------------------------------------------------ cold

# eos-kafka once more with Spark's Python processes started from a plain interpreter, and with
# them started from a compiled pyspark.zip: what the recommended setting (pyspark-eos-python) takes
# off, and the older remedy that rewrites a Spark installation.
COLD_CONTENDERS = (*cold_job.COPIES, EOS + contenders.WITH_SPARK_DEFAULTS, EOS + contenders.COMPILED_ZIP)


def cold(ground: Ground, scale: Scale, options: Options) -> list[dict]:
    """Scheduled jobs: each run a fresh driver process (contenders.cold_job), nothing warm."""
    rows = []
    for size, records in scale.cold_cases:
        source = prepared_input(ground, records, size, scale.partitions)
        runs: dict[str, list[Run]] = {name: [] for name in scale.cold_contenders or COLD_CONTENDERS}
        for repeat in range(scale.repeats):
            for name in runs:  # alternated, so that drift hits them alike
                run = measured(name, contenders.cold_job, ground, source, scale.partitions, records, scale.cold_batch,
                               name, size)
                runs[name].append(run)
                log.info("cold job %d x %d B, repeat %d/%d: %s %.1f s from start() (%.0f records/s), process %.1f s",
                         records, size, repeat + 1, scale.repeats, name, run.seconds, run.records_per_second,
                         run.extra.get("process_s", float("nan")))
        part = [_cold_row(size, r) for r in runs.values()]
        report.print_cold(part)
        rows += part
    return rows


def _cold_row(size: int, runs: list[Run]) -> dict:
    row = report.summarize("cold", {"record_bytes": size}, runs)
    done = [run for run in runs if "cpu_s" in run.extra]
    if done:
        row["cpu_s_per_million"] = statistics.median(sum(run.extra["cpu_s"].values()) / run.records_in * 1e6
                                                     for run in done)
        row["cpu_s_per_million_by_group"] = {
            group: statistics.median(run.extra["cpu_s"][group] / run.records_in * 1e6 for run in done)
            for group in done[0].extra["cpu_s"]}
        row["process_s"] = statistics.median(run.extra["process_s"] for run in done)
        later = [ms for run in done for ms in run.batch_ms[1:]]
        row["later_batch_p50_ms"] = report.percentile(later, 0.5)
    return row


# ------------------------------------------------------------------------------- per-batch

PER_BATCH_RECORD_BYTES = 100
# python-stream beside the two: its batches are what Spark charges any Python source and sink per
# micro-batch (its Python workers' round trips), which the connector does not pay.
PER_BATCH_CONTENDERS = {
    EOS: COPY_CONTENDERS[EOS],
    SPARK: COPY_CONTENDERS[SPARK],
    PYTHON_STREAM: lambda ground, source, partitions, records, batch: contenders.python_stream_copy(
        ground, source, partitions, records, batch, PER_BATCH_RECORD_BYTES),
}


def per_batch(ground: Ground, scale: Scale, options: Options) -> list[dict]:
    rows = []
    skipped = scale.per_batch_skipped
    for batch in scale.per_batch_sizes:
        records = batch * (skipped + scale.per_batch_batches)
        source = prepared_input(ground, records, PER_BATCH_RECORD_BYTES, scale.partitions)
        for name, contender in PER_BATCH_CONTENDERS.items():
            runs = [_steady(measured(name, contender, ground, source, scale.partitions, records, batch), skipped)
                    for _ in range(scale.repeats)]
            rows.append(report.summarize("per-batch", {"batch_records": batch}, runs))
            log.info("per-batch cost, %d records per batch: %s p50 %.0f ms", batch, name, rows[-1]["batch_p50_ms"] or 0)
    report.print_table("Per-batch cost against records per micro-batch", rows, ("batch_records",))
    for name, (fixed, per_record) in report.batch_cost_fit(rows).items():
        print(f"  {name:<13} batch ms = {fixed:,.0f} + {per_record * 1000:,.2f} per 1000 records")
    report.print_batch_charge(rows)
    report.print_phases(rows)
    return rows


def _steady(run: Run, skipped: int) -> Run:
    """The run without its first ``skipped`` micro-batches: a query's first batches pay one-time
    costs per Python worker (producer ids, init_transactions, connections)."""
    if "error" in run.extra:
        return run
    run.extra["warm_up_batch_ms"] = run.batch_ms[:skipped]
    run.batch_ms = run.batch_ms[skipped:]
    run.extra["phases_ms"] = contenders.phase_medians(run.extra["batch_phases_ms"][skipped:])
    return run


# --------------------------------------------------------------------------------- fencing

def fencing(ground: Ground, scale: Scale, options: Options) -> list[dict]:
    timings = contenders.claim_cost_ms(ground, scale.fencing_claims)
    p50, p99 = report.percentile(timings, 0.5), report.percentile(timings, 0.99)
    print(f"\nAttempt fencing per write task (claim, read the plan's claims, release), {len(timings)} tasks: "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    rows = [{"scenario": "fencing", "contender": "claim per task", "partitions": None, "tasks": len(timings),
             "claim_p50_ms": p50, "claim_p99_ms": p99, "records_out": [], "extra": []}]
    for partitions in scale.fencing_partitions:
        source = prepared_input(ground, scale.fencing_records, 100, partitions)
        batch = max(scale.fencing_records // scale.fencing_batches, partitions)
        runs: dict[str, list[Run]] = {"eos-kafka fencing off": [], EOS: []}
        for repeat in range(scale.repeats):
            for name in runs:  # alternated, so drift in the machine's speed hits both alike
                with contenders.attempt_fencing(ground, on=name == EOS):
                    run = measured(name, contenders.eos_kafka_copy, ground, source, partitions,
                                   scale.fencing_records, batch, name=name)
                runs[name].append(run)
                log.info("fencing %d partitions, repeat %d/%d: %s %.1f s", partitions, repeat + 1, scale.repeats,
                         name, run.seconds)
        part = [report.summarize("fencing", {"partitions": partitions}, r) for r in runs.values()]
        off, on = (row["median_records_per_s"] for row in part)
        print(f"  {partitions:>4} partitions: with fencing {on / off if off else float('nan'):.3f}x the throughput "
              "without")
        rows += part
    report.print_table("Attempt fencing: the copy with and without the claims protocol", rows[1:], ("partitions",))
    return rows


# --------------------------------------------------------------------------------- latency

# The first quarter of a latency run is left out: the query's first batches start its Python
# workers' Kafka clients (a one-time cost per query).
LATENCY_SETTLE = 0.25


# Kept up: every record out within this long after the input ended, and the later half of the
# settled records no slower than twice the earlier half (a backlog that grows shows in both).
KEPT_UP_CATCH_UP_S = 5.0


def latency(ground: Ground, scale: Scale, options: Options) -> list[dict]:
    rows = []
    for rate in scale.latency_rates:
        part = [latency_row(ground, scale, name, rate) for name in (EOS, SPARK)]
        print(f"\nEnd-to-end latency at {rate:,} records/s for {scale.latency_seconds:g} s (produced -> read by a "
              f"read_committed consumer; the first {LATENCY_SETTLE:.0%} left out)")
        header = ["contender", "p50 ms", "p99 ms", "max ms", "records", "batches", "batch p50 ms", "between p50 ms",
                  "catch-up s", "kept up", "out ok"]
        print("  ".join(f"{h:>14}" for h in header))
        for row in part:
            cells = [row["contender"], report.ms(row["latency_p50_ms"]), report.ms(row["latency_p99_ms"]),
                     report.ms(row["latency_max_ms"]), row["latency_records"], row["batches"],
                     report.ms(row["batch_p50_ms"]), report.ms(row["between_batches_p50_ms"]),
                     f"{row['catch_up_s']:.1f}", "yes" if row["kept_up"] else "no",
                     report.output_ok(row)]
            print("  ".join(f"{str(c):>14}" for c in cells))
        rows += part
    return rows


def latency_row(ground: Ground, scale: Scale, name: str, rate: int) -> dict:
    run = contenders.steady_copy(ground, name, scale.partitions, rate, scale.latency_seconds, probe=True)
    first = min((sent for sent, _ in run.latencies), default=0)
    settled = [ms for sent, ms in sorted(run.latencies)
               if sent >= first + LATENCY_SETTLE * scale.latency_seconds * 1e9]
    earlier, later = settled[:len(settled) // 2], settled[len(settled) // 2:]
    kept_up = (run.catch_up_s <= KEPT_UP_CATCH_UP_S and bool(later)
               and report.percentile(later, 0.5) <= 2 * report.percentile(earlier or later, 0.5))
    row = {"scenario": "latency", "contender": name, "exactly_once": name not in contenders.AT_LEAST_ONCE,
           "rate": rate, "records": run.records, "records_out": [run.records_out], "batches": run.batches,
           "latency_records": len(settled), "latency_p50_ms": report.percentile(settled, 0.5),
           "latency_p99_ms": report.percentile(settled, 0.99), "latency_max_ms": max(settled, default=None),
           # A record waits for the batch running when it arrives, then for its own: the p50 follows this.
           "batch_p50_ms": report.percentile(run.batch_ms, 0.5),
           # Beside it, the time between batches: the driver's own cost outside Spark's trigger.
           "between_batches_p50_ms": report.percentile(run.between_ms, 0.5),
           "catch_up_s": run.catch_up_s, "kept_up": kept_up, "extra": []}
    log.info("latency at %d records/s: %s p50 %s ms, p99 %s ms over %d records, kept up: %s", rate, name,
             report.ms(row["latency_p50_ms"]), report.ms(row["latency_p99_ms"]), len(settled), kept_up)
    return row


# ---------------------------------------------------------------------------------- memory

def memory(ground: Ground, scale: Scale, options: Options) -> list[dict]:
    seconds = scale.memory_minutes * 60
    log.info("memory: a copy of %.1f min at %d records/s", scale.memory_minutes, scale.memory_rate)
    run = contenders.steady_copy(ground, EOS, scale.partitions, scale.memory_rate, seconds, scale.batch_records,
                                 sample_every_s=min(5.0, seconds / 10))
    row = {"scenario": "memory", "contender": EOS, "exactly_once": True, "minutes": scale.memory_minutes,
           "rate": scale.memory_rate, "records": run.records, "records_out": [run.records_out],
           "batches": run.batches, "workers": run.workers, "rss_mib_series": run.rss_mib_series, "extra": []}
    report.print_workers(f"Spark's Python processes over a {scale.memory_minutes:g}-minute copy "
                         f"({row['batches']} micro-batches, {row['records']:,} records, "
                         f"out ok: {report.output_ok(row)})", row["workers"])
    return [row]


# -------------------------------------------------------------------------------- variants

def variants(ground: Ground, scale: Scale, options: Options) -> list[dict]:
    size, records, batch = options.variants_case or scale.variants_case
    chosen = [Variant(SPARK), Variant(EOS), *(v for v in options.variants if v.name not in (SPARK, EOS))]
    source = prepared_input(ground, records, size, scale.partitions)
    if any(v.name == PYTHON_STREAM for v in chosen) and scale.warm_up:  # its Python workers and JVM code paths
        contenders.python_stream_copy(ground, "", scale.partitions, batch, batch, size)
    runs: dict[str, list[Run]] = {v.name: [] for v in chosen}
    for repeat in range(scale.repeats):
        for variant in chosen:  # alternated, so that drift (the JVM warming up) hits all alike
            run = measured(variant.name, _variant_copy, ground, source, scale.partitions, records, batch, variant, size)
            runs[variant.name].append(run)
            log.info("variants, repeat %d/%d: %s %.0f records/s, out ok: %s", repeat + 1, scale.repeats, variant.name,
                     run.records_per_second, run.records_out == records)
    rows = []
    for variant in chosen:
        row = report.summarize("variants", {"record_bytes": size}, runs[variant.name])
        row["settings"] = variant.describe()
        rows.append(row)
    print(f"\nVariants: {records:,} records of {size} B, batches of {batch:,}, medians of {scale.repeats}")
    for row in rows:
        report.print_variant(row, rows[0])
    return rows


def _variant_copy(ground: Ground, source: str, partitions: int, records: int, batch: int, variant: Variant,
                  size: int) -> Run:
    if variant.name == SPARK:
        return contenders.spark_kafka_copy(ground, source, partitions, records, batch)
    if variant.name == PYTHON_STREAM:
        return contenders.python_stream_copy(ground, source, partitions, records, batch, size)
    source_options = dict(variant.source)
    schema = source_options.pop("schema", contenders.COPY_SCHEMA)  # source.schema= : every Kafka column
    with session_conf(ground.spark, variant.conf):
        return contenders.eos_kafka_copy(ground, source, partitions, records, batch, variant.sink, variant.name,
                                         source_options, schema)


@contextlib.contextmanager
def session_conf(spark, conf: dict):
    """The session with ``conf`` set (None: unset), as it was again afterwards."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value) if value is not None else spark.conf.unset(key)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.set(key, value) if value is not None else spark.conf.unset(key)


SCENARIOS = {"copy": copy, "cold": cold, "alone": alone, "scaling": scaling, "per-batch": per_batch,
             "fencing": fencing, "latency": latency, "memory": memory, "variants": variants}
