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
