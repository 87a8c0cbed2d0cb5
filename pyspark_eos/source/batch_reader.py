"""``spark.read.format("eos-kafka")``: a bounded read of [startingOffsets, endingOffsets)."""
from __future__ import annotations

from pyspark.sql.datasource import DataSourceReader

from .options import SourceOptions
from .planner import SourcePlanner, read_partition


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.planner = SourcePlanner(options)

    def partitions(self):
        options = self.planner.options
        topic_partitions = self.planner.kafka.topic_partitions()
        start = self.planner.resolve(options.starting, topic_partitions)
        end = self.planner.resolve(options.ending, topic_partitions)
        return self.planner.plan(start, end)

    def read(self, partition):
        return read_partition(partition, self.planner.settings)
