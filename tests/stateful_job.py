"""A driver of its own for the stateful pipelines' fault tests: JSON files of events into eos-kafka
through query shapes, Trigger.AvailableNow, in local[2] with task retries. Several shapes run as
concurrent queries of one driver, each with its own input, checkpoint and topics.

Usage: python stateful_job.py BOOTSTRAP QUERIES_JSON [FAULT...]
QUERIES_JSON: a list of {"shape": one of SHAPES, "input", "checkpoint", "prefix", "topics": [...]}.
FAULT: "kill-worker" (each query's first write task to commit is killed right after its commit,
and retried), "kill-driver" (the driver dies once every query has committed a batch's output in
Kafka, before Spark's commit log), "stall-attempts:DIR:BATCH" (on two executor JVMs, each query's
first write task of batch BATCH or later to read its progress stalls, all at once, with its
executor stopped, until DIR/resume exists; the lost executors' tasks are retried on their
replacements; stall reports in DIR),
and for controls "at-least-once" (the writes' deliveryGuarantee) and "fencing-off".
Events: {"id": n, "key": "k<n % KEYS>", "ts": <START + n seconds>} per line, one file a batch.
"""
import sys
import tempfile

from pyspark.sql import functions as F

from pyspark_eos.testing.fault_injection import (ATTEMPT_FENCING_OFF, DRIVER_AFTER_KAFKA_COMMIT, STALL_AFTER_COMMIT,
                                                 STALL_AFTER_STABLE_READ, arm, crash_if_armed, enable)
from pyspark_eos.testing.local_spark import FAST_EXECUTOR_LOSS, local_spark_session

KEYS = 3
WINDOW_S = 10
EVENT_SCHEMA = "id LONG, key STRING, ts TIMESTAMP"


def events(spark, directory: str):
    return spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1).json(directory)


def window_counts(frame):
    return (frame.withWatermark("ts", f"{WINDOW_S} seconds").groupBy(F.window("ts", f"{WINDOW_S} seconds"), "key")
            .count())


def window_records(counts, batch_id: int | None = None):
    """key: "<key>@<window start>"; value: "<count>" (and "@<batch>" when written per batch)."""
    value = F.col("count").cast("string")
    if batch_id is not None:
        value = F.concat(value, F.lit(f"@{batch_id}"))
    return counts.select(F.concat("key", F.lit("@"), F.col("window.start").cast("string")).alias("key"),
                         value.alias("value"))


class Job:
    def __init__(self, bootstrap: str, prefix: str, topics: list[str], faults: list[str]):
        self.bootstrap, self.prefix, self.topics, self.faults = bootstrap, prefix, topics, faults

    def options(self, topic: str) -> dict:
        options = {"kafka.bootstrap.servers": self.bootstrap, "topic": topic, "transactionalIdPrefix": self.prefix}
        if "at-least-once" in self.faults:
            options["deliveryGuarantee"] = "at-least-once"
        if stall_attempts(self.faults):
            # The broker must not abort a stalled attempt's transaction before it resumes: fencing must.
            options["kafka.transaction.timeout.ms"] = "600000"
        return options

    def update_via_foreach_batch(self, spark, directory: str):
        """Update mode, which Spark refuses for a Python sink, through foreachBatch: two writes a batch."""
        def write(frame, batch_id):
            for topic in self.topics:
                window_records(frame, batch_id).write.format("eos-kafka").mode("append").options(
                    **self.options(topic)).save()
            if batch_id == 0:  # both writes committed, Spark's commit log not written
                crash_if_armed(DRIVER_AFTER_KAFKA_COMMIT)
        return window_counts(events(spark, directory)).writeStream.outputMode("update").foreachBatch(write)

    def window_append(self, spark, directory: str):
        """Each window once, when the watermark passes it."""
        return self._sink(window_records(window_counts(events(spark, directory))))

    def deduplication(self, spark, directory: str):
        """Events repeated within a file and from the file before (the test writes them), written once."""
        unique = events(spark, directory).withWatermark("ts", f"{WINDOW_S} seconds").dropDuplicatesWithinWatermark(
            ["id"])
        return self._sink(unique.select(F.col("key"), F.col("id").cast("string").alias("value")))

    def stream_static_join(self, spark, directory: str):
        names = spark.createDataFrame([(f"k{k}", f"name-{k}") for k in range(KEYS)], "key string, name string")
        joined = events(spark, directory).join(names, "key")
        return self._sink(joined.select("key", F.concat_ws(":", F.col("id").cast("string"), "name").alias("value")))

    def stream_stream_join(self, spark, directory: str):
        """Each event joined with its own echo, a second later, within a bounded wait."""
        left = events(spark, directory).withWatermark("ts", f"{WINDOW_S} seconds").alias("l")
        right = (events(spark, directory).select(F.col("id").alias("rid"), (F.col("ts") + F.expr("INTERVAL 1 SECOND"))
                                                 .alias("rts")).withWatermark("rts", f"{WINDOW_S} seconds"))
        joined = left.join(right, F.expr("id = rid AND rts BETWEEN ts AND ts + INTERVAL 5 SECONDS"))
        return self._sink(joined.select("key", F.col("id").cast("string").alias("value")))

    def transform_with_state(self, spark, directory: str):
        """A running count per key in PySpark's own stateful API, one row per key and batch."""
        counts = events(spark, directory).groupBy("key").transformWithStateInPandas(
            statefulProcessor=RunningCount(), outputStructType="key string, value string", outputMode="Append",
            timeMode="None")
        return self._sink(counts)

    def complete(self, spark, directory: str):
        """The whole result table every batch; a key's count 7 is written as a null value (a tombstone)."""
        counts = events(spark, directory).groupBy("key").count()
        value = F.when(F.col("count") == 7, F.lit(None)).otherwise(F.col("count").cast("string"))
        return self._sink(counts.select("key", value.alias("value"))).outputMode("complete")

    def _sink(self, frame):
        return frame.writeStream.format("eos-kafka").options(**self.options(self.topics[0]))


