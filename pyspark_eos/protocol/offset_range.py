"""The unit both sides of the protocol speak in: a range of one partition's offsets."""
from __future__ import annotations

from dataclasses import dataclass

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one partition. Offsets have gaps (transaction markers, aborted
    records), so end - start bounds the record count but is not it."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}[{self.start},{self.end})"
