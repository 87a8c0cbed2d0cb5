"""Keeping PySpark's per-task garbage collection cheap in reused Python workers.

A reused Python worker (``spark.python.worker.reuse``, the default) runs a full ``gc.collect()``
after every task (pyspark/daemon.py). A full collection traverses every tracked object, and most
of a worker's objects live as long as the worker: the modules of pyspark, pyarrow and
confluent-kafka, our cached producer and clients. ``gc.freeze()`` moves the objects alive at
that moment to a permanent generation the collector skips. It runs once per worker process, when
its first task starts, after the heavy imports: freezing at every task would also freeze each
task's own objects, and those that become cyclic garbage later would never be collected. Frozen
objects are still freed when their last reference goes.
"""
from __future__ import annotations

import gc
import os

_frozen_in: int | None = None  # the pid that froze: a forked child starts unfrozen


def freeze_long_lived_objects() -> None:
    global _frozen_in
    if _frozen_in != os.getpid():
        gc.freeze()
        _frozen_in = os.getpid()
