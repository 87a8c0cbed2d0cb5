"""What a read task of a small micro-batch costs: the time ``read_ranges`` takes to read a task's
ranges (4 partitions, 125 records each: one task of a 1k-record batch over 8 partitions).

    .venv/bin/python -m benchmarks.read_cost [--compare-with REV]

With ``--compare-with`` the partition reader of that git revision is timed too, alternated with
the current one in the same run, against the same embedded broker; results go to
results/read-cost.json.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyspark_eos.source import partition_reader
from pyspark_eos.source.offset_planning import OffsetRange
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from .workload import write_input

RESULTS = Path(__file__).resolve().parent / "results"
CHECKOUT = Path(__file__).resolve().parent.parent
PARTITIONS, RECORDS, REPEATS = 4, 500, 30


def _reader_at(revision: str):
    """The partition_reader module as it was at ``revision``, imported under another name."""
    source = subprocess.run(["git", "show", f"{revision}:pyspark_eos/source/partition_reader.py"], cwd=CHECKOUT,
                            check=True, capture_output=True, text=True).stdout
    source = source.replace("from ..", "from pyspark_eos.").replace("from .offset_planning",
                                                                     "from pyspark_eos.source.offset_planning")
    path = Path(tempfile.mkdtemp()) / "partition_reader_then.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("partition_reader_then", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _time_reads(readers: dict, ranges: tuple, settings) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {name: [] for name in readers}
    for repeat in range(REPEATS):
        for name, module in readers.items():  # alternated, so that drift hits both alike
            started = time.perf_counter()
            rows = sum(batch.num_rows for batch in module.read_ranges(ranges, settings))
            timings[name].append((time.perf_counter() - started) * 1000)
            if rows != RECORDS:
                raise RuntimeError(f"{name} read {rows} records, expected {RECORDS}")
        print(f"\rrepeat {repeat + 1}/{REPEATS}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare-with", metavar="REV", help="also time the partition reader of this git revision")
    args = parser.parse_args(argv)
    readers = {"current": partition_reader}
    if args.compare_with:
        revision = subprocess.run(["git", "rev-parse", "--short", args.compare_with], cwd=CHECKOUT, check=True,
                                  capture_output=True, text=True).stdout.strip()
        readers[revision] = _reader_at(revision)
    with EmbeddedKafkaCluster(nodes=1) as cluster:
        topic = create_topic(cluster.bootstrap_servers, "read-cost", partitions=PARTITIONS)
        write_input(cluster.bootstrap_servers, topic, RECORDS, 100, PARTITIONS)
        settings = partition_reader.ReaderSettings(
            partition_reader.consumer_config(cluster.bootstrap_servers, {}, None), False, True)
        ranges = tuple(OffsetRange(topic, p, 0, RECORDS // PARTITIONS) for p in range(PARTITIONS))
        timings = _time_reads(readers, ranges, settings)
    result = {name: {"median_ms": statistics.median(v), "p90_ms": statistics.quantiles(v, n=10)[-1]}
              for name, v in timings.items()}
    for name, figures in result.items():
        print(f"{name:>12}: read {PARTITIONS} ranges of {RECORDS // PARTITIONS} records in "
              f"{figures['median_ms']:.0f} ms (median of {REPEATS}), p90 {figures['p90_ms']:.0f} ms")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "read-cost.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
