"""Running eos-kafka streaming queries in tests and recording what each micro-batch saw."""
from __future__ import annotations

import threading
from collections import defaultdict


class BatchRecorder:
    """A foreachBatch sink that keeps (partition, offset, value) of every row per batch id."""

    def __init__(self):
        self.batches: dict[int, list[tuple[int, int, bytes]]] = defaultdict(list)
        self._lock = threading.Lock()

    def __call__(self, frame, batch_id: int) -> None:
        rows = [(r["partition"], r["offset"], bytes(r["value"])) for r in frame.select("partition", "offset", "value").collect()]
        with self._lock:
            self.batches[batch_id] = sorted(rows)

    def all_rows(self) -> list[tuple[int, int, bytes]]:
        return sorted(row for rows in self.batches.values() for row in rows)


def source(spark, bootstrap: str, topic: str, **options):
    reader = spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def run_available_now(frame, checkpoint: str, recorder: BatchRecorder, timeout: float = 240.0):
    """Run a query with Trigger.AvailableNow to completion; return it (for progress and errors)."""
    query = (frame.writeStream.foreachBatch(recorder).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    finished = query.awaitTermination(timeout)
    if not finished:
        query.stop()
        raise AssertionError(f"the query did not finish in {timeout:.0f} s")
    return query


def eos_pipeline(spark, bootstrap: str, source_topic: str, sink_topic: str, group: str, transform=None,
                 sink_options: dict | None = None, **source_options):
    """eos-kafka -> transform -> eos-kafka, as a not yet started DataStreamWriter."""
    frame = source(spark, bootstrap, source_topic, **{"kafka.group.id": group, **source_options})
    frame = transform(frame) if transform else frame.select("key", "value")
    writer = (frame.writeStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", sink_topic).option("kafka.group.id", group))
    for key, value in (sink_options or {}).items():
        writer = writer.option(key, str(value))
    return writer


def run_to_end(writer, checkpoint: str, timeout: float = 300.0):
    """Start with Trigger.AvailableNow and wait; a failed query raises StreamingQueryException."""
    query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    if not query.awaitTermination(timeout):
        query.stop()
        raise AssertionError(f"the query did not finish in {timeout:.0f} s")
    return query
