"""What the sink writes: the input columns, checked once, turned into Kafka records.

The columns are those of Spark's Kafka sink: ``value`` (required, string or binary), ``key``
(string or binary), ``topic`` (string; required unless the ``topic`` option is set, which then
wins), ``partition`` (int) and ``headers`` (array<struct<key: string, value: binary>>). Other
columns are ignored, as Spark's sink does.
"""
from __future__ import annotations

from itertools import islice, repeat
from typing import Callable, Iterable, Iterator, NamedTuple

from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from ..errors import ConfigurationError
from ..kafka.schema import HEADERS_TYPE


class KafkaRecord(NamedTuple):
    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None


# A record as failures describe it: (size in bytes, topic, partition or None).
SizedRecord = tuple[int, str, int | None]

# librdkafka's "any partition" (RD_KAFKA_PARTITION_UA): the producer's partitioner chooses.
ANY_PARTITION = -1
_ROWS_PER_CHUNK = 10_000


class RecordColumns(NamedTuple):
    """A batch of records as one list per column, so that producing them makes no object per record
    (a Python object per record was a fifth of the sink's CPU time). A column that is constant
    for the batch (the topic option, no key) is a single value."""

    topics: list[str] | str
    partitions: list[int | None] | None
    keys: list[bytes | str | None] | None
    values: list[bytes | str | None]
    headers: list[list[tuple[str, bytes | None]] | None] | None

    def rows(self) -> Iterator[tuple]:
        """(topic, value, key, partition, headers) per record, in Producer.produce's order."""
        topics = repeat(self.topics) if isinstance(self.topics, str) else self.topics
        keys = repeat(None) if self.keys is None else self.keys
        partitions = repeat(ANY_PARTITION) if self.partitions is None else (
            ANY_PARTITION if p is None else p for p in self.partitions)
        headers = repeat(None) if self.headers is None else self.headers
        return zip(topics, self.values, keys, partitions, headers)

    def topic_names(self) -> Iterable[str]:
        """The batch's distinct topics: one pass in C, small beside producing the batch."""
        return (self.topics,) if isinstance(self.topics, str) else set(self.topics)

    def largest(self) -> SizedRecord | None:
        """(size, topic, partition or None) of the batch's largest record; a Python pass over the
        batch, for explaining a failure only."""
        sized = ((record_size(value, key, headers), topic, None if partition == ANY_PARTITION else partition)
                 for topic, value, key, partition, headers in self.rows())
        return max(sized, key=lambda record: record[0], default=None)


def record_size(value, key, headers) -> int:
    """Bytes of a record's value, key and headers, as Kafka's size limits count them (they add
    some framing to that)."""
    size = _byte_length(value) + _byte_length(key)
    for name, header_value in headers or ():
        size += _byte_length(name) + _byte_length(header_value)
    return size


def _byte_length(data) -> int:
    # librdkafka's client sends str as UTF-8.
    if data is None:
        return 0
    return len(data.encode("utf-8")) if isinstance(data, str) else len(data)


_BYTES_OR_STRING = (BinaryType(), StringType())


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Fail before any transaction starts if the DataFrame cannot be written; name the column."""
    fields = {field.name: field.dataType for field in schema.fields}
    if "value" not in fields:
        raise ConfigurationError(
            f"the DataFrame to write has no 'value' column (columns: {', '.join(fields) or 'none'}); "
            "select or alias one, e.g. df.selectExpr(\"CAST(x AS STRING) AS value\")"
        )
    _expect(fields, "value", lambda t: t in _BYTES_OR_STRING, "string or binary")
    _expect(fields, "key", lambda t: t in _BYTES_OR_STRING, "string or binary")
    if topic_option is None:  # with the option, the column is never read (Spark's connector ignores it too)
        _expect(fields, "topic", lambda t: t == StringType(), "string")
    _expect(fields, "partition", lambda t: t == IntegerType(), "int")
    _expect(fields, "headers", _headers_like, HEADERS_TYPE.simpleString())
    if topic_option is None and "topic" not in fields:
        raise ConfigurationError(
            "no topic to write to: set the sink's topic option, or give the DataFrame a 'topic' column"
        )


def _expect(fields: dict[str, DataType], name: str, accepts: Callable[[DataType], bool], spelled: str) -> None:
    found = fields.get(name)
    if found is not None and not accepts(found):
        raise ConfigurationError(f"column {name!r} has type {found.simpleString()}; the sink needs {spelled}")


def _headers_like(found: DataType) -> bool:
    # Compared by shape: nullability differs between DataFrames and does not matter here.
    if not isinstance(found, ArrayType) or not isinstance(found.elementType, StructType):
        return False
    element = found.elementType
    return ([f.name for f in element.fields] == ["key", "value"]
            and element["key"].dataType == StringType() and element["value"].dataType == BinaryType())


def _as_bytes(value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _headers(value) -> list[tuple[str, bytes | None]] | None:
    if not value:
        return None
    return [(h["key"], _as_bytes(h["value"])) for h in value]


def _record(row: dict, topic_option: str | None) -> KafkaRecord:
    return KafkaRecord(topic_option or row.get("topic"), row.get("partition"), _as_bytes(row.get("key")),
                       _as_bytes(row.get("value")), _headers(row.get("headers")))


def _checked_topics(topics: list | str | None) -> list | str:
    if topics is None or (not isinstance(topics, str) and not all(topics)):
        raise ConfigurationError("a row has a null 'topic' and the sink has no topic option; every record needs a topic")
    return topics


def _checked_partitions(partitions: list | None) -> list | None:
    # librdkafka reads partition -1 as "any partition": a negative value would be silently ignored.
    lowest = 0 if partitions is None else min((p for p in partitions if p is not None), default=0)
    if lowest < 0:
        raise ConfigurationError(f"a row has partition {lowest}; partitions are numbered from 0 (leave 'partition' "
                                 "null to let the producer choose one)")
    return partitions


def columns_from_arrow(batches: Iterable, topic_option: str | None) -> Iterator[RecordColumns]:
    """Record columns from pyarrow RecordBatches (the Arrow writers of PySpark 4.1+). Strings stay
    str: librdkafka's client encodes them as UTF-8, as Spark's Kafka sink does."""
    for batch in batches:
        names = set(batch.schema.names)

        def column(name: str) -> list | None:
            return batch.column(name).to_pylist() if name in names else None

        headers = column("headers")
        if headers is not None:
            headers = [_headers(value) for value in headers]
            headers = headers if any(headers) else None
        yield RecordColumns(_checked_topics(topic_option or column("topic")), _checked_partitions(column("partition")),
                            column("key"), column("value"), headers)


def columns_from_records(records: Iterable[KafkaRecord]) -> Iterator[RecordColumns]:
    """Record columns from records, in chunks."""
    records = iter(records)
    while chunk := list(islice(records, _ROWS_PER_CHUNK)):
        topics, partitions, keys, values, headers = (list(column) for column in zip(*chunk))
        yield RecordColumns(_checked_topics(topics), _checked_partitions(partitions), keys, values,
                            headers if any(headers) else None)


def columns_from_rows(rows: Iterable, topic_option: str | None) -> Iterator[RecordColumns]:
    """Record columns from Spark Rows (the Row writers of PySpark 4.0)."""
    return columns_from_records(_record(row.asDict(recursive=True), topic_option) for row in rows)
