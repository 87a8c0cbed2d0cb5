"""Where an eos-kafka copy spends its Python time: py-spy samples every Python process of the run
(the driver, Spark's driver-side source and sink runners, the executors' workers) while one
Kafka -> Kafka copy runs, then prints the functions with the largest share of samples.

    .venv/bin/python -m benchmarks.profile_copy [--records N] [--size BYTES] [--batch N]

py-spy samples only threads that are running, not ones blocked in a read, so the shares are of
CPU time. The collapsed stacks are kept in benchmarks/results/profile-eos-copy.txt (for
flamegraph.pl or speedscope).
"""
from __future__ import annotations

import argparse
import collections
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from . import contenders
from .report import RESULTS
from .workload import unique, write_input

log = logging.getLogger("benchmarks.profile")
STACKS = RESULTS / "profile-eos-copy.txt"
_FRAME = re.compile(r"^(?P<function>.+?) \((?P<file>[^:()]+)(?::\d+)?\)$")


def shares(stacks: Path, top: int) -> list[tuple[float, str]]:
    """Inclusive share of samples per function (counted once per stack)."""
    inclusive: collections.Counter = collections.Counter()
    total = 0
    for line in stacks.read_text().splitlines():
        frames, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        for name in {_short(frame) for frame in frames.split(";") if not _is_scaffolding(frame)}:
            inclusive[name] += int(count)
    return [(100.0 * n / total, name) for name, n in inclusive.most_common(top)] if total else []


def _is_scaffolding(frame: str) -> bool:
    # py-spy's per-process root frames and the interpreter's module runner say nothing about cost.
    return frame.startswith("process ") or "<frozen runpy>" in frame


def _short(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    for marker in ("pyspark_eos/", "pyspark/", "confluent_kafka/", "pyarrow/"):
        if marker in path:
            path = path[path.index(marker):]
            break
    else:
        path = os.path.basename(path)
    return f"{match.group('function')} ({path})"


def _wait_for_stacks(timeout: float = 60.0) -> None:
    # py-spy writes the file after its per-process samplers have stopped, which can be after it exits.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (STACKS.exists() and STACKS.stat().st_size > 0):
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_copy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--idle", action="store_true",
                        help="sample waiting threads too: shares of wall-clock time instead of CPU time")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    RESULTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="eos-kafka-profile-") as work, \
            EmbeddedKafkaCluster(directory=Path(work) / "kafka") as kafka:
        ground = contenders.start_ground(kafka.bootstrap_servers, Path(work))
        source = create_topic(kafka.bootstrap_servers, unique("profile-in"), args.partitions)
        write_input(kafka.bootstrap_servers, source, args.records, args.size, args.partitions)
        contenders.warm_up(ground)
        STACKS.unlink(missing_ok=True)
        sampler = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(os.getpid()),
                                    "--subprocesses", "--format", "raw", "--rate", "50", "-o", str(STACKS),
                                    *(["--idle"] if args.idle else [])],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1)  # lets py-spy attach before the measured copy starts
        run = contenders.eos_kafka_copy(ground, source, args.partitions, args.records, args.batch)
        sampler.send_signal(signal.SIGINT)
        sampler.wait(120)
        ground.spark.stop()
    _wait_for_stacks()
    print(f"\neos-kafka copy of {args.records:,} records of {args.size} B: {run.seconds:.1f} s, "
          f"{run.records_per_second:,.0f} records/s, {len(run.batch_ms)} batches")
    kind = "wall-clock" if args.idle else "CPU"
    print(f"share of sampled {kind} time, inclusive (top {args.top}); stacks in {STACKS}:")
    for share, name in shares(STACKS, args.top):
        print(f"  {share:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
