"""The ``eos-kafka`` data source as Spark sees it: its name, its schema, its readers and writers.

Spark (4.0+) finds it without a ``spark.dataSource.register`` call because the top-level package
is named ``pyspark_*`` and exposes ``DefaultSource``.
"""
from __future__ import annotations

import sys

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .kafka.dependencies import require_confluent_kafka
from .errors import ConfigurationError
from .kafka.schema import kafka_schema
from .kafka.options import parse_bool
from .sink.options import SinkOptions
from .source.offset_planning import named_partitions, require_read
from .source.options import SourceOptions
from .sink.records import check_sink_schema

FORMAT_NAME = "eos-kafka"


class EosKafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        # Spark calls schema() at load(): checking the source options here makes a bad option fail
        # there, before any query starts.
        require_confluent_kafka()
        _check_named_partitions(SourceOptions.parse(self.options, streaming=None))
        return kafka_schema(include_headers=parse_bool(self.options, "includeHeaders", default=False))

    def reader(self, schema: StructType):
        from .source.batch_reader import KafkaBatchReader

        options = SourceOptions.parse(self.options, streaming=False)
        return KafkaBatchReader(options, _read_columns(schema, options))

    def streamReader(self, schema: StructType):
        from .source.micro_batch_stream import KafkaMicroBatchStream

        options = SourceOptions.parse(self.options, streaming=True)
        return KafkaMicroBatchStream(options, _read_columns(schema, options))

    def writer(self, schema: StructType, overwrite: bool):
        from .sink.writer import EosKafkaBatchWriter

        if overwrite:
            # Records in a Kafka topic cannot be replaced; Spark's own Kafka sink refuses it too.
            raise ConfigurationError('the eos-kafka sink cannot overwrite a Kafka topic, only append to it; '
                                     'use .mode("append")')

        return EosKafkaBatchWriter(_sink_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink.writer import EosKafkaStreamWriter

        return EosKafkaStreamWriter(_sink_options(self.options, schema, streaming=True))


def _sink_options(options, schema: StructType, streaming: bool = False) -> SinkOptions:
    require_confluent_kafka()
    parsed = SinkOptions.parse(options)
    check_sink_schema(schema, parsed.topic)
    if streaming and (parsed.txn_app_id is not None or parsed.txn_version is not None):
        # A micro-batch's key is its query and batch id; a version given here would be ignored.
        raise ConfigurationError("txnAppId and txnVersion are for batch writes (df.write, in foreachBatch too); "
                                 "a streaming write is exactly-once by its query's batch ids: drop them")
    if _in_sink_commit_runner():
        return parsed
    # Here, on the driver, an unreachable cluster or a missing topic fails the batch before any task
    # opens a transaction. Spark builds the writer again for every micro-batch: the lookup is made
    # once per process.
    from .kafka.at_once import all_at_once
    from .kafka.cluster import check_output
    from .sink.driver_checks import check_sink_can_commit

    timeout_s = parsed.connect_timeout_ms / 1000
    all_at_once([lambda: check_output(parsed.kafka, parsed.bootstrap_servers, parsed.topic, timeout_s,
                                      parsed.transaction_timeout_ms),
                 lambda: check_sink_can_commit(parsed, streaming, timeout_s)])
    return parsed


# The module Spark's process for a streaming sink's commit() and abort() runs (a worker of a
# daemon started with the module's name as its argument, PySpark 4.3).
SINK_COMMIT_RUNNER = "pyspark.sql.worker.python_streaming_sink_runner"


def _in_sink_commit_runner() -> bool:
    """Whether this process only commits or aborts micro-batches: it builds a writer for that,
    whose commit() and abort() reach no Kafka, right after the planner's process checked the same
    options; checking again cost each query's first commit a fresh process's Kafka clients."""
    return sys.argv[-1:] == [SINK_COMMIT_RUNNER]


def _check_named_partitions(options: SourceOptions) -> None:
    # Planning finds a JSON naming a partition the query does not read, but only once a query
    # plans (a stream's first batch): one metadata request here makes it fail at load().
    named = named_partitions(options)
    if named:
        from .source.offset_reader import KafkaOffsetReader

        partitions = KafkaOffsetReader(options).topic_partitions()
        for option, given in named.items():
            require_read(given, partitions, option)


def _read_columns(schema: StructType, options: SourceOptions) -> tuple[str, ...]:
    columns = read_columns(schema, options.include_headers)
    if columns != tuple(kafka_schema(options.include_headers).names):
        # Spark skips schema() when the query gives a schema: its check of the options runs here.
        _check_named_partitions(options)
    return columns


def read_columns(schema: StructType, include_headers: bool) -> tuple[str, ...]:
    """The Kafka columns the source yields: all of them, or those a ``.schema(...)`` names.

    A Python data source is handed no column pruning by Spark: every column it yields crosses from
    its Python worker into the JVM and on, used or not. A schema that names only some of the Kafka
    columns (``"key binary, value binary"`` for a copy) reads just those."""
    full = kafka_schema(include_headers)
    known = {field.name: field.dataType for field in full.fields}
    if schema == full:
        return tuple(full.names)
    for field in schema.fields:
        if known.get(field.name) != field.dataType:
            raise ConfigurationError(
                f"the eos-kafka source reads Spark's Kafka columns ({full.simpleString()}) or, given a .schema(...), "
                f"only the ones it names; it has no column {field.name} {field.dataType.simpleString()}: name only "
                "these columns with these types, or remove the .schema(...) call"
            )
    return tuple(schema.names)
