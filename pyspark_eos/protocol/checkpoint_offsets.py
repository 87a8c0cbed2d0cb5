"""A Kafka source's offsets in a Structured Streaming checkpoint, as eos-kafka's source writes
them and as Spark's own Kafka connector does.

Spark's offset log (``offsets/<batch>``) holds each batch's end offsets, exclusive, one line per
source. Spark's Kafka source writes ``{"topic": {"partition": offset}}``, and eos-kafka's source
the same: Spark also shows these offsets in a query's progress (``startOffset``, ``endOffset``),
where users' monitoring reads them as Spark's Kafka source has them. So formats 0 and 1, which
share this layout, carry no marker; a later format that changes it adds ``"@format": N`` (no
topic can be named so), which a version that does not read N refuses by name
(protocol/formats). The source re-plans batches from these lines, and ``adopt-checkpoint`` reads
them.
"""
from __future__ import annotations

from typing import Mapping

from .formats import FORMAT, FORMAT_FIELD, check_readable
from .offset_range import TopicPartitionKey

Offsets = dict[TopicPartitionKey, int]
OFFSETS_FORMAT_KEY = "@format"


def to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict:
    result: dict = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def from_json(offsets: Mapping) -> Offsets:
    """The offsets of a batch in Spark's offset log, in any format this version reads."""
    version = offsets.get(OFFSETS_FORMAT_KEY, FORMAT)
    check_readable({FORMAT_FIELD: version}, "the source's offsets in the query's checkpoint (offsets/)")
    return {(topic, int(partition)): int(offset) for topic, partitions in offsets.items()
            if topic != OFFSETS_FORMAT_KEY for partition, offset in partitions.items()}


def is_kafka_offsets(line: object) -> bool:
    """True for a parsed offset-log line of a Kafka source (Spark's or eos-kafka's): topics, each
    with partitions and their offsets. A file source's ``{"logOffset": 3}`` or a rate source's
    number is not."""
    if not isinstance(line, dict):
        return False
    topics = {topic: partitions for topic, partitions in line.items() if topic != OFFSETS_FORMAT_KEY}
    return bool(topics) and all(isinstance(partitions, dict) and all(map(_partition_offset, partitions.items()))
                                for partitions in topics.values())


def _partition_offset(item: tuple) -> bool:
    partition, offset = item
    return str(partition).isdigit() and isinstance(offset, int) and not isinstance(offset, bool)
