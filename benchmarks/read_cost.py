"""What a read task costs: the time ``read_ranges`` takes to read a task's ranges (4 partitions;
by default 125 records of 100 B each: one task of a 1k-record batch over 8 partitions; with
``--records 100000 --size 1000`` a task of a large batch, where the cost per record shows).

    .venv/bin/python -m benchmarks.read_cost [--compare-with REV] [--records N] [--size BYTES]

With ``--compare-with`` the partition reader of that git revision (its code and its consumer settings) is timed too, alternated with
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
PARTITIONS = 4


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


def _time_reads(readers: dict, ranges: tuple, bootstrap: str, records: int, repeats: int) -> dict[str, list[tuple]]:
    # Each reader with its own revision's consumer settings: a change of settings is a change too.
    settings = {name: module.ReaderSettings(module.consumer_config(bootstrap, {}, None), False, True)
                for name, module in readers.items()}
    timings: dict[str, list[tuple]] = {name: [] for name in readers}
    for repeat in range(repeats):
        for name, module in readers.items():  # alternated, so that drift hits both alike
            started, cpu = time.perf_counter(), time.process_time()  # CPU: this process, librdkafka's threads too
            rows = sum(batch.num_rows for batch in module.read_ranges(ranges, settings[name]))
            timings[name].append(((time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000))
            if rows != records:
                raise RuntimeError(f"{name} read {rows} records, expected {records}")
        print(f"\rrepeat {repeat + 1}/{repeats}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare-with", metavar="REV", help="also time the partition reader of this git revision")
    parser.add_argument("--records", type=int, default=500, help="records of the task, over 4 partitions")
    parser.add_argument("--size", type=int, default=100, help="bytes per record")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    readers = {"current": partition_reader}
    if args.compare_with:
        revision = subprocess.run(["git", "rev-parse", "--short", args.compare_with], cwd=CHECKOUT, check=True,
                                  capture_output=True, text=True).stdout.strip()
        readers[revision] = _reader_at(revision)
    with EmbeddedKafkaCluster(nodes=1) as cluster:
        topic = create_topic(cluster.bootstrap_servers, "read-cost", partitions=PARTITIONS)
        write_input(cluster.bootstrap_servers, topic, args.records, args.size, PARTITIONS)
        ranges = tuple(OffsetRange(topic, p, 0, args.records // PARTITIONS) for p in range(PARTITIONS))
        timings = _time_reads(readers, ranges, cluster.bootstrap_servers, args.records // PARTITIONS * PARTITIONS, args.repeats)
    result = {name: {"records": args.records, "record_bytes": args.size,
                     "median_ms": statistics.median(wall for wall, _ in v),
                     "p90_ms": statistics.quantiles([wall for wall, _ in v], n=10)[-1],
                     "median_cpu_ms": statistics.median(cpu for _, cpu in v)} for name, v in timings.items()}
    for name, figures in result.items():
        print(f"{name:>12}: read {PARTITIONS} ranges of {args.records // PARTITIONS} records of {args.size} B in "
              f"{figures['median_ms']:.0f} ms (median of {args.repeats}), p90 {figures['p90_ms']:.0f} ms, "
              f"CPU {figures['median_cpu_ms']:.0f} ms")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "read-cost.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
