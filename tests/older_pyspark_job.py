"""Run by test_older_pyspark.py with an older PySpark: a rate-limited eos-kafka -> eos-kafka
stream, run to the end of its input twice in one driver (the second time once a line arrives on
stdin, as a restarted query: Spark starts a new source process and tells it nothing of where the
first one ended); prints how many rows each batch of each run read, as a JSON line.

Usage: python older_pyspark_job.py BOOTSTRAP INPUT OUTPUT GROUP CHECKPOINT
"""
import json
import sys

import pyspark

from pyspark_eos.testing.local_spark import local_spark_session
from pyspark_eos.sink.writer import EosKafkaStreamWriter

bootstrap, source_topic, sink_topic, group, checkpoint = sys.argv[1:6]
spark = local_spark_session("local[2]", app_name="eos-kafka older pyspark")


def run_to_the_end() -> list[int]:
    frame = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source_topic).option("kafka.group.id", group).option("startingOffsets", "group")
             .option("startingOffsetsFallback", "earliest").option("maxOffsetsPerTrigger", "3").load())
    query = (frame.select("key", "value").writeStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", sink_topic).option("kafka.group.id", group).option("checkpointLocation", checkpoint)
             .start())
    query.processAllAvailable()
    query.stop()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


for run in range(2):
    if run:
        sys.stdin.readline()
    print(json.dumps({"pyspark": pyspark.__version__, "rows_per_batch": run_to_the_end(),
                      "sink_writer": EosKafkaStreamWriter.__bases__[-1].__name__}), flush=True)
spark.stop()
