"""``spark.readStream.format("eos-kafka")``: Spark's micro-batch protocol over Kafka offsets.

Spark calls initialOffset/latestOffset/partitions/commit in one long-lived Python process per
query run, and keeps every batch's end offsets in its offset log. A batch is re-planned on
restart from (previous end, end) alone, so nothing here may depend on state that a restart loses.

Admission control (``latestOffset(start, limit)``, ``getDefaultReadLimit``) and
Trigger.AvailableNow exist from PySpark 4.2. On 4.0/4.1 Spark calls ``latestOffset()`` with no
arguments; the stream then continues from the end of the last batch it knows of in this process
(one it returned, or a replayed one Spark planned) and applies maxOffsetsPerTrigger itself. A query
restarted after a committed batch tells the new process nothing before its first
``latestOffset()``: that one begins at the starting offsets, which only ``startingOffsets=group``
(the group's offsets, committed with the batches' output) places at the query's progress.
"""
from __future__ import annotations

import logging
import math
import time

from pyspark.sql.datasource import DataSourceStreamReader

from ..protocol.checkpoint_offsets import from_json, to_json
from .offset_planning import Offsets, cap, delay_batch, rate_limit
from .options import SourceOptions
from .planner import SourcePlanner, read_partition

try:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # PySpark 4.0 and 4.1
    ReadAllAvailable = ReadMaxRows = None
    SupportsTriggerAvailableNow = object

log = logging.getLogger(__name__)


class KafkaMicroBatchStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, columns: tuple[str, ...] | None = None):
        self.planner = SourcePlanner(options, columns)
        self._last_end: Offsets | None = None
        self._latest: Offsets | None = None
        self._available_now_end: Offsets | None = None
        self._completed: Offsets | None = None
        self._initial: Offsets | None = None
        self._last_trigger_ms: float | None = None  # a query's first trigger never waits (as the connector's)

    @property
    def options(self) -> SourceOptions:
        return self.planner.options

    def initialOffset(self) -> dict:
        # Spark asks more than once as a query starts (twice on 4.3): one answer per run, as
        # Spark's own Kafka source keeps its initial offsets, so that "latest" cannot move between
        # the asks, and the lookups are made once.
        if self._initial is None:
            # Join (and so fence an older instance of the pipeline) before reading the group's
            # offsets: a transaction the old instance still has open then holds them, and is
            # waited out (G5).
            self.planner.join_group()
            self._initial = self.planner.resolve(self.options.starting, self.planner.kafka.topic_partitions())
            log.info("query starts at %s (startingOffsets: %s)", to_json(self._initial), self.options.starting.kind)
            self._completed = self._initial  # where the query starts is no batch completed: nothing to commit
        return to_json(self._initial)

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        # Keeps the query in its consumer group from its first batch on, and stops a fenced one early.
        self.planner.join_group()
        if start is not None:
            # Spark passes the end of the last batch in its commit log: done, output visible.
            self._batch_completed(from_json(start))
        begin = from_json(start) if start is not None else self._continue_from()
        partitions = self.planner.kafka.topic_partitions()
        self._latest = self.planner.kafka.latest(partitions)
        if self._waits_for_more(begin):
            return to_json(begin)  # no new batch yet (minOffsetsPerTrigger)
        new = [tp for tp in partitions if tp not in begin]
        if new:
            log.info("new partitions %s are read from their earliest offset", new)
            begin = {**begin, **self.planner.kafka.earliest(new)}
        end = cap(self._latest, self._available_now_end)
        max_records = self._max_records(limit)
        if max_records is not None:
            end = rate_limit(begin, end, max_records)
        self._last_end = end
        return to_json(end)

    def _waits_for_more(self, begin: Offsets) -> bool:
        """minOffsetsPerTrigger and maxTriggerDelay, as Spark's connector applies them (never under
        Trigger.AvailableNow, whose batches read what there is)."""
        minimum = self.options.min_offsets_per_trigger
        if minimum is None or self._available_now_end is not None:
            return False
        # The monotonic clock: a step of the wall clock neither holds a batch back nor lets one through.
        now_ms = time.monotonic() * 1000
        since_last_ms = math.inf if self._last_trigger_ms is None else now_ms - self._last_trigger_ms
        available = sum(max(0, end - begin[tp]) for tp, end in self._latest.items() if tp in begin)
        if delay_batch(available, minimum, since_last_ms, self.options.max_trigger_delay_ms):
            return True
        self._last_trigger_ms = now_ms
        return False

    def getDefaultReadLimit(self):
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = self.planner.kafka.latest(self.planner.kafka.topic_partitions())
        log.info("Trigger.AvailableNow: reading up to %s", to_json(self._available_now_end))

    def reportLatestOffset(self) -> dict | None:
        # Spark asks right after latestOffset() and shows the answer as the progress's latestOffset,
        # so the last stable offsets that latestOffset() just looked up are current: no second
        # request. Python sources cannot implement ReportsSourceMetrics (the offsets-behind-latest
        # metrics of Spark's Kafka source); the backlog is latestOffset minus endOffset.
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict):
        # A restarted query's replayed batch is planned from Spark's offset log before any
        # latestOffset() (4.0/4.1): the next batch continues from its end.
        self._last_end = from_json(end)
        return self.planner.plan(from_json(start), from_json(end))

    def read(self, partition):
        return read_partition(partition, self.planner.settings)

    def commit(self, end: dict) -> None:
        # A narrow pipeline's sink has committed these offsets in its tasks' transactions already;
        # for any other shape the group follows here (on PySpark 4.0/4.1 only here, a batch late:
        # Spark calls commit(end) when it plans the next batch).
        log.debug("batch up to %s is done", end)
        self._batch_completed(from_json(end))

    def stop(self) -> None:
        # Spark kills the reader process rather than calling this; a restarted query's static
        # membership takes over from the dead one's (same instance id).
        self.planner.close()

    def _batch_completed(self, end: Offsets) -> None:
        # Spark tells twice on 4.2+ (the next latestOffset's start, then commit): look once.
        if end != self._completed:
            self._completed = end
            self.planner.commit_completed_batch(end)

    def _continue_from(self) -> Offsets:
        if self._last_end is None:
            self._last_end = from_json(self.initialOffset())
        return self._last_end

    def _max_records(self, limit) -> int | None:
        if limit is None:  # PySpark 4.0/4.1 passes no limit: apply the option here
            return self.options.max_offsets_per_trigger
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            return limit.max_rows
        return None  # ReadAllAvailable (e.g. Trigger.AvailableNow batches) or a limit Kafka offsets can't express

    def __getstate__(self):
        return {"planner": self.planner, "_last_end": None, "_latest": None, "_available_now_end": None,
                "_completed": None, "_initial": None}
