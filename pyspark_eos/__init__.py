"""eos-kafka: an exactly-once Kafka source and sink for PySpark Structured Streaming.

``spark.readStream.format("eos-kafka")`` and ``df.writeStream.format("eos-kafka")`` resolve to
:class:`DefaultSource` through Spark's discovery of ``pyspark_*`` packages.
"""
from .data_source import FORMAT_NAME, EosKafkaDataSource
from .errors import ConfigurationError, EmbeddedKafkaError, EosKafkaError, MissingDependencyError
from .registration import register
from .version import __version__

DefaultSource = EosKafkaDataSource

__all__ = [
    "DefaultSource",
    "EosKafkaDataSource",
    "FORMAT_NAME",
    "EosKafkaError",
    "ConfigurationError",
    "EmbeddedKafkaError",
    "MissingDependencyError",
    "register",
]
