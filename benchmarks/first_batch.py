"""A query's first batch, with Spark's Python workers cold and warm.

Spark stops a Python worker that has been idle for a minute (PythonWorkerFactory; not
configurable). A query started after such a pause (a scheduled Trigger.AvailableNow job, a
restart) starts new workers, on the driver and on the executors, before its first tasks run. This
runs the same eos-kafka copy after a pause longer than that, right after it, and Spark's connector,
and prints each one's first batch beside its steady batches:

    .venv/bin/python -m benchmarks.first_batch --size 1000 --records 600000 --batch 100000
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from . import contenders
from .workload import unique, write_input

log = logging.getLogger("benchmarks.first_batch")
PARTITIONS = 8
IDLE_WORKER_TIMEOUT_S = 60  # PythonWorkerFactory's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000, help="bytes per record")
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--batch", type=int, default=100_000, help="records per micro-batch (maxOffsetsPerTrigger)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    runs = (("eos-kafka, workers cold", contenders.eos_kafka_copy, IDLE_WORKER_TIMEOUT_S + 10),
            ("eos-kafka, workers warm", contenders.eos_kafka_copy, 0),
            ("spark-kafka", contenders.spark_kafka_copy, 0),
            ("eos-kafka, workers cold again", contenders.eos_kafka_copy, IDLE_WORKER_TIMEOUT_S + 10))
    with tempfile.TemporaryDirectory(prefix="eos-kafka-first-batch-") as work, \
            EmbeddedKafkaCluster(directory=Path(work) / "kafka", heap="2g") as kafka:
        ground = contenders.start_ground(kafka.bootstrap_servers, Path(work))
        contenders.warm_up(ground)
        source = create_topic(kafka.bootstrap_servers, unique("in"), PARTITIONS)
        write_input(kafka.bootstrap_servers, source, args.records, args.size, PARTITIONS)
        lines = []
        for name, copy, pause in runs:
            if pause:
                log.info("idle for %d s, so that Spark stops its Python workers", pause)
                time.sleep(pause)  # the condition measured is the pause itself, not a wait for an event
            run = copy(ground, source, PARTITIONS, args.records, args.batch)
            first = run.extra["batch_phases_ms"][0]
            lines.append(f"{name:>30} {run.records_per_second:>9,.0f} records/s   first batch {first['triggerExecution']:>5} ms "
                         f"(latestOffset {first['latestOffset']}, addBatch {first['addBatch']})   later batches p50 "
                         f"{statistics.median(run.batch_ms[1:] or run.batch_ms):>5.0f} ms   out ok: {run.records_out == args.records}")
            log.info("%s", lines[-1].strip())
        ground.spark.stop()
    print(f"\n{args.records} records of {args.size} B, batches of {args.batch}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
