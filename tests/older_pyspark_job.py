"""Run by test_older_pyspark.py with an older PySpark: a rate-limited eos-kafka -> eos-kafka
stream; prints how many rows each batch read, as JSON.

Usage: python older_pyspark_job.py BOOTSTRAP INPUT OUTPUT GROUP CHECKPOINT
"""
import json
import sys

import pyspark

from pyspark_eos.testing.local_spark import local_spark_session
from pyspark_eos.sink.writer import EosKafkaStreamWriter

bootstrap, source_topic, sink_topic, group, checkpoint = sys.argv[1:6]
spark = local_spark_session("local[2]", app_name="eos-kafka older pyspark")
frame = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", source_topic).option("kafka.group.id", group)
         .option("startingOffsets", "group").option("startingOffsetsFallback", "earliest").option("maxOffsetsPerTrigger", "3").load())
query = (frame.select("key", "value").writeStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sink_topic).option("kafka.group.id", group).option("checkpointLocation", checkpoint).start())
query.processAllAvailable()
query.stop()
rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
print(json.dumps({"pyspark": pyspark.__version__, "rows_per_batch": rows,
                  "sink_writer": EosKafkaStreamWriter.__bases__[-1].__name__}))
spark.stop()
