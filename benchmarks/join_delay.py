"""A scheduled job's start on a broker with Kafka's default initial rebalance delay
(group.initial.rebalance.delay.ms=3000) and with conf/server.properties' (0): eos-kafka's cold job
(a fresh driver process, one Trigger.AvailableNow query, a new consumer group each run, whose first
join the broker delays) on a one-node embedded cluster per setting, alternated.

    .venv/bin/python -m benchmarks.join_delay [--rounds 2] [--records 20000]

Prints the medians of the source's join (from the driver's log: from its "joining consumer group"
line to its "joined group" line), of the job's seconds from start() and of its first batch, and
appends them to results/join-delay.jsonl.
"""
from __future__ import annotations

import argparse
import logging
import re
import statistics
import sys
import tempfile
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from . import contenders
from .report import append_measurement
from .workload import unique, write_input

RESULTS = Path(__file__).resolve().parent / "results" / "join-delay.jsonl"
SETTINGS = {"kafka's default": {"group.initial.rebalance.delay.ms": 3000}, "conf/server.properties": {}}
PARTITIONS, SIZE = 4, 100
log = logging.getLogger("benchmarks")
# The driver's log lines start with their time, to the millisecond (devtools/python_logging).
_STAMPED = re.compile(r"^\S+ (\d+):(\d+):(\d+),(\d+) .*(joining consumer group|joined group)")


def join_seconds(driver_log: str) -> float:
    """From the source's "joining consumer group" line to its "joined group" line."""
    times = {}
    for line in driver_log.splitlines():
        found = _STAMPED.match(line)
        if found and found.group(5) not in times:
            hours, minutes, seconds, millis = map(int, found.groups()[:4])
            times[found.group(5)] = hours * 3600 + minutes * 60 + seconds + millis / 1000
    return round(times["joined group"] - times["joining consumer group"], 3)


def cold_run(overrides: dict, records: int) -> contenders.Run:
    """eos-kafka's cold job of ``records`` records in two batches, on a fresh one-node cluster; the
    source's join is ``extra["join_s"]``."""
    with tempfile.TemporaryDirectory(prefix="join-delay-") as directory, \
            EmbeddedKafkaCluster(directory=Path(directory) / "kafka", overrides=overrides) as kafka:
        source = create_topic(kafka.bootstrap_servers, unique("in"), PARTITIONS)
        write_input(kafka.bootstrap_servers, source, records, SIZE, PARTITIONS)
        ground = contenders.Ground(kafka.bootstrap_servers, None, Path(directory))
        driver_log = Path(directory) / "driver.log"
        run = contenders.cold_job(ground, source, PARTITIONS, records, records // 2, "eos-kafka", SIZE, driver_log)
        run.extra["join_s"] = join_seconds(driver_log.read_text())
        return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.join_delay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    runs: dict[str, list[contenders.Run]] = {setting: [] for setting in SETTINGS}
    for round_ in range(args.rounds):
        for setting, measured in runs.items():
            measured.append(cold_run(SETTINGS[setting], args.records))
            log.info("round %d/%d, %s: join %.2f s, %.1f s from start(), first batch %d ms", round_ + 1, args.rounds,
                     setting, measured[-1].extra["join_s"], measured[-1].seconds, measured[-1].batch_ms[0])
    rows = [{"setting": setting, "join_s": statistics.median(r.extra["join_s"] for r in measured),
             "seconds": round(statistics.median(r.seconds for r in measured), 2),
             "first_batch_ms": round(statistics.median(r.batch_ms[0] for r in measured))}
            for setting, measured in runs.items()]
    for row in rows:
        print(f"{row['setting']:<24} join {row['join_s']:5.2f} s, {row['seconds']:6.2f} s from start(), first batch "
              f"{row['first_batch_ms']:,} ms (medians of {args.rounds})")
    append_measurement(RESULTS, rounds=args.rounds, records=args.records, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
