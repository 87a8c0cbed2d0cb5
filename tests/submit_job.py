"""A user's job, run by test_distribution.py with ``spark-submit``: eos-kafka -> eos-kafka until
the input's end, then a JSON report of where the driver and the executors' Python workers
imported pyspark_eos from.

Usage: spark-submit [--py-files ... | --packages ...] submit_job.py BOOTSTRAP INPUT OUTPUT GROUP CHECKPOINT [register]
"""
import json
import sys

from pyspark.sql import SparkSession

bootstrap, source_topic, sink_topic, group, checkpoint = sys.argv[1:6]
spark = SparkSession.builder.appName("eos-kafka submit job").getOrCreate()
if "register" in sys.argv[6:]:
    import pyspark_eos

    pyspark_eos.register(spark)

frame = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", source_topic).option("kafka.group.id", group)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "9").load())
query = (frame.select("key", "value").writeStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sink_topic).option("kafka.group.id", group).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
query.awaitTermination()


def imported_from(_):
    import pyspark_eos
    from pyspark_eos.executor_identity import executor_id

    return executor_id(), pyspark_eos.__file__


import pyspark_eos  # noqa: E402  (after the query: a user's job needs no import of it to run)

# A barrier stage starts all its tasks at once, one per task slot: every executor runs one.
slots = spark.sparkContext.defaultParallelism
probe = spark.sparkContext.parallelize(range(slots), slots).barrier().mapPartitions(lambda rows: [imported_from(0)])
executors = sorted(set(probe.collect()))
print(json.dumps({"driver": pyspark_eos.__file__, "executors": executors, "batches": len(query.recentProgress)}))
spark.stop()
