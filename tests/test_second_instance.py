"""G3: a second instance of a running pipeline fences the first; the output stays exactly-once."""
from __future__ import annotations

from .kafka_tools import committed_offsets, last_stable_offsets, wait_until
from .spark_tools import PARTITIONS, Pipeline, eos_pipeline


def start(pipeline: Pipeline, spark, checkpoint: str, **options):
    writer = eos_pipeline(spark, pipeline.bootstrap, pipeline.input, pipeline.output, pipeline.group,
                          maxOffsetsPerTrigger=9, **options)
    return writer.option("checkpointLocation", checkpoint).trigger(processingTime="500 milliseconds").start()


def test_the_first_instance_is_fenced_and_the_second_finishes_exactly_once(spark, kafka, tmp_path):
    pipeline = Pipeline(kafka, tmp_path, rounds=12)
    first = start(pipeline, spark, str(tmp_path / "first"), startingOffsets="earliest")
    second = None
    try:
        wait_until(lambda: (first.lastProgress or {}).get("batchId", -1) >= 1, 120, "the first instance's 2nd batch")
        second = start(pipeline, spark, str(tmp_path / "second"), startingOffsets="group")
        wait_until(lambda: not first.isActive, 120, "the first instance to be fenced")
        error = str(first.exception())
        assert "another instance of the same pipeline" in error or "FENCED_INSTANCE_ID" in error or \
            "fenced by other consumer" in error, error
        end = last_stable_offsets(pipeline.bootstrap, pipeline.input, PARTITIONS)
        wait_until(lambda: committed_offsets(pipeline.bootstrap, pipeline.group, pipeline.input, PARTITIONS) == end,
                   120, "the second instance to commit the whole input")
        assert second.isActive and second.exception() is None
    finally:
        for query in (first, second):
            if query is not None and query.isActive:
                query.stop()
    pipeline.assert_exactly_once()
