"""Run by test_older_pyspark.py with an older PySpark: a rate-limited eos-kafka stream, as JSON.

Usage: python older_pyspark_job.py BOOTSTRAP TOPIC CHECKPOINT
"""
import json
import sys

from pyspark_eos.local_spark import local_spark_session

bootstrap, topic, checkpoint = sys.argv[1:4]
spark = local_spark_session("local[2]", app_name="eos-kafka older pyspark")
batches = {}


def record(frame, batch_id):
    batches[batch_id] = sorted(row["offset"] for row in frame.select("offset").collect())


frame = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "3").load())
query = frame.writeStream.foreachBatch(record).option("checkpointLocation", checkpoint).start()
query.processAllAvailable()
query.stop()
import pyspark  # noqa: E402

print(json.dumps({"pyspark": pyspark.__version__, "batches": [batches[k] for k in sorted(batches)]}))
spark.stop()
