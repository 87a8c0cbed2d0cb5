"""What the test suite's class archives (pyspark_eos.testing.jvm_options, tests/class_archives.py)
take off its JVMs' starts: a Spark session started and stopped in a fresh driver process (one
count), and a one-node embedded broker started, given a topic and stopped, each with and without
the archives, alternated, in the suite's JVM options. CPU is every process's on the machine
(/proc/stat), so run it on an otherwise idle machine.

    .venv/bin/python -m benchmarks.suite_jvm_starts [--rounds 3]

Prints the medians and the ratios, and appends them to results/suite-jvm-starts.jsonl.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pyspark_eos.testing.jvm_options import CLASS_ARCHIVES_ENV
from tests import class_archives

from .report import append_measurement
from .workload import cpu_times

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "suite-jvm-starts.jsonl"
STARTS = {
    "spark session": "from pyspark_eos.testing.local_spark import local_spark_session\n"
                     "spark = local_spark_session('local[2]')\nspark.range(10).count()\n"
                     "print(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())\nspark.stop()\n",
    "kafka broker": "import tempfile\n"
                    "from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic\n"
                    "with EmbeddedKafkaCluster(directory=tempfile.mkdtemp()) as cluster:\n"
                    "    create_topic(cluster.bootstrap_servers, 't', partitions=2)\n",
}
PRELUDE = "from tests.class_archives import use_suite_jvms\nuse_suite_jvms()\n"
log = logging.getLogger("benchmarks")


def busy_seconds() -> float:
    return cpu_times()[0] / os.sysconf("SC_CLK_TCK")


def timed(code: str, archives: bool) -> tuple[float, float]:
    env = dict(os.environ)
    if not archives:
        env[CLASS_ARCHIVES_ENV] = str(ROOT / ".cache" / "no-class-archives")
    cpu, wall = busy_seconds(), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PRELUDE + code], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True, timeout=600)
    if done.stdout.strip():  # the Spark start printed its driver's JVM
        class_archives.wait_for_driver_jvm(int(done.stdout.split()[-1]))
    return busy_seconds() - cpu, time.perf_counter() - wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite_jvm_starts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    log.info("class archives: %s", class_archives.record())
    runs: dict[tuple[str, bool], list[tuple[float, float]]] = {(s, a): [] for s in STARTS for a in (False, True)}
    for round_ in range(args.rounds):
        for (start, archives), measured in runs.items():
            measured.append(timed(STARTS[start], archives))
            log.info("round %d/%d: %s %s archives: %.1f s CPU, %.1f s", round_ + 1, args.rounds, start,
                     "with" if archives else "without", *measured[-1])
    rows = []
    for start in STARTS:
        without, with_ = ([statistics.median(m[i] for m in runs[(start, a)]) for i in (0, 1)] for a in (False, True))
        rows.append({"start": start, "cpu_s_without": round(without[0], 2), "cpu_s_with": round(with_[0], 2),
                     "wall_s_without": round(without[1], 2), "wall_s_with": round(with_[1], 2),
                     "cpu_ratio": round(with_[0] / without[0], 2), "wall_ratio": round(with_[1] / without[1], 2)})
        print(f"{start:<14} CPU {without[0]:5.1f} s -> {with_[0]:5.1f} s ({rows[-1]['cpu_ratio']:.2f}x), "
              f"wall {without[1]:5.1f} s -> {with_[1]:5.1f} s ({rows[-1]['wall_ratio']:.2f}x); medians of {args.rounds}")
    append_measurement(RESULTS, rounds=args.rounds, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
