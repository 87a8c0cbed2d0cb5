"""What PySpark's per-task ``gc.collect()`` costs a reused Python worker, with and without the
``gc.freeze()`` eos-kafka's read and write tasks do when they start (pyspark_eos/kafka/worker_gc.py).

    .venv/bin/python -m benchmarks.gc_cost

A fresh interpreter imports what a worker that ran an eos-kafka read and write has imported, then
times full collections before and after freezing, side by side. Then it imports pandas, as PySpark
does during a worker's first task (after that task froze), and times collections with the first
freeze only (a worker that froze once) and after freezing again (eos-kafka freezes again at a
task's start when modules were imported since its last freeze). The result goes to
results/gc-cost.json.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

PROBE = """
import gc, json, statistics, time
import pyspark.worker, pyspark.sql.datasource, pyarrow, confluent_kafka
import pyspark_eos.sink.transactional_writer, pyspark_eos.source.planner

def collections(count=30):
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        gc.collect()
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)

tracked = len(gc.get_objects())
before = collections()
gc.freeze()
after = collections()
import pandas  # what PySpark imports in a worker's first task
late = len(gc.get_objects())
frozen_once = collections()
gc.freeze()
frozen_again = collections()
print(json.dumps({"tracked_objects": tracked, "collect_ms": before, "collect_after_freeze_ms": after,
                  "tracked_after_first_task_imports": late, "collect_frozen_once_ms": frozen_once,
                  "collect_frozen_again_ms": frozen_again}))
"""


def main() -> int:
    result = json.loads(subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True,
                                       text=True).stdout)
    print(f"a worker's full gc.collect(): {result['collect_ms']:.2f} ms over {result['tracked_objects']:,} tracked "
          f"objects; after gc.freeze(): {result['collect_after_freeze_ms'] * 1000:.0f} us: "
          f"{result['collect_ms'] - result['collect_after_freeze_ms']:.1f} ms less per task and worker "
          "(a task has a reading and a writing worker)")
    print(f"after PySpark's first task imported pandas ({result['tracked_after_first_task_imports']:,} tracked objects "
          f"not frozen): {result['collect_frozen_once_ms']:.2f} ms per collection when the worker froze once, "
          f"{result['collect_frozen_again_ms'] * 1000:.0f} us after freezing again")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "gc-cost.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
