"""One instance of a continuously running eos-kafka -> eos-kafka pipeline, for the tests of a
second instance taking over. ``instance`` builds its query in a given session; run as a module it
is a Spark application of its own (its own driver), as when the same job is submitted twice: it
runs until its query ends, prints the query's error and exits with FAILED.

Usage: python -m tests.instance_job BOOTSTRAP INPUT OUTPUT GROUP CHECKPOINT TAG MAX_OFFSETS_PER_TRIGGER
(from the project's root; every output record's key is TAG, so a test can tell the instances'
records apart)
"""
from __future__ import annotations

import sys

from pyspark_eos.testing.local_spark import local_spark_session

from .spark_tools import eos_pipeline

# Small batches on a short trigger: an instance is still working through its input when the
# other one starts.
MAX_OFFSETS_PER_TRIGGER = 9
TRIGGER = "500 milliseconds"
FAILED = 2


def tagged(tag: str):
    """Keys every record with ``tag``; the values, which the exactly-once checks compare, stay."""
    from pyspark.sql.functions import lit

    return lambda frame: frame.select(lit(tag.encode()).alias("key"), "value")


def instance(spark, bootstrap: str, source_topic: str, sink_topic: str, group: str, checkpoint: str,
             tag: str | None = None, max_offsets_per_trigger: int | None = MAX_OFFSETS_PER_TRIGGER, **source_options):
    """The pipeline's query, ready to start(); ``max_offsets_per_trigger`` None reads all there is
    each batch. Spark looks the format up and asks the source for its schema here, which takes
    seconds: a test can have that done before the moment it starts the query."""
    limit = {} if max_offsets_per_trigger is None else {"maxOffsetsPerTrigger": max_offsets_per_trigger}
    writer = eos_pipeline(spark, bootstrap, source_topic, sink_topic, group, tagged(tag) if tag else None,
                          **limit, **source_options)
    return writer.option("checkpointLocation", checkpoint).trigger(processingTime=TRIGGER)


def main(argv: list[str]) -> int:
    bootstrap, source_topic, sink_topic, group, checkpoint, tag, max_offsets_per_trigger = argv
    spark = local_spark_session("local[2]", app_name=f"eos-kafka instance {tag}")
    query = instance(spark, bootstrap, source_topic, sink_topic, group, checkpoint, tag, int(max_offsets_per_trigger),
                     startingOffsets="earliest").start()
    try:
        query.awaitTermination()
    except Exception as error:  # noqa: BLE001 - the query's failure is this job's result
        print(f"query failed: {error}", file=sys.stderr, flush=True)
        return FAILED
    finally:
        spark.stop()
    print("query stopped without an error", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
