"""eos-kafka: an exactly-once Kafka source and sink for PySpark Structured Streaming.

``spark.readStream.format("eos-kafka")`` and ``df.writeStream.format("eos-kafka")`` resolve to
:class:`DefaultSource` through Spark's discovery of ``pyspark_*`` packages.
"""
from .errors import ConfigurationError, EmbeddedKafkaError, EosKafkaError, MissingDependencyError
from .version import __version__

# The data source imports PySpark; loaded on first use, so that ``python -m pyspark_eos.daemon``
# (started for every kind of Spark Python process) and the operator tools start without it.
_LAZY = {"DefaultSource": ("data_source", "EosKafkaDataSource"), "EosKafkaDataSource": ("data_source", "EosKafkaDataSource"),
         "FORMAT_NAME": ("data_source", "FORMAT_NAME"), "register": ("registration", "register")}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    globals()[name] = value
    return value


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
