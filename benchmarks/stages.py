"""A copy's stages alone and in pairs: which one sets the pace of an eos-kafka copy.

An eos-kafka copy moves every record out of Kafka in a reading Python worker, through the Spark
JVM (Arrow to rows, rows to Arrow), into a writing Python worker and back into Kafka. This tool
writes ``SOURCE -> SINK`` paths in batch mode (``df.write``), one after another in one local[2]
session, each path's repeats alternated with the others'. Sources: ``eos-kafka``, ``kafka``
(Spark's connector), ``python`` (a Python data source yielding ready Arrow batches in Spark's
Kafka schema: the reader's hand-off without Kafka), ``spark`` (rows Spark generates). Sinks:
``eos-kafka`` (no group: a transaction per task), ``kafka`` (Spark's sink), ``python`` (a Python
Arrow writer that only counts: the writer's hand-off without Kafka), ``noop`` (Spark's).

    .venv/bin/python -m benchmarks.stages --size 1000 --records 1000000 --repeats 3 \\
        --paths "python -> python,eos-kafka -> noop,kafka -> noop,spark -> eos-kafka,spark -> kafka"
    .venv/bin/python -m benchmarks.stages --paths "python -> python" \\
        --variant bigger-buffer conf.spark.sql.execution.pandas.udf.buffer.size=4194304

A variant's Spark settings hold for its runs only. Every run's output in Kafka is counted; the
Kafka sources read an input topic of ``--partitions`` partitions written once.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition

from pyspark_eos.kafka.schema import arrow_schema, kafka_schema
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from . import contenders
from .python_stream import BATCH, Counted, ready_batches
from .variants import parse_variant, session_conf
from .workload import busy_fraction, count_committed, cpu_times, unique, write_input

log = logging.getLogger("benchmarks.stages")
SOURCES = ("eos-kafka", "kafka", "python", "spark")
SINKS = ("eos-kafka", "kafka", "python", "noop")


class GeneratedKafkaRecords(DataSource):
    """Records of ``size`` bytes in Spark's Kafka schema, ``records`` over ``tasks`` tasks, sliced
    from one Arrow batch built per task; written, they are only counted."""

    @classmethod
    def name(cls) -> str:
        return "bench-stages"

    def schema(self):
        return kafka_schema(False)

    def reader(self, schema):
        return _Reader(int(self.options["records"]), int(self.options["size"]), int(self.options["tasks"]))

    def writer(self, schema, overwrite):
        return _Writer()


class _Reader(DataSourceReader):
    def __init__(self, records: int, size: int, tasks: int):
        self.records, self.size, self.tasks = records, size, tasks

    def partitions(self):
        return [InputPartition(task) for task in range(self.tasks)]

    def read(self, partition):
        per_task = self.records // self.tasks + (self.records % self.tasks if partition.value == self.tasks - 1 else 0)
        return ready_batches(per_task, lambda rows: _batch(rows, self.size, partition.value))


def _batch(rows: int, size: int, partition: int) -> pa.RecordBatch:
    value = b"x" * size
    columns = [[None] * rows, [value] * rows, ["input"] * rows, [partition] * rows, list(range(rows)),
               [0] * rows, [0] * rows]
    schema = arrow_schema(False)
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)], schema=schema)


class _Writer(DataSourceArrowWriter):
    def write(self, iterator):
        return Counted(sum(batch.num_rows for batch in iterator))

    def commit(self, messages):
        pass

    def abort(self, messages):
        pass


def _frame(spark, source: str, args, bootstrap: str | None, topic: str | None):
    if source == "python":
        return (spark.read.format(GeneratedKafkaRecords.name()).option("records", args.records)
                .option("size", args.size).option("tasks", args.partitions).load())
    if source == "spark":
        value = F.expr(f"cast(repeat('x', {args.size}) as binary)")
        return spark.range(0, args.records, 1, args.partitions).select(
            F.lit(None).cast("binary").alias("key"), value.alias("value"))
    options = {"kafka.isolation.level": "read_committed"} if source == "kafka" else {}
    return (spark.read.format(source).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").options(**options).load())


def run(spark, args, path: str, bootstrap: str | None, topic: str | None, conf: dict) -> tuple[float, float]:
    """Records/s of one run of ``path`` and how busy the machine's cores were; fails when a Kafka
    sink's output is not every record once."""
    source, sink = (side.strip() for side in path.split("->"))
    writer = _frame(spark, source, args, bootstrap, topic).select("key", "value").write.mode("append")
    output = None
    if sink in ("eos-kafka", "kafka"):
        output = create_topic(bootstrap, unique("stages-out"), args.partitions)
        writer = writer.format(sink).option("kafka.bootstrap.servers", bootstrap).option("topic", output)
    else:
        writer = writer.format(GeneratedKafkaRecords.name() if sink == "python" else sink)
    with session_conf(spark, conf):
        started, cpu = time.perf_counter(), cpu_times()
        writer.save()
        seconds, busy = time.perf_counter() - started, busy_fraction(cpu, cpu_times())
    if output is not None and (written := count_committed(bootstrap, output, args.partitions)) != args.records:
        raise RuntimeError(f"{path}: wrote {written} records, not {args.records}")
    return args.records / seconds, busy


