"""A Python streaming source and sink that only hand Arrow batches over: what Spark charges any
Python data source pipeline, with no Kafka and no eos-kafka code in it.

The source (``bench-null-stream``) yields ready Arrow batches of key and value, records of
``size`` bytes, 8,192 to a batch as eos-kafka's reader yields them, over ``tasks`` read tasks per
micro-batch and ``maxOffsetsPerTrigger`` records per micro-batch; it supports
Trigger.AvailableNow. The sink counts the records its tasks receive and appends each committed
batch's count to the file named by its ``counts`` option. ``contenders.python_stream_copy`` runs
it as the copy contenders run (the ``variants`` scenario's ``python-stream``): its time outside
batches and its first batch against its later ones are Spark's part of what a query of eos-kafka
costs.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceStreamArrowWriter, DataSourceStreamReader, InputPartition,
                                    WriterCommitMessage)
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

BATCH = 8192  # the eos-kafka reader's Arrow batch
SCHEMA = "key binary, value binary"


class NullStream(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-null-stream"

    def schema(self):
        return SCHEMA

    def streamReader(self, schema):
        options = self.options
        return _Reader(int(options["records"]), int(options["size"]), int(options["tasks"]),
                       int(options["maxOffsetsPerTrigger"]))

    def streamWriter(self, schema, overwrite):
        return _Writer(self.options["counts"])


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, records: int, size: int, tasks: int, per_trigger: int):
        self.records, self.size, self.tasks, self.per_trigger = records, size, tasks, per_trigger

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def latestOffset(self, start: dict, limit) -> dict:
        most = limit.max_rows if isinstance(limit, ReadMaxRows) else self.records
        return {"offset": min(self.records, start["offset"] + most)}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the input is fixed: latestOffset never goes past ``records``

    def partitions(self, start: dict, end: dict):
        low, high = start["offset"], end["offset"]
        count = min(self.tasks, high - low)  # as many tasks as asked, with the records balanced over them
        bounds = [low + (high - low) * index // count for index in range(count + 1)] if count > 0 else []
        return [InputPartition(pair) for pair in zip(bounds, bounds[1:])]

    def read(self, partition):
        """The partition's records in batches of up to BATCH: slices of one batch built once."""
        first, end = partition.value
        rows = end - first
        batch = _batch(min(BATCH, rows), self.size)
        for start in range(0, rows, BATCH):
            yield batch.slice(0, min(BATCH, rows - start))

    def commit(self, end: dict) -> None:
        pass


def _batch(rows: int, size: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([None] * rows, pa.binary()), pa.array([b"x" * size] * rows, pa.binary())], names=["key", "value"])


class Counted(WriterCommitMessage):
    """A write task's count of the records it received."""

    def __init__(self, records: int):
        self.records = records


class _Writer(DataSourceStreamArrowWriter):
    def __init__(self, counts: str):
        self.counts = counts

    def write(self, iterator):
        return Counted(sum(batch.num_rows for batch in iterator))

    def commit(self, messages, batchId) -> None:
        with open(self.counts, "a") as out:
            out.write(f"{batchId} {sum(m.records for m in messages)}\n")

    def abort(self, messages, batchId) -> None:
        pass


def counted(path: Path) -> int:
    """Records the sink's committed batches received (a batch committed twice counted once)."""
    batches = dict(line.split() for line in path.read_text().splitlines()) if path.exists() else {}
    return sum(int(count) for count in batches.values())
