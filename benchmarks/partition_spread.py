"""What a write task's records cost as they spread over the output's partitions: one producer of
the Python client (librdkafka) on a one-node embedded cluster, tasks of 62 records of 100 B (a
task's share of a 256-partition micro-batch of 16k records) spread over 1 to 64 partitions of the
output, each task as eos-kafka's write task sends it (a transaction: its records, the group's
offset, the commit) and as an idempotent producer without a transaction sends it (its records,
flushed), the kinds and spreads alternated task by task.

librdkafka puts one partition's records in a ProduceRequest (Kafka's Java producer puts every
partition a broker leads in one), and an idempotent producer keeps at most 5 requests in flight to
a broker: a task's records over N partitions of one broker take about N/5 round trips, with a
transaction or without one.

    .venv/bin/python -m benchmarks.partition_spread [--tasks 100] [--spreads 1,8,64]

Prints the median and p90 per spread and kind, with the ratio to one partition, and appends them
to results/partition-spread.jsonl.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


from .report import append_measurement, percentile, standalone_cluster

RESULTS = Path(__file__).resolve().parent / "results" / "partition-spread.jsonl"
RECORDS, VALUE = 62, b"x" * 100
KINDS = ("transaction", "no transaction")
OUTPUT_PARTITIONS = 256  # a task's first partition moves on from task to task
# Between two tasks of a producer: a slot's next task starts after Spark schedules it, and one
# begun right after a commit can be answered CONCURRENT_TRANSACTIONS (benchmarks/transaction_gap).
GAP_S = 0.02
WARM_UP_TASKS = 50
log = logging.getLogger("benchmarks")


class TwoProducers:
    """A transactional and an idempotent producer, and an output of ``partitions`` partitions."""

    def __init__(self, bootstrap: str, partitions: int):
        name = f"partition-spread-{uuid.uuid4().hex[:8]}"
        self.output, self.input, self.partitions = f"{name}-out", f"{name}-in", partitions
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(self.output, partitions, 1), NewTopic(self.input, 1, 1)]).values():
            future.result(60)
        self.metadata = Consumer({"bootstrap.servers": bootstrap, "group.id": name}).consumer_group_metadata()
        self.transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": name})
        self.transactional.init_transactions(60)
        self.idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        self.tasks = 0

    def task(self, kind: str, spread: int) -> tuple[float, float]:
        """One task's records over ``spread`` partitions: its milliseconds from its beginning to its
        records delivered, and to its commit (or its flush)."""
        time.sleep(GAP_S)  # the gap between a slot's tasks, not a wait for an event
        self.tasks += 1
        first = (self.tasks * spread) % self.partitions
        started = time.perf_counter()
        producer = self.transactional if kind == "transaction" else self.idempotent
        if kind == "transaction":
            producer.begin_transaction()
        for index in range(RECORDS):
            producer.produce(self.output, value=VALUE, partition=(first + index % spread) % self.partitions)
        producer.flush(60)
        delivered = time.perf_counter()
        if kind == "transaction":
            producer.send_offsets_to_transaction([TopicPartition(self.input, 0, self.tasks)], self.metadata, 60)
            producer.commit_transaction(60)
        return (delivered - started) * 1000, (time.perf_counter() - started) * 1000


def measure(bootstrap: str, spreads: list[int], tasks: int, warm_up: int = WARM_UP_TASKS
            ) -> dict[tuple[int, str], list[tuple[float, float]]]:
    producers = TwoProducers(bootstrap, OUTPUT_PARTITIONS)
    cases = [(spread, kind) for spread in spreads for kind in KINDS]
    for index in range(warm_up):
        producers.task(*reversed(cases[index % len(cases)]))
    times: dict[tuple[int, str], list[tuple[float, float]]] = {case: [] for case in cases}
    for round_ in range(tasks):
        for spread, kind in cases if round_ % 2 == 0 else reversed(cases):
            times[(spread, kind)].append(producers.task(kind, spread))
        if (round_ + 1) % 20 == 0:
            log.info("%d/%d rounds", round_ + 1, tasks)
    return times


def rows_of(times: dict[tuple[int, str], list[tuple[float, float]]]) -> list[dict]:
    rows = []
    for spread, kind in times:
        totals = [total for _, total in times[(spread, kind)]]
        one = statistics.median(total for _, total in times[(min(s for s, _ in times), kind)])
        rows.append({"partitions": spread, "kind": kind, "median_ms": round(statistics.median(totals), 2),
                     "p90_ms": round(percentile(totals, 0.9), 2),
                     "records_median_ms": round(statistics.median(records for records, _ in times[(spread, kind)]), 2),
                     "ratio_to_one_partition": round(statistics.median(totals) / one, 2)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.partition_spread", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100, help="per spread and kind")
    parser.add_argument("--spreads", default="1,8,64", help="output partitions a task's records go to, comma-separated")
    args = parser.parse_args(argv)
    spreads = [int(spread) for spread in args.spreads.split(",")]
    with standalone_cluster("partition-spread") as cluster:
        times = measure(cluster.bootstrap_servers, spreads, args.tasks)
    rows = rows_of(times)
    for row in rows:
        print(f"{RECORDS} records over {row['partitions']:3d} partitions, {row['kind']:<14}: {row['median_ms']:6.1f} ms "
              f"(p90 {row['p90_ms']:6.1f}; records delivered {row['records_median_ms']:5.1f}), "
              f"{row['ratio_to_one_partition']:.2f}x one partition's")
    append_measurement(RESULTS, tasks=args.tasks, records=RECORDS, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