def _path(text: str) -> str:
    source, arrow, sink = text.partition("->")
    if not arrow or source.strip() not in SOURCES or sink.strip() not in SINKS:
        raise argparse.ArgumentTypeError(f"{text!r} is not SOURCE -> SINK with a source of {', '.join(SOURCES)} "
                                         f"and a sink of {', '.join(SINKS)}")
    return f"{source.strip()} -> {sink.strip()}"


def _variant(name: str, settings: list[str]) -> tuple[str, dict]:
    """A variant's ``conf.<Spark setting>=<value>`` settings, spelled as the variants tool's."""
    name, source, sink, conf = parse_variant(name, settings)
    if source or sink:
        raise SystemExit(f"variant {name}: a path's variant takes conf.<Spark setting>=<value> settings only")
    return name, conf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000, help="bytes per record")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8, help="input partitions; tasks of python and spark")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paths", type=lambda text: [_path(p) for p in text.split(",")],
                        default=["python -> python", "python -> noop", "spark -> python", "spark -> noop"],
                        help="comma-separated SOURCE -> SINK paths")
    parser.add_argument("--variant", nargs="+", action="append", default=[], metavar=("NAME", "SETTING"),
                        help="a name, then conf.<Spark setting>=<value> settings for that variant's runs of every path")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session")
    args = parser.parse_args(argv)
    contenders_ = [(path, path, {}) for path in args.paths]
    for name, conf in (_variant(name, settings) for name, *settings in args.variant):
        contenders_ += [(f"{path} {name}", path, conf) for path in args.paths]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    speeds: dict[str, list[tuple[float, float]]] = {name: [] for name, *_ in contenders_}
    with tempfile.TemporaryDirectory(prefix="eos-kafka-stages-") as work, contextlib.ExitStack() as stack:
        kafka = stack.enter_context(EmbeddedKafkaCluster(directory=Path(work) / "kafka", heap="2g"))
        ground = contenders.start_ground(kafka.bootstrap_servers, Path(work),
                                         dict(setting.split("=", 1) for setting in args.conf))
        ground.spark.dataSource.register(GeneratedKafkaRecords)
        topic = create_topic(kafka.bootstrap_servers, unique("stages-in"), args.partitions)
        write_input(kafka.bootstrap_servers, topic, args.records, args.size, args.partitions)
        warm_up = argparse.Namespace(**{**vars(args), "records": args.records // 10})
        for name, path, conf in contenders_:  # unmeasured: JVM code paths and Python workers start here
            if not path.startswith(("eos-kafka", "kafka")):  # a Kafka source reads the whole topic
                run(ground.spark, warm_up, path, kafka.bootstrap_servers, topic, conf)
        for repeat in range(args.repeats):
            for name, path, conf in contenders_:  # alternated, so that drift hits every one alike
                speeds[name].append(run(ground.spark, args, path, kafka.bootstrap_servers, topic, conf))
                log.info("repeat %d/%d: %s %.0f records/s, cores %.0f%% busy", repeat + 1, args.repeats, name,
                         speeds[name][-1][0], 100 * speeds[name][-1][1])
        ground.spark.stop()
    print(f"\n{args.records} records of {args.size} B, {args.partitions} partitions, medians of {args.repeats}")
    for name, done in speeds.items():
        print(f"{name:>40} {statistics.median(speed for speed, _ in done):>12,.0f} records/s   cores busy "
              f"{statistics.median(busy for _, busy in done):.0%}   runs: " + ", ".join(f"{speed:,.0f}" for speed, _ in done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
