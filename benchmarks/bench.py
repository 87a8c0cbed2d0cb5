"""eos-kafka side by side with Spark's Kafka connector, Kafka's own exactly-once copier and the
plain Python client, on one embedded broker and one machine.

    .venv/bin/python -m benchmarks.bench [--scale quick|full] [--parts copy,alone,scaling,txn,fencing]

Parts:
  copy     Kafka -> Kafka copy, 100-byte and 1-KB records: every contender, records/s and batch p50/p99
  alone    the source alone (into Spark's noop sink) and the sink alone (from a generated DataFrame)
  scaling  8, 64, 256 input partitions (and 1024 at full scale), the same records in 4 micro-batches:
           one producer per write slot against a producer per input partition (the pre-KIP-447
           design, up to 256) and Spark's connector; transactional ids counted, a batch's cost
           plotted against partitions (results/scaling-batch-cost.png)
  txn      per-batch cost against records per micro-batch, for eos-kafka and Spark's connector
           (each run's first batches, which start its workers' clients, left out)
  memory   a copy at a steady input rate for minutes (20 at full scale): memory and Kafka clients of
           every Spark Python process over time
  fencing  what attempt fencing (the claims protocol) costs: the copy with it and with it switched
           off, runs alternated, at 8 and 64 partitions (one claim per write task)

Prints a table per part and appends the run to benchmarks/results/history.jsonl (with machine
and versions); benchmarks/results/latest.csv and *.png describe the newest run.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from . import contenders, plots, report, soak
from pyspark_eos.testing.processes import WorkerSampler
from .workload import SCALES, Scale, unique, write_input

log = logging.getLogger("benchmarks")

COPY_CONTENDERS = {
    "eos-kafka": contenders.eos_kafka_copy,
    "eos-kafka at-least-once": contenders.eos_kafka_at_least_once,
    "spark-kafka": contenders.spark_kafka_copy,
    "spark-kafka -> eos-kafka": contenders.spark_source_eos_sink,
    "kafka-copier": contenders.kafka_copier,
    "python-loop": contenders.python_loop,
}
PARTS = ("copy", "alone", "scaling", "txn", "fencing", "memory")


def prepared_input(ground: contenders.Ground, records: int, size: int, partitions: int) -> str:
    topic = create_topic(ground.bootstrap, unique(f"in-{size}b-{partitions}p"), partitions)
    write_input(ground.bootstrap, topic, records, size, partitions)
    return topic


# Spark stops a Python worker idle for a minute (PythonWorkerFactory, not configurable): the Spark
# contenders' repeats run one after another, after an unmeasured warm-up copy of their own, and
# the contenders outside Spark after them, so that every Spark run finds warm workers, as its JVM
# code is warm. (Between the copier's and the Python loop's runs eos-kafka's workers were stopped,
# and each of its repeats paid for new workers in its first batch; benchmarks/first_batch.py
# measures that. The session's first warm-up alone left the second record size's first repeat
# with new workers, after the first size's copier and Python loop had run for minutes.)
SPARK_COPY_CONTENDERS = ("eos-kafka", "eos-kafka at-least-once", "spark-kafka", "spark-kafka -> eos-kafka")


def copy_part(ground, scale: Scale) -> list[dict]:
    rows = []
    for size, records in scale.copy_cases:
        source = prepared_input(ground, records, size, scale.partitions)
        runs: dict[str, list] = {name: [] for name in COPY_CONTENDERS}
        outside_spark = [name for name in COPY_CONTENDERS if name not in SPARK_COPY_CONTENDERS]
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


def measured(label: str, contender, *args, **kwargs) -> contenders.Run:
    """One run of ``contender(ground, source, partitions, records, ...)``; a contender that fails
    is reported as failed instead of ending the whole benchmark."""
    try:
        with WorkerSampler(args[0].jvm_pid) as sampler:
            run = contender(*args, **kwargs)
        run.extra["workers"] = sampler.summary()
        return run
    except Exception as error:  # noqa: BLE001 - any failure of a contender is a result to report
        log.exception("%s failed", label)
        return contenders.Run(label, float("inf"), args[3], 0, extra={"error": str(error)[:2000]})


def alone_part(ground, scale: Scale) -> list[dict]:
    source = prepared_input(ground, scale.alone_records, 100, scale.partitions)
    rows = []
    for part, measure in (("source", contenders.source_alone), ("sink", contenders.sink_alone)):
        runs: dict[str, list] = {}
        for repeat in range(scale.repeats):
            for name in ("eos-kafka", "spark-kafka"):
                run = measured(name, measure, ground, source, scale.partitions, scale.alone_records, name)
                runs.setdefault(name, []).append(run)
            log.info("%s alone, repeat %d/%d done", part, repeat + 1, scale.repeats)
        rows += [report.summarize(f"{part}-alone", {"side": part}, r) for r in runs.values()]
    report.print_table("Source alone (into noop) and sink alone (generated rows)", rows, ("side",))
    return rows


SCALING_BATCHES = 4
# The per-partition design (one task, transaction and producer per input partition) is kept for
# comparison up to here: at 1024 partitions one run would take many minutes.
PER_PARTITION_IDS_UP_TO = 256


def scaling_part(ground, scale: Scale) -> list[dict]:
    rows = []
    variants = {"eos-kafka": {}, "eos-kafka per-partition": {"transactionalIdPer": "partition"}, "spark-kafka": None}
    for partitions in scale.scaling_partitions:
        source = prepared_input(ground, scale.scaling_records, 100, partitions)
        batch = max(scale.scaling_records // SCALING_BATCHES, partitions)
        for name, sink_options in variants.items():
            if name == "eos-kafka per-partition" and partitions > PER_PARTITION_IDS_UP_TO:
                log.info("scaling %d partitions: %s left out (one task and producer per partition)", partitions, name)
                continue
            runs = [_scaling_run(ground, name, sink_options, source, partitions, scale.scaling_records, batch)
                    for _ in range(scale.scaling_repeats)]
            log.info("scaling %d partitions: %s %.1f s, %d transactional ids", partitions, name, runs[-1].seconds,
                     runs[-1].extra["transactional_ids"])
            row = report.summarize("scaling", {"partitions": partitions}, runs)
            row["transactional_ids"] = max(run.extra["transactional_ids"] for run in runs)
            # The first batch also carries the query's start: the cost of a batch is that of the others.
            steady = [ms for run in runs for ms in run.batch_ms[1:] or run.batch_ms]
            row["steady_batch_ms"] = statistics.median(steady) if steady else None  # None: the contender failed
            rows.append(row)
    report.print_table("Scaling with input partitions (same total records)", rows, ("partitions",))
    for row in rows:
        print(f"  {row['partitions']:>4} partitions  {row['contender']:<24} batches after the first: "
              f"{report.ms(row['steady_batch_ms'])} ms (median); transactional ids (= producers): {row['transactional_ids']}")
    return rows


def _scaling_run(ground, name: str, sink_options: dict | None, source: str, partitions: int, records: int,
                 batch: int) -> contenders.Run:
    if sink_options is None:  # Spark's connector: at-least-once, no transactions
        run = measured(name, contenders.spark_kafka_copy, ground, source, partitions, records, batch)
        run.extra["transactional_ids"] = 0
        return run
    run = measured(name, contenders.eos_kafka_copy, ground, source, partitions, records, batch, sink_options,
                   name=name)
    run.extra["transactional_ids"] = contenders.transactional_ids(ground, run.extra["prefix"])
    return run


def txn_part(ground, scale: Scale) -> list[dict]:
    rows = []
    for batch in scale.txn_batch_sizes:
        records = batch * (TXN_WARM_UP_BATCHES + scale.txn_batches)
        source = prepared_input(ground, records, 100, scale.partitions)
        for name in ("eos-kafka", "spark-kafka"):
            runs = [_steady(measured(name, COPY_CONTENDERS[name], ground, source, scale.partitions, records, batch))
                    for _ in range(scale.repeats)]
            rows.append(report.summarize("txn", {"batch_records": batch}, runs))
            log.info("txn cost, %d records per batch: %s p50 %.0f ms", batch, name, rows[-1]["batch_p50_ms"] or 0)
    report.print_table("Per-batch cost against records per micro-batch", rows, ("batch_records",))
    for name, (fixed, per_record) in report.batch_cost_fit(rows).items():
        print(f"  {name:<12} batch ms = {fixed:,.0f} + {per_record * 1000:,.2f} per 1000 records")
    report.print_phases(rows)
    return rows


# A query's first batches pay one-time costs per Python worker (producer ids, init_transactions,
# connections): left out, so that the fit's fixed cost is what each batch of a running query pays.
TXN_WARM_UP_BATCHES = 4


def _steady(run: contenders.Run) -> contenders.Run:
    run.extra["warm_up_batch_ms"] = run.batch_ms[:TXN_WARM_UP_BATCHES]
    run.batch_ms = run.batch_ms[TXN_WARM_UP_BATCHES:]
    run.extra["phases_ms"] = contenders.phase_medians(run.extra["batch_phases_ms"][TXN_WARM_UP_BATCHES:])
    return run


def fencing_part(ground, scale: Scale) -> list[dict]:
    timings = contenders.claim_cost_ms(ground)
    print(f"\nAttempt fencing per write task (claim, read the plan's claims, release), {len(timings)} tasks: "
          f"p50 {report.percentile(timings, 0.5):.1f} ms, p99 {report.percentile(timings, 0.99):.1f} ms")
    rows = [{"part": "fencing", "contender": "claim per task", "partitions": None, "median_records_per_s": None,
             "batch_p50_ms": report.percentile(timings, 0.5), "batch_p99_ms": report.percentile(timings, 0.99),
             "records_out": [], "extra": [{"tasks": len(timings)}]}]
    for partitions in scale.scaling_partitions[:2]:
        source = prepared_input(ground, scale.fencing_records, 100, partitions)
        batch = max(scale.fencing_records // 8, partitions)
        runs: dict[str, list] = {"eos-kafka fencing off": [], "eos-kafka": []}
        for repeat in range(scale.repeats):
            for name in runs:  # alternated, so drift in the machine's speed hits both alike
                with contenders.attempt_fencing(ground, on=name == "eos-kafka"):
                    run = measured(name, contenders.eos_kafka_copy, ground, source, partitions,
                                   scale.fencing_records, batch, name=name)
                runs[name].append(run)
                log.info("fencing %d partitions, repeat %d/%d: %s %.1f s", partitions, repeat + 1, scale.repeats,
                         name, run.seconds)
        part_rows = [report.summarize("fencing", {"partitions": partitions}, r) for r in runs.values()]
        off, on = (row["median_records_per_s"] for row in part_rows)
        print(f"  {partitions:>4} partitions: with fencing {on / off:.3f}x the throughput without")
        rows += part_rows
    report.print_table("Attempt fencing: the copy with and without the claims protocol", rows[1:], ("partitions",))
    return rows


def memory_part(ground, scale: Scale) -> list[dict]:
    log.info("memory: a copy of %.0f min at %d records/s", scale.memory_minutes, scale.memory_rate)
    row = soak.soak_copy(ground, scale.memory_minutes, scale.memory_rate, scale.partitions, scale.batch_records)
    report.print_workers(f"Spark's Python processes over a {scale.memory_minutes:g}-minute copy "
                         f"({row['batches']} micro-batches, {row['records']:,} records, "
                         f"out ok: {report.output_ok(row)})", row["workers"])
    return [row]


RUNNERS = {"copy": copy_part, "alone": alone_part, "scaling": scaling_part, "txn": txn_part,
           "fencing": fencing_part, "memory": memory_part}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--repeats", type=int, help="override the scale's repeats")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    scale = SCALES[args.scale]
    if args.repeats:
        scale = Scale(**{**scale.__dict__, "repeats": args.repeats})
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    started = time.time()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="eos-kafka-bench-") as work, \
            EmbeddedKafkaCluster(directory=Path(work) / "kafka", heap="2g") as kafka:
        ground = contenders.start_ground(kafka.bootstrap_servers, Path(work))
        contenders.warm_up(ground)
        for part in parts:
            log.info("part %s (%s scale)", part, scale.name)
            rows += RUNNERS[part](ground, scale)
        ground.spark.stop()
    saved = report.save(rows, scale.name, started)
    written = plots.draw(rows)
    print(f"\nresults appended to {saved}; plots: {', '.join(str(p) for p in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
