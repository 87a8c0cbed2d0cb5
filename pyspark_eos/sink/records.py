"""What the sink writes: the input columns, checked once, turned into Kafka records.

The columns are those of Spark's Kafka sink: ``value`` (required, string or binary), ``key``
(string or binary), ``topic`` (string; required unless the ``topic`` option is set, which then
wins), ``partition`` (int) and ``headers`` (array<struct<key: string, value: binary>>). Other
columns are ignored, as Spark's sink does.
"""
from __future__ import annotations

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
    topic = topic_option or row.get("topic")
    if not topic:
        raise ConfigurationError("a row has a null 'topic' and the sink has no topic option; every record needs a topic")
    return KafkaRecord(topic, row.get("partition"), _as_bytes(row.get("key")), _as_bytes(row.get("value")),
                       _headers(row.get("headers")))


def records_from_arrow(batches: Iterable, topic_option: str | None) -> Iterator[KafkaRecord]:
    """Kafka records from pyarrow RecordBatches (the Arrow writers of PySpark 4.1+)."""
    for batch in batches:
        yield from (_record(row, topic_option) for row in batch.to_pylist())


def records_from_rows(rows: Iterable, topic_option: str | None) -> Iterator[KafkaRecord]:
    """Kafka records from Spark Rows (the Row writers of PySpark 4.0)."""
    for row in rows:
        yield _record(row.asDict(recursive=True), topic_option)
