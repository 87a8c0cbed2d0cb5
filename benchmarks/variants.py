"""One lever at a time: eos-kafka copies with different source or sink options, alternated with
Spark's connector on one input in one run, so that each variant's throughput is read against the
others' measured beside it.

    .venv/bin/python -m benchmarks.variants --size 1000 --records 600000 --batch 100000 --repeats 3 \\
        --variant tasks-of-50k source.minRecordsPerPartition=50000 \\
        --variant tasks-of-20k source.minRecordsPerPartition=20000

Every run's output is counted (each input record once); prints each run and a table of medians,
with each contender's ratio to Spark's connector. ``eos-kafka`` (the defaults) and ``spark-kafka``
always run; ``--python-stream`` adds a Python source and sink that only hand Arrow batches over
(benchmarks/python_stream.py): its time outside batches and its first batch are what Spark charges
any Python pipeline per query.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import tempfile
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from . import contenders
from .workload import unique, write_input

log = logging.getLogger("benchmarks.variants")
PARTITIONS = 8
PYTHON_STREAM = "python-stream"  # the contender --python-stream adds (benchmarks/python_stream.py)


def parse_variant(name: str, settings: list[str]) -> tuple[str, dict, dict, dict]:
    """``source.<option>=<value>``, ``sink.<option>=<value>`` and ``conf.<Spark setting>=<value>``
    settings of one variant (a Spark setting holds for that variant's runs only); ``source.schema=``
    is the source's ``.schema(...)`` (empty: every Kafka column; default ``contenders.COPY_SCHEMA``)."""
    options: dict[str, dict] = {"source": {}, "sink": {}, "conf": {}}
    for setting in settings:
        side, _, assignment = setting.partition(".")
        key, equals, value = assignment.partition("=")
        if side not in options or not equals:
            raise SystemExit(f"variant {name}: {setting!r} is not source.<option>=<value>, sink.<option>=<value> "
                             "or conf.<Spark setting>=<value>")
        options[side][key] = value or None  # an empty value drops the option, e.g. the sink's kafka.group.id
    return name, options["source"], options["sink"], options["conf"]


def run_variant(ground, source_topic: str, records: int, batch: int, variant: tuple[str, dict, dict, dict],
                size: int):
    name, source_options, sink_options, conf = variant
    if name == "spark-kafka":
        return contenders.spark_kafka_copy(ground, source_topic, PARTITIONS, records, batch)
    if name == PYTHON_STREAM:
        return contenders.python_stream_copy(ground, source_topic, PARTITIONS, records, batch, size)
    source_options = dict(source_options)
    schema = source_options.pop("schema", contenders.COPY_SCHEMA)  # source.schema= : every Kafka column
    with session_conf(ground.spark, conf):
        return contenders.eos_kafka_copy(ground, source_topic, PARTITIONS, records, batch, sink_options, name,
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100, help="bytes per record")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000, help="records per micro-batch (maxOffsetsPerTrigger)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variant", nargs="+", action="append", default=[], metavar=("NAME", "SETTING"),
                        help="a name, then source.<option>=<value>, sink.<option>=<value> or "
                             "conf.<Spark setting>=<value> settings (an empty value drops that option)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session all contenders run in")
    parser.add_argument("--python-stream", action="store_true",
                        help="also run python-stream: a Python source and sink that only hand Arrow batches over "
                             "(benchmarks/python_stream.py), Spark's part of a Python pipeline's costs")
    args = parser.parse_args(argv)
    conf = dict(setting.split("=", 1) for setting in args.conf)
    variants = [("spark-kafka", {}, {}, {}), ("eos-kafka", {}, {}, {}),
                *(parse_variant(name, settings) for name, *settings in args.variant),
                *([(PYTHON_STREAM, {}, {}, {})] if args.python_stream else [])]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    runs: dict[str, list] = {name: [] for name, *_ in variants}
    with tempfile.TemporaryDirectory(prefix="eos-kafka-variants-") as work, \
            EmbeddedKafkaCluster(directory=Path(work) / "kafka", heap="2g") as kafka:
        ground = contenders.start_ground(kafka.bootstrap_servers, Path(work), conf)
        contenders.warm_up(ground)
        if args.python_stream:  # unmeasured, as warm_up: its Python workers and JVM code paths
            contenders.python_stream_copy(ground, "", PARTITIONS, 20_000, 10_000, args.size)
        source_topic = create_topic(kafka.bootstrap_servers, unique("in"), PARTITIONS)
        write_input(kafka.bootstrap_servers, source_topic, args.records, args.size, PARTITIONS)
        for repeat in range(args.repeats):
            for variant in variants:  # alternated, so that drift (the JVM warming up) hits all alike
                run = run_variant(ground, source_topic, args.records, args.batch, variant, args.size)
                runs[variant[0]].append(run)
                log.info("repeat %d/%d: %s %.0f records/s, batch p50 %.0f ms, out ok: %s; first batch %s",
                         repeat + 1, args.repeats, variant[0], run.records_per_second,
                         statistics.median(run.batch_ms), run.records_out == args.records,
                         run.extra["batch_phases_ms"][0])
        ground.spark.stop()
    spark = statistics.median(r.records_per_second for r in runs["spark-kafka"])
    print(f"\n{args.records} records of {args.size} B, batches of {args.batch}, medians of {args.repeats}")
    for name, done in runs.items():
        print_contender(name, done, spark, args.records)
    return 0


def print_contender(name: str, done: list, spark: float, records: int) -> None:
    """One contender's medians: throughput against Spark's connector, the later batches (after each
    run's first, the query's start: steadier between runs than records/s) and their phases, the
    run's time outside batches (the query's start and stop), and CPU per record by process group."""
    speed = statistics.median(r.records_per_second for r in done)
    steady = statistics.median(ms for r in done for ms in r.batch_ms[1:] or r.batch_ms)
    later = contenders.phase_medians([phases for r in done for phases in r.extra["batch_phases_ms"][1:]])
    outside = statistics.median(r.extra["outside_batches_ms"] for r in done)
    busy = statistics.median(r.extra["cpu_busy"] for r in done)
    cpu_us = {group: statistics.median(r.extra["cpu_s"][group] for r in done) / records * 1e6
              for group in done[0].extra["cpu_s"]}
    print(f"{name:>24} {speed:>10,.0f} records/s {speed / spark:>6.2f}x spark-kafka   later batches p50 {steady:,.0f} ms"
          f"   outside batches {outside:,.0f} ms   cores busy {busy:.0%}   "
          f"out ok: {all(r.records_out == records for r in done)}")
    print(f"{'':>24} later batches' phases p50: " + ", ".join(f"{k} {v:,.0f}" for k, v in later.items()))
    print(f"{'':>24} CPU per record: " + ", ".join(f"{group} {us:.1f} us" for group, us in cpu_us.items())
          + f" (total {sum(cpu_us.values()):.1f} us)")


if __name__ == "__main__":
    sys.exit(main())
