"""A driver of its own for tests that kill the driver: runs one eos-kafka -> eos-kafka query.

Usage: python driver_job.py BOOTSTRAP INPUT OUTPUT GROUP CHECKPOINT [ARM_DRIVER_CRASH]
"""
import sys

from copy_query import run_copy  # tests/ is the script's directory, first on sys.path

from pyspark_eos.testing.fault_injection import DRIVER_AFTER_KAFKA_COMMIT, arm
from pyspark_eos.testing.local_spark import executor_local_dirs, local_spark_session

bootstrap, source_topic, sink_topic, group, checkpoint = sys.argv[1:6]
spark = local_spark_session("local[2]", app_name="eos-kafka driver job")
if len(sys.argv) > 6:
    for directory in executor_local_dirs(spark):
        arm(DRIVER_AFTER_KAFKA_COMMIT, directory)
run_copy(spark, bootstrap, source_topic, sink_topic, group, checkpoint)
print("finished")
spark.stop()
