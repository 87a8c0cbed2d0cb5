"""What one Spark task of the source reads: offset ranges, planned on the driver."""
from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from ..sink.attempt_fencing import FencingPlan
from .group_membership import GroupStamp
from .offset_planning import OffsetRange


class KafkaInputPartition(InputPartition):
    """``group`` is the membership the plan was made under (None when no kafka.group.id is set):
    the sink commits the ranges' end offsets with it, so a fenced plan cannot commit. ``fencing``
    is where the plan's attempts claim their input (attempt_fencing)."""

    def __init__(self, index: int, ranges: tuple[OffsetRange, ...], group: GroupStamp | None = None,
                 fencing: FencingPlan | None = None):
        super().__init__(index)
        self.index = index
        self.ranges = ranges
        self.group = group
        self.fencing = fencing

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.index}, {', '.join(map(str, self.ranges))})"


def input_partitions(ranges: list[OffsetRange], group: GroupStamp | None,
                     fencing: FencingPlan | None = None) -> list[KafkaInputPartition]:
    """One Spark task per partition range, like Spark's Kafka source without minPartitions."""
    return [KafkaInputPartition(index, (offset_range,), group, fencing) for index, offset_range in enumerate(ranges)]
