"""The sink's checks on the driver before a query's first batch (its output topic, a probe of its
transactions, its claims topic's operations), run at once as the sink runs them and one after
another, each in a fresh Python process (the checks are made once per process and
configuration), with a new output topic each time, alternated, on a one-node embedded cluster.

    .venv/bin/python -m benchmarks.driver_checks [--rounds 5]

Prints the medians of the time to build the sink's streaming writer (the checks and little else)
and their ratio, and appends them to results/driver-checks.jsonl.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from . import contenders
from .report import append_measurement
from .workload import unique

RESULTS = Path(__file__).resolve().parent / "results" / "driver-checks.jsonl"
WAYS = ("at once", "one after another")
log = logging.getLogger("benchmarks")
# One process's writer, timed; "one after another" runs the sink's checks through a sequential
# stand-in for kafka.at_once.all_at_once.
CHILD = """
import sys, time
from pyspark.sql.types import BinaryType, StructField, StructType
from pyspark_eos import data_source
from pyspark_eos.kafka import at_once
from pyspark_eos.sink import driver_checks
if sys.argv[3] == "one after another":
    at_once.all_at_once = driver_checks.all_at_once = lambda calls: [call() for call in calls]
options = {"kafka.bootstrap.servers": sys.argv[1], "topic": sys.argv[2], "kafka.group.id": "checks-" + sys.argv[2]}
started = time.perf_counter()
data_source.EosKafkaDataSource(options).streamWriter(StructType([StructField("value", BinaryType())]), False)
print(time.perf_counter() - started)
"""


def checks_seconds(bootstrap: str, way: str) -> float:
    topic = create_topic(bootstrap, unique("checks-out"), 2)
    done = subprocess.run([sys.executable, "-c", CHILD, bootstrap, topic, way], capture_output=True, text=True,
                          timeout=300, cwd=contenders.BENCHMARKS_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the checks ({way}) failed: {done.stderr[-3000:]}")
    return float(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.driver_checks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="driver-checks-") as work, \
            EmbeddedKafkaCluster(directory=Path(work) / "kafka") as kafka:
        for way in WAYS:  # unmeasured: the cluster's first transactional producer makes __transaction_state
            checks_seconds(kafka.bootstrap_servers, way)
        for round_ in range(args.rounds):
            for way, measured in seconds.items():
                measured.append(checks_seconds(kafka.bootstrap_servers, way))
                log.info("round %d/%d, %s: %.3f s", round_ + 1, args.rounds, way, measured[-1])
    medians = {way: round(statistics.median(measured), 3) for way, measured in seconds.items()}
    ratio = round(medians["at once"] / medians["one after another"], 2)
    print(f"the sink's driver checks, medians of {args.rounds}: at once {medians['at once']:.3f} s, one after "
          f"another {medians['one after another']:.3f} s ({ratio:.2f}x)")
    append_measurement(RESULTS, rounds=args.rounds, medians=medians, ratio=ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
