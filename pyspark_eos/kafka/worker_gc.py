"""Keeping PySpark's per-task garbage collection cheap in reused Python workers.

A reused Python worker (``spark.python.worker.reuse``, the default) runs a full ``gc.collect()``
after every task (pyspark/daemon.py). A full collection traverses every tracked object, and most
of a worker's objects live as long as the worker: the modules of pyspark, pyarrow and
confluent-kafka, our cached producer and clients. ``gc.freeze()`` moves the objects alive at
that moment to a permanent generation the collector skips. It runs when a task starts, after the
heavy imports, and again only when the worker has imported modules since it last froze: PySpark
imports pandas (with numpy.random, dateutil: some 350 modules, 34k tracked objects) during a
worker's first task, after that task froze, and each later task's collection then traversed
them all again (benchmarks/JOURNAL.md). Freezing at every task would also freeze each task's own objects (at a task's start,
its command and input iterator), and those that become cyclic garbage later would never be
collected: a worker freezes a few times at most, should some library add a module per task.
Frozen objects are still freed when their last reference goes.
"""
from __future__ import annotations

import gc
import os
import sys

_MOST_FREEZES = 4
_frozen: tuple[int, int] | None = None  # (pid, modules loaded) at the last freeze; a forked child starts unfrozen
_freezes = 0  # in the process that froze last


def freeze_long_lived_objects() -> None:
    global _frozen, _freezes
    pid, modules = os.getpid(), len(sys.modules)
    if _frozen is None or _frozen[0] != pid:
        _freezes = 0
    elif _frozen[1] == modules or _freezes >= _MOST_FREEZES:
        return
    gc.freeze()
    _frozen, _freezes = (pid, modules), _freezes + 1
