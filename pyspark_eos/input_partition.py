"""What one Spark task of the source reads: offset ranges, planned on the driver."""
from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from .offset_planning import OffsetRange


class KafkaInputPartition(InputPartition):
    def __init__(self, index: int, ranges: tuple[OffsetRange, ...]):
        super().__init__(index)
        self.index = index
        self.ranges = ranges

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.index}, {', '.join(map(str, self.ranges))})"


def input_partitions(ranges: list[OffsetRange]) -> list[KafkaInputPartition]:
    """One Spark task per partition range, like Spark's Kafka source without minPartitions."""
    return [KafkaInputPartition(index, (offset_range,)) for index, offset_range in enumerate(ranges)]
