"""Registering eos-kafka with a session that got the package from ``--py-files`` or ``--packages``.

Spark discovers ``pyspark_*`` data sources by scanning the Python path of a helper process that
the driver's JVM starts before the job's code runs; archives shipped with ``--py-files`` or
``--packages`` are not on that path, so the format has to be registered explicitly.

A second gap, in Spark itself (4.0 to 4.3): the driver-side process that runs a Python
*streaming* source or sink is told to find the shipped archives in a ``streaming_job``
subdirectory of the driver's SparkFiles root, where ``addFile`` never puts anything; unpickling
the source there then fails with ``No module named 'pyspark_eos'``. Linking the archives into
that directory makes them importable for it.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

from .data_source import EosKafkaDataSource

log = logging.getLogger(__name__)

# The directory name Spark's PythonStreamingSourceRunner and streaming sink runner pass as root.
_STREAMING_RUNNER_FILES = "streaming_job"


def register(spark) -> None:
    """Make ``format("eos-kafka")`` resolve in ``spark``, for batch and streaming queries."""
    spark.dataSource.register(EosKafkaDataSource)
    try:
        context = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext, and no such gap
        return
    _link_archives_for_streaming_runners(context)


def _link_archives_for_streaming_runners(context) -> None:
    from pyspark import SparkFiles

    root = Path(SparkFiles.getRootDirectory())
    target = root / _STREAMING_RUNNER_FILES
    for name in getattr(context, "_python_includes", None) or []:
        shipped = root / name
        if not shipped.is_file():
            continue
        target.mkdir(exist_ok=True)
        link = target / name
        if not link.exists():
            os.symlink(shipped, link)
            log.info("linked %s for Spark's driver-side streaming runners", shipped)
