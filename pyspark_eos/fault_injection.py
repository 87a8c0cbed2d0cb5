"""Crashes on purpose, at the points where exactly-once is hardest, for the tests and the example.

A fault is armed by creating a file named for its point in ``eos-kafka-faults/`` of an executor's
local directory (``arm``). The first process that reaches the point removes the file, which
claims the fault atomically, and is killed with SIGKILL: no cleanup runs, no transaction is
aborted, exactly like a worker lost to the OOM killer or a machine failure. An unarmed point
costs one failed ``unlink``.

Points:
- ``worker-before-commit``: a write task's Python worker, after producing its records and
  sending its offsets, before committing its transaction.
- ``executor-before-commit``: the same moment, killing the whole executor JVM (local-cluster).
- ``driver-after-kafka-commit``: the driver, after every task of a micro-batch committed its Kafka
  transaction and before Spark records the batch in its commit log.
"""
from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

from .executor_identity import executor_local_directory

log = logging.getLogger(__name__)

WORKER_BEFORE_COMMIT = "worker-before-commit"
EXECUTOR_BEFORE_COMMIT = "executor-before-commit"
DRIVER_AFTER_KAFKA_COMMIT = "driver-after-kafka-commit"
POINTS = (WORKER_BEFORE_COMMIT, EXECUTOR_BEFORE_COMMIT, DRIVER_AFTER_KAFKA_COMMIT)
_DIRECTORY = "eos-kafka-faults"


def arm(point: str, local_directory: str | os.PathLike) -> Path:
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; use one of {', '.join(POINTS)}")
    directory = Path(local_directory) / _DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / point
    marker.touch()
    return marker


def crash_if_armed(point: str) -> None:
    try:
        (executor_local_directory() / _DIRECTORY / point).unlink()
    except FileNotFoundError:
        return
    victim = _victim(point)
    log.warning("fault injection: %s, killing pid %d with SIGKILL", point, victim)
    os.kill(victim, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)  # when the victim was an ancestor, go down with it


def _victim(point: str) -> int:
    if point == WORKER_BEFORE_COMMIT:
        return os.getpid()
    # A Python worker is forked by PySpark's daemon, which the JVM (executor, or driver for the
    # driver-side writer) started: the JVM is the grandparent, or the parent without a daemon.
    parent = os.getppid()
    return _jvm_ancestor(parent)


def _jvm_ancestor(pid: int) -> int:
    while pid > 1:
        if b"java" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]:
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("fault injection: no JVM among this process's ancestors")
