"""One copy as a scheduled job runs it: a fresh driver process with a Spark session of its own,
one ``Trigger.AvailableNow`` query, and the process ends. The ``cold`` scenario starts this module
once per run (``contenders.cold_job``), so that nothing is warm: not the JVM's code, not Spark's
Python workers, not a Kafka client.

    python -m benchmarks.cold_job --contender eos-kafka --bootstrap HOST:PORT --source TOPIC \\
        --partitions 8 --records 400000 --batch 100000 --size 1000 --work DIR

Prints one JSON line: the run as ``contenders._run_stream`` measured it (from the query's
``start()`` to its end; CPU seconds of every process of the job, by group), and the seconds the
process took to build its Spark session.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

from . import contenders

COPIES = {  # the cold scenario's contenders, in the order they alternate
    "eos-kafka": contenders.eos_kafka_copy,
    "spark-kafka": contenders.spark_kafka_copy,
    "python-stream": contenders.python_stream_copy,
    "jvm-stream": contenders.jvm_stream_copy,
}
SIZED = ("python-stream", "jvm-stream")  # copies that make their own records, of the given size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cold_job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--contender", choices=list(COPIES), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    for number in ("--partitions", "--records", "--batch", "--size"):
        parser.add_argument(number, type=int, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the job's session (over the recommended ones)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    started = time.perf_counter()
    ground = contenders.start_ground(args.bootstrap, args.work, dict(setting.split("=", 1) for setting in args.conf))
    session_s = time.perf_counter() - started
    try:
        copy = COPIES[args.contender]
        extra_args = (args.size,) if args.contender in SIZED else ()
        run = copy(ground, args.source, args.partitions, args.records, args.batch, *extra_args)
    finally:
        ground.spark.stop()
    run.extra["session_s"] = round(session_s, 3)
    print(json.dumps(asdict(run)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
