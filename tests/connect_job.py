"""A Spark Connect client's job, run by test_spark_connect.py in a process of its own: registers
the format over Connect, reads the input in batch, then runs the eos-kafka -> eos-kafka query to
the input's end, and prints a JSON report.

Usage: python connect_job.py SC_URL BOOTSTRAP INPUT OUTPUT GROUP CHECKPOINT
"""
import json
import sys

from copy_query import run_copy  # tests/ is the script's directory, first on sys.path
from pyspark.sql import SparkSession

import pyspark_eos

url, bootstrap, source_topic, sink_topic, group, checkpoint = sys.argv[1:7]
spark = SparkSession.builder.remote(url).getOrCreate()
pyspark_eos.register(spark)
rows = (spark.read.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source_topic).load().count())
query = run_copy(spark, bootstrap, source_topic, sink_topic, group, checkpoint)
print(json.dumps({"session": type(spark).__module__, "batch_rows": rows, "batches": len(query.recentProgress),
                  "exception": str(query.exception()) if query.exception() else None}))
spark.stop()
