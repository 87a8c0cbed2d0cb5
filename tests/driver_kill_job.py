"""A driver of its own for tests that kill the driver: queries into eos-kafka side by side, each
run with Trigger.AvailableNow: from a file or rate source without kafka.group.id (the sink's
progress records), or eos-kafka -> eos-kafka with a group (offsets in the transactions).

Usage: python driver_kill_job.py BOOTSTRAP QUERIES_JSON [arm]
QUERIES_JSON: a list of {"source", "topic", "checkpoint", "prefix"}; a source is a directory of
JSON files ({"id": n} per line), "rate" (the rate-micro-batch source), "random:DIRECTORY" (the
files repartitioned by rand(): a non-deterministic plan), "split:TOPIC" (an eos-kafka stream without
a group whose partitions are split over tasks, split_frame), or "kafka:INPUT:GROUP" (copy_query.py).
With "arm", the driver dies once every query has committed a batch in Kafka, before Spark's
commit log, and no write task's claim is released (RELEASES_OFF): the releases a driver's death
can take with it before the workers' producers deliver them. Without it, a random copy starts once
the others ended (waves). A query that fails lets the others run to their end, and the driver then
fails with its error; before that it prints one line, ``outcomes {JSON}``: each query's error by
its name (narrow, files, rate, random, split), null for one that ran to its end.
"""
import json
import sys

try:  # run as a script: tests/ is first on sys.path
    from copy_query import await_end, copy_writer
except ImportError:  # imported by the tests (test_any_source) as tests.driver_kill_job
    from .copy_query import await_end, copy_writer
from pyspark_eos.testing.fault_injection import DRIVER_AFTER_KAFKA_COMMIT, RELEASES_OFF, arm
from pyspark_eos.testing.local_spark import executor_local_dirs, local_spark_session

RATE_ROWS_PER_BATCH = 30
# A split stream's batches: this many offsets of its input at most, in pieces of at most
# SPLIT_PIECE (maxRecordsPerPartition): each partition's range of a batch in several tasks.
SPLIT_BATCH, SPLIT_PIECE = 60, 10


def input_frame(spark, source: str, files_per_batch: int = 1):
    if source == "rate":
        return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", RATE_ROWS_PER_BATCH)
                .option("numPartitions", 2).load().withColumnRenamed("value", "id"))
    directory = source.removeprefix("random:")
    frame = spark.readStream.schema("id LONG").option("maxFilesPerTrigger", files_per_batch).json(directory)
    if source.startswith("random:"):
        from pyspark.sql.functions import rand

        frame = frame.repartition(2, rand())
    return frame


def split_frame(spark, bootstrap: str, topic: str):
    """The ids in ``topic``'s values, read by eos-kafka without kafka.group.id in split ranges."""
    return (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", SPLIT_BATCH).option("maxRecordsPerPartition", SPLIT_PIECE).load()
            .selectExpr("CAST(CAST(value AS STRING) AS LONG) AS id"))


def eos_writer(frame, bootstrap: str, topic: str, prefix: str, checkpoint: str, **sink_options):
    """The ids as values into ``topic`` by eos-kafka without kafka.group.id, Trigger.AvailableNow."""
    writer = (frame.selectExpr("CAST(id AS STRING) AS value").writeStream.format("eos-kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
              .option("transactionalIdPrefix", prefix).option("checkpointLocation", checkpoint))
    for key, value in sink_options.items():
        writer = writer.option(key, str(value))
    # Spark's own file and rate sources take Trigger.AvailableNow on every PySpark release.
    return writer.trigger(availableNow=True)


def writer(spark, bootstrap: str, spec: dict):
    if spec["source"].startswith("kafka:"):
        _, source_topic, group = spec["source"].split(":")
        return copy_writer(spark, bootstrap, source_topic, spec["topic"], group, spec["checkpoint"])
    if spec["source"].startswith("split:"):
        frame = split_frame(spark, bootstrap, spec["source"].removeprefix("split:"))
    else:
        frame = input_frame(spark, spec["source"])
    return eos_writer(frame, bootstrap, spec["topic"], spec["prefix"], spec["checkpoint"])


def query_name(spec: dict) -> str:
    source = spec["source"]
    if source.startswith("kafka:"):
        return "narrow"
    if source.startswith("random:"):
        return "random"
    if source.startswith("split:"):
        return "split"
    return "rate" if source == "rate" else "files"


def waves(specs: list[dict], armed: bool) -> list[list[dict]]:
    """The queries started together, wave after wave. Armed, all at once: the driver dies once each
    has committed a batch. Restarted, the random copy (whose replay fails on purpose) after the
    others: its failed task cancels the other one, and a task cancelled while Spark gets it a Python
    worker makes Spark restart its Python daemon, killing every worker of the executor
    (test_spark_ground), and with one another query's running task."""
    if armed:
        return [specs]
    return [[s for s in specs if query_name(s) != "random"], [s for s in specs if query_name(s) == "random"]]


def main(bootstrap: str, queries: str, *extra: str) -> None:
    specs = json.loads(queries)
    spark = local_spark_session("local[2]", app_name="eos-kafka any-source job")
    if "arm" in extra:
        for directory in executor_local_dirs(spark):
            arm(DRIVER_AFTER_KAFKA_COMMIT, directory, gather=len(specs))
            arm(RELEASES_OFF, directory)
    failures, outcomes, ids = [], {}, []
    for wave in waves(specs, "arm" in extra):
        started = [writer(spark, bootstrap, spec).start() for spec in wave]
        ids += [query.id for query in started]
        for spec, query in zip(wave, started):  # every query to its end, a failed one's error raised after the others
            name = query_name(spec)
            try:
                await_end(query) if name == "narrow" else query.awaitTermination()
                outcomes[name] = None
            except Exception as error:  # noqa: BLE001 - raised below
                failures.append(error)
                outcomes[name] = f"{type(error).__name__}: {error}"[:4000]
    print("outcomes", json.dumps(outcomes), flush=True)
    if failures:
        raise failures[0]
    print("finished", ids)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
