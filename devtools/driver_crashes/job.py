"""One driver of the driver-crash loop's pipeline, in a session of its own (the loop kills it with
its process group): the eos-kafka source with a consumer group -> from_json -> a 10-second tumbling
window count per key -> update mode -> foreachBatch writing each batch's rows with
``df.write.format("eos-kafka").mode("append")``, in local[2,4], Trigger.AvailableNow.

Key ``<key>@<window start>``, value the window's count so far. Prints ``query started: <id>`` once
the query runs.
"""
from __future__ import annotations

import argparse

WINDOW = "10 seconds"
EVENT_SCHEMA = "key STRING, ts TIMESTAMP"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--faults-dir", required=True)
    parser.add_argument("--max-offsets", type=int, default=0, help="maxOffsetsPerTrigger (0: no limit)")
    parser.add_argument("--kill-workers", type=int, default=0,
                        help="this many write tasks of batch 0 kill their worker right after their commit")
    parser.add_argument("--shuffle-partitions", type=int, default=200)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    from pyspark.sql import functions as F

    from pyspark_eos.testing.fault_injection import STALL_AFTER_COMMIT, arm, enable
    from pyspark_eos.testing.local_spark import local_spark_session

    enable(args.faults_dir)  # before Spark starts: its processes inherit it
    spark = local_spark_session("local[2,4]", app_name="eos-kafka driver-crash loop", conf={
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions), "spark.sql.session.timeZone": "UTC"})
    if args.kill_workers:
        arm(STALL_AFTER_COMMIT, args.faults_dir, kill=True, times=args.kill_workers, batch=0)
    reader = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input).option("kafka.group.id", args.group)
              .option("startingOffsets", "earliest"))
    if args.max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets)
    events = reader.load().select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*")
    counts = events.groupBy(F.window("ts", WINDOW), "key").count()

    def write(batch, batch_id):
        (batch.select(F.concat("key", F.lit("@"), F.col("window.start").cast("string")).alias("key"),
                      F.col("count").cast("string").alias("value"))
         .write.format("eos-kafka").mode("append")
         .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.output).save())

    query = (counts.writeStream.outputMode("update").foreachBatch(write)
             .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
    print(f"query started: {query.id}", flush=True)
    query.awaitTermination()
    print("query ended", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
