"""Keeping PySpark's per-task garbage collection cheap in reused Python workers.

A reused Python worker (``spark.python.worker.reuse``, the default) runs a full ``gc.collect()``
after every task (pyspark/daemon.py). A full collection traverses every tracked object, and most
of a worker's objects live as long as the worker: the modules of pyspark, pyarrow and
confluent-kafka, our cached producer and clients. ``gc.freeze()`` moves the objects alive at
that moment to a permanent generation the collector skips. Called when a task starts, right after
the previous task's collection, it freezes what outlives tasks and leaves each task's own
objects to the collector; frozen objects are still freed when their last reference goes.
"""
from __future__ import annotations

import gc


def freeze_long_lived_objects() -> None:
    gc.freeze()
