"""``spark.read.format("eos-kafka")``: a bounded read of [startingOffsets, endingOffsets).

With kafka.group.id the read's plan joins the group (group_membership), from a driver-side process
that Spark reuses for later planning and that Spark tells nothing when the job ends. The membership
leaves the group once the read's eos-kafka write has committed its ranges; a read that no such write
commits (a count(), a write elsewhere) keeps it until the next read of the same group and
subscription is planned in this process, which closes it before joining in its place.
"""
from __future__ import annotations

import logging

from pyspark.sql.datasource import DataSourceReader

from .options import SourceOptions
from .planner import SourcePlanner, read_partition

log = logging.getLogger(__name__)

# The planner of the last read of each group member (SourcePlanner.member_key) planned in this process.
_holding_membership: dict[tuple, SourcePlanner] = {}


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, columns: tuple[str, ...] | None = None):
        self.planner = SourcePlanner(options, columns, batch_read=True)

    def partitions(self):
        options = self.planner.options
        topic_partitions = self.planner.kafka.topic_partitions()
        start = self.planner.resolve(options.starting, topic_partitions)
        end = self.planner.resolve(options.ending, topic_partitions)
        if options.group_id is None:
            return self.planner.plan(start, end)
        _close_earlier_read(self.planner.member_key())
        partitions = self.planner.plan(start, end)
        self.planner.leave_group_once_committed(partitions)
        _holding_membership[self.planner.member_key()] = self.planner
        return partitions

    def read(self, partition):
        return read_partition(partition, self.planner.settings)


def _close_earlier_read(key: tuple) -> None:
    # Its member would be taken over by the new join anyway (same instance id); closed first, it
    # is replaced without being fenced, which librdkafka reports as a fatal error.
    earlier = _holding_membership.pop(key, None)
    if earlier is not None:
        log.info("closing the membership of an earlier batch read of consumer group %r in this process",
                 earlier.options.group_id)
        earlier.close()
