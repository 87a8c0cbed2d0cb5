"""The ``eos-kafka`` data source as Spark sees it: its name and its schema.

Spark (4.0+) finds it without a ``spark.dataSource.register`` call because the top-level package
is named ``pyspark_*`` and exposes ``DefaultSource``.
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .kafka_schema import kafka_schema
from .options import parse_bool

FORMAT_NAME = "eos-kafka"


class EosKafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return kafka_schema(include_headers=parse_bool(self.options, "includeHeaders", default=False))
