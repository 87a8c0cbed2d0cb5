"""When each check of a streaming query runs. Spark calls a Python data source's streamReader() when
the query initializes, after start() has returned, and its streamWriter() first when the first batch
is planned (after the source chose the batch's offsets; then again for every batch), before any task
runs. Checks that need to know
the query is a stream, or need the DataFrame's schema, run there: nothing is read, written or
committed, and the source's mistakes fail before a batch is even planned."""
from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from .kafka_tools import committed_offsets
from .spark_tools import PARTITIONS, Pipeline


def _stream_source(spark, pipeline: Pipeline, schema: str | None, options: dict):
    reader = spark.readStream.format("eos-kafka")
    if schema:
        reader = reader.schema(schema)
    options = {"kafka.bootstrap.servers": pipeline.bootstrap, "subscribe": pipeline.input,
               "kafka.group.id": pipeline.group, "startingOffsets": "earliest", **options}
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


SOURCE, SINK = "before the first batch is planned", "when the first batch is planned, before any task"

CASES = {
    "endingOffsets on a stream": ({"endingOffsets": "latest"}, {}, None, lambda f: f.select("key", "value"),
                                  "endingOffsets options apply to batch queries only", SOURCE),
    ".schema() on the source": ({}, {}, "value string", lambda f: f,
                                "the eos-kafka source reads Spark's Kafka columns", SOURCE),
    "sink column type": ({}, {}, None, lambda f: f.select(F.col("offset").alias("value")),
                         "column 'value' has type bigint; the sink needs string or binary", SINK),
    "sink kafka.transactional.id": ({}, {"kafka.transactional.id": "mine"}, None, lambda f: f.select("key", "value"),
                                    "option kafka.transactional.id is not supported by the eos-kafka sink", SINK),
    "sink unknown option": ({}, {"topics": "x"}, None, lambda f: f.select("key", "value"),
                            "unknown option\\(s\\) for the eos-kafka sink: topics", SINK),
    "sink at-least-once with a group": ({}, {"deliveryGuarantee": "at-least-once"}, None,
                                        lambda f: f.select("key", "value"),
                                        "deliveryGuarantee=at-least-once commits no input offsets", SINK),
    "sink deliveryGuarantee": ({}, {"deliveryGuarantee": "none"}, None, lambda f: f.select("key", "value"),
                               "option deliveryGuarantee='none' is not valid; use one of: exactly-once, at-least-once",
                               SINK),
}


@pytest.mark.parametrize("case", CASES)
def test_a_stream_only_mistake_fails_before_any_task_runs(spark, kafka, tmp_path, case):
    source_options, sink_options, schema, transform, message, when = CASES[case]
    pipeline = Pipeline(kafka, tmp_path, rounds=1)
    frame = transform(_stream_source(spark, pipeline, schema, source_options))
    writer = (frame.writeStream.format("eos-kafka").option("kafka.bootstrap.servers", pipeline.bootstrap)
              .option("topic", pipeline.output).option("checkpointLocation", pipeline.checkpoint))
    for key, value in {"kafka.group.id": pipeline.group, **sink_options}.items():
        writer = writer if value is None else writer.option(key, value)  # None: the option left out
    query = writer.trigger(availableNow=True).start()  # returns: Spark initializes the query in its own thread
    with pytest.raises(StreamingQueryException, match=message):
        query.awaitTermination(120)
    checkpoint = Path(pipeline.checkpoint)
    assert query.recentProgress == [] and not list((checkpoint / "commits").glob("[0-9]*"))
    planned = list((checkpoint / "offsets").glob("[0-9]*"))
    assert planned == [] if when == SOURCE else [p.name for p in planned] == ["0"]
    assert pipeline.output_values() == []
    assert set(committed_offsets(pipeline.bootstrap, pipeline.group, pipeline.input, PARTITIONS).values()) == {-1001}
