"""A user's job, run by test_distribution.py with ``spark-submit``: eos-kafka -> eos-kafka until
the input's end, then a JSON report of where the driver and the executors' Python workers
imported pyspark_eos from.

Usage: spark-submit [--py-files ... | --packages ...] submit_job.py BOOTSTRAP INPUT OUTPUT GROUP CHECKPOINT [register]
"""
import json
import sys

from copy_query import run_copy  # tests/ is the script's directory, first on sys.path
from pyspark.sql import SparkSession

bootstrap, source_topic, sink_topic, group, checkpoint = sys.argv[1:6]
spark = SparkSession.builder.appName("eos-kafka submit job").getOrCreate()
if "register" in sys.argv[6:]:
    import pyspark_eos

    pyspark_eos.register(spark)

query = run_copy(spark, bootstrap, source_topic, sink_topic, group, checkpoint)


def imported_from(_):
    import pyspark_eos
    from pyspark_eos.protocol.executor_identity import executor_id

    return executor_id(), pyspark_eos.__file__


import pyspark_eos  # noqa: E402  (after the query: a user's job needs no import of it to run)

# A barrier stage starts all its tasks at once, one per task slot: every executor runs one.
slots = spark.sparkContext.defaultParallelism
probe = spark.sparkContext.parallelize(range(slots), slots).barrier().mapPartitions(lambda rows: [imported_from(0)])
executors = sorted(set(probe.collect()))
print(json.dumps({"driver": pyspark_eos.__file__, "executors": executors, "batches": len(query.recentProgress)}))
spark.stop()
