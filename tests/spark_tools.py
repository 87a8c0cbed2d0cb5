"""Running eos-kafka streaming queries in tests and recording what each micro-batch saw."""
from __future__ import annotations

import contextlib
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterator

from .copy_query import await_end, to_the_end
from .kafka_tools import (
    committed_offsets,
    create_topic,
    last_stable_offsets,
    mixed_transactions,
    read_committed,
    unique_name,
    wait_until,
    write_transactions,
)


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


def source(spark, bootstrap: str, topic: str, schema: str | None = None, **options):
    reader = spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    reader = reader if schema is None else reader.schema(schema)
    for key, value in options.items():
        reader = reader if value is None else reader.option(key, str(value))  # None: the option left out
    return reader.load()


def run_available_now(frame, checkpoint: str, recorder: BatchRecorder, timeout: float = 240.0):
    """Run a query with Trigger.AvailableNow to completion; return it (for progress and errors)."""
    query = to_the_end(frame.writeStream.foreachBatch(recorder).option("checkpointLocation", checkpoint)).start()
    finished = await_end(query, timeout)
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
              .option("topic", sink_topic))
    for key, value in {"kafka.group.id": group, **(sink_options or {})}.items():
        writer = writer if value is None else writer.option(key, str(value))  # None: the option left out
    return writer


def logged_batches(checkpoint: str | Path, log: str) -> set[str]:
    """The batch ids in a checkpoint's ``log`` ("offsets": planned, "commits": completed)."""
    return {p.name for p in (Path(checkpoint) / log).iterdir() if p.name.isdigit()}


def run_to_end(writer, checkpoint: str, timeout: float = 300.0):
    """Start with Trigger.AvailableNow (copy_query.to_the_end) and wait; a failed query raises
    StreamingQueryException."""
    query = to_the_end(writer.option("checkpointLocation", checkpoint)).start()
    if not await_end(query, timeout):
        query.stop()
        raise AssertionError(f"the query did not finish in {timeout:.0f} s")
    return query


PARTITIONS = 3


class Pipeline:
    """Input topic (committed and aborted transactions), output topic, group, checkpoint."""

    def __init__(self, kafka, tmp_path: Path, rounds: int = 7, replication: int = 1):
        self.bootstrap = kafka.bootstrap_servers
        self.input = create_topic(self.bootstrap, unique_name("in"), partitions=PARTITIONS, replication=replication)
        self.output = create_topic(self.bootstrap, unique_name("out"), partitions=2, replication=replication)
        self.group = unique_name("pipeline")
        self.checkpoint = str(tmp_path / "checkpoint")
        self.add_input(0, rounds)

    def add_input(self, first_round: int, rounds: int) -> None:
        transactions = mixed_transactions(PARTITIONS, first_round + rounds)[first_round:]
        write_transactions(self.bootstrap, self.input, transactions)

    def run(self, spark, transform=None, checkpoint: str | None = None, sink_options: dict | None = None,
            servers: str | None = None, **options):
        """The query, through ``servers`` (another listener of the cluster) if given."""
        options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": 9, **options}
        writer = eos_pipeline(spark, servers or self.bootstrap, self.input, self.output, self.group, transform,
                              sink_options, **options)
        return run_to_end(writer, checkpoint or self.checkpoint)

    @contextlib.contextmanager
    def riding_through(self, spark, servers: str | None = None, trigger: str = "500 milliseconds",
                       sink_options: dict | None = None, **options) -> Iterator:
        """A running query (through ``servers`` if given) that must ride through what the block
        does to the cluster or the network: the block runs once the query has written its first
        output; after it, every input record must reach the output while the query stays up, and
        once the query stopped, each of them once. ``options``: the source's (None: left out)."""
        options = {k: v for k, v in {"startingOffsets": "earliest", "maxOffsetsPerTrigger": 9, **options}.items()
                   if v is not None}
        writer = eos_pipeline(spark, servers or self.bootstrap, self.input, self.output, self.group,
                              sink_options=sink_options, **options)
        query = writer.option("checkpointLocation", self.checkpoint).trigger(processingTime=trigger).start()
        try:
            wait_until(lambda: self.output_values(), 120, "the query's first output")
            yield query
            expected = sorted(self.input_values())
            wait_until(lambda: sorted(self.output_values()) == expected or not query.isActive, 180,
                       "the input written around the fault in the output")
            assert query.isActive, f"the query died: {query.exception()}"
        finally:
            query.stop()
        self.assert_exactly_once()

    def output_values(self) -> list[bytes]:
        return [r.value for r in read_committed(self.bootstrap, self.output, partitions=2)]

    def input_values(self) -> list[bytes]:
        return [r.value for r in read_committed(self.bootstrap, self.input, partitions=PARTITIONS)]

    def assert_exactly_once(self) -> None:
        """Every committed input record's value once in the output, and the offsets at the end."""
        values, expected = Counter(self.output_values()), Counter(self.input_values())
        assert values == expected, (f"missing {sorted(expected - values)[:20]} ({sum((expected - values).values())}), "
                                    f"extra {sorted(values - expected)[:20]} ({sum((values - expected).values())})")
        assert max(values.values(), default=1) == 1
        self.assert_offsets_at_input_end()

    def assert_offsets_at_input_end(self) -> None:
        assert committed_offsets(self.bootstrap, self.group, self.input, PARTITIONS) == \
            last_stable_offsets(self.bootstrap, self.input, PARTITIONS)