class RunningCount:
    """transformWithStateInPandas's processor: each key's count so far, kept in a value state."""

    def __new__(cls):
        from pyspark.sql.streaming.stateful_processor import StatefulProcessor

        class _RunningCount(StatefulProcessor):
            def init(self, handle):
                self.total = handle.getValueState("total", "total long")

            def handleInputRows(self, key, rows, timerValues):
                import pandas as pd

                total = (self.total.get() or (0,))[0] + sum(len(frame) for frame in rows)
                self.total.update((total,))
                yield pd.DataFrame({"key": [key[0]], "value": [str(total)]})

            def close(self):
                pass
        return _RunningCount()


SHAPES = {"update": Job.update_via_foreach_batch, "window": Job.window_append, "dedup": Job.deduplication,
          "static-join": Job.stream_static_join, "stream-join": Job.stream_stream_join,
          "transform-with-state": Job.transform_with_state, "complete": Job.complete}


def stall_attempts(faults) -> tuple[str, int] | None:
    """DIR and BATCH of a "stall-attempts:DIR:BATCH" fault, if given."""
    for fault in faults:
        if fault.startswith("stall-attempts:"):
            directory, batch = fault.split(":", 1)[1].rsplit(":", 1)
            return directory, int(batch)
    return None


def main(bootstrap: str, queries: str, *faults: str) -> None:
    import json

    specs = json.loads(queries)
    # Faults armed for every process, this driver's own too: foreachBatch's function runs here.
    faults_dir = tempfile.mkdtemp(prefix="eos-kafka-faults-")
    enable(faults_dir)
    conf = {"spark.sql.session.timeZone": "UTC",
            # The stream-static join keeps the static side's split, by default one partition per
            # core: a replay on the restart's cluster must split its batch as the first run did.
            "spark.default.parallelism": "2",
            # transformWithStateInPandas needs RocksDB state
            "spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}
    stalls = stall_attempts(faults)
    master = "local[2,4]"  # task retries in one JVM
    if stalls is not None:
        # Two executors with a slot for each query's stalled attempt and one more: the attempts
        # stall together, and their executors are lost and replaced once, not once per query.
        master, conf = "local-cluster[2,4,1024]", {**conf, **FAST_EXECUTOR_LOSS}
    spark = local_spark_session(master, app_name="eos-kafka stateful job", conf=conf)
    if stalls is not None:
        directory, batch = stalls
        arm(STALL_AFTER_STABLE_READ, faults_dir, per_query=True, gather=len(specs), from_batch=batch,
            stop_executor=True, resume_file=f"{directory}/resume", report_dir=directory)
    if "fencing-off" in faults:
        arm(ATTEMPT_FENCING_OFF, faults_dir)
    if "kill-worker" in faults:
        arm(STALL_AFTER_COMMIT, faults_dir, kill=True, per_query=True)
    if "kill-driver" in faults:
        arm(DRIVER_AFTER_KAFKA_COMMIT, faults_dir, gather=len(specs))
    started = []
    for spec in specs:
        job = Job(bootstrap, spec["prefix"], spec["topics"], list(faults))
        started.append(SHAPES[spec["shape"]](job, spark, spec["input"]).option(
            "checkpointLocation", spec["checkpoint"]).trigger(availableNow=True).start())
    for query in started:
        query.awaitTermination()
    print("finished", [query.id for query in started])
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
