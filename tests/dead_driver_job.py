"""A driver the dead-driver tests kill: update-mode window counts of JSON event files written by
``df.write.format("eos-kafka")`` inside foreachBatch (a progress write per batch), one query per
spec, side by side, Trigger.AvailableNow.

Usage: python dead_driver_job.py BOOTSTRAP SPEC_JSON
SPEC: {"master", "faults_dir", "reports", "switches": [...], "queries": [{"id", "input",
"checkpoint", "topic", "prefix", "point", "from_batch"}]}. A query's id is written into its new
checkpoint, so that its faults can name it. A query with a point: every write task of its
foreachBatch writes from batch ``from_batch`` on that reaches the point stalls there, once two
have (the test then kills this driver with its process group); ``reports`` has a report per point.
"""
import json
import sys
from pathlib import Path

from pyspark.sql import functions as F

from pyspark_eos.testing.fault_injection import arm, enable
from pyspark_eos.testing.local_spark import local_spark_session

WINDOW = "10 seconds"
EVENT_SCHEMA = "key STRING, ts TIMESTAMP"
# Longer than the test: only a fence, never the broker's timeout, can end a dead run's transaction.
TRANSACTION_TIMEOUT_MS = 600_000
TASKS = 2  # each batch's write: two tasks, both stalled at a query's point together


def start(spark, bootstrap: str, query: dict):
    checkpoint = Path(query["checkpoint"])
    if not (checkpoint / "metadata").exists():
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / "metadata").write_text(json.dumps({"id": query["id"]}))
    events = spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1).json(query["input"])
    counts = events.groupBy(F.window("ts", WINDOW), "key").count()

    def write(batch, batch_id):
        (batch.select(F.concat("key", F.lit("@"), F.col("window.start").cast("string")).alias("key"),
                      F.col("count").cast("string").alias("value"))
         .write.format("eos-kafka").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", query["topic"]).option("transactionalIdPrefix", query["prefix"])
         .option("kafka.transaction.timeout.ms", TRANSACTION_TIMEOUT_MS).save())

    return (counts.writeStream.outputMode("update").foreachBatch(write)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def main(bootstrap: str, spec_json: str) -> None:
    spec = json.loads(spec_json)
    enable(spec["faults_dir"])
    spark = local_spark_session(spec["master"], app_name="eos-kafka dead-driver job", conf={
        "spark.sql.shuffle.partitions": str(TASKS), "spark.sql.session.timeZone": "UTC"})
    for switch in spec.get("switches", []):
        arm(switch, spec["faults_dir"])
    for query in spec["queries"]:
        if query.get("point"):
            arm(query["point"], spec["faults_dir"], gather=TASKS, query=query["id"], from_batch=query["from_batch"],
                report_dir=spec["reports"], with_executor=True)
    started = [start(spark, bootstrap, query) for query in spec["queries"]]
    for query in started:
        query.awaitTermination()
    print("finished", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
