"""Which Spark executor a Python worker belongs to.

A Python worker is not told its executor id. Spark sets ``SPARK_LOG_URL_STDERR`` (standalone and
local-cluster: ``...?appId=...&executorId=N&logType=stderr``) and ``SPARK_EXECUTOR_DIRS`` (one
directory set per executor) in every worker's environment; in local mode neither is set and the
executor is the driver. The writer's transactional ids are derived from this, so it must be the
same for every worker of one executor and differ between executors.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

DRIVER = "driver"
_EXECUTOR_ID_IN_LOG_URL = re.compile(r"[?&]executorId=([^&]+)")


def executor_id(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    match = _EXECUTOR_ID_IN_LOG_URL.search(env.get("SPARK_LOG_URL_STDERR", ""))
    if match:
        return match.group(1)
    executor_dirs = env.get("SPARK_EXECUTOR_DIRS")
    if executor_dirs:
        return "dirs-" + hashlib.sha256(executor_dirs.encode()).hexdigest()[:12]
    return DRIVER


def executor_local_directory() -> Path:
    """The executor's local directory (``SPARK_LOCAL_DIRS``, removed with the executor; the
    driver's in local mode), or the temporary directory outside Spark."""
    local_dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    return Path(local_dirs.split(",")[0]) if local_dirs else Path(tempfile.gettempdir())


# Names another directory for a host's write slots, for hosts whose executors do not share the
# temporary directory (spark.executorEnv.EOS_KAFKA_SLOTS_DIR).
SLOTS_DIRECTORY_ENV = "EOS_KAFKA_SLOTS_DIR"


def host_slots_directory() -> Path:
    """Where a host's write slots live (sink/transactional_id_factory): shared by every executor
    and application of this user on the host, which the executor's local directory is not (Spark
    makes one per executor and removes it with the executor)."""
    configured = os.environ.get(SLOTS_DIRECTORY_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / f"eos-kafka-slots-{os.getuid()}"
