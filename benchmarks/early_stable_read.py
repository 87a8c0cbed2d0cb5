"""What a write task's stable read costs after its claim, sent after the claims read or beside it
(sink/attempt_fencing ``enforce_reading_beside``, the model's EARLY_STABLE_READ): a one-node
embedded cluster reached through a TCP proxy that delays each direction by a given latency, one
pipeline's claims in layout 2, each task the first attempt of its plan (its claim, its control-log
read and the group's offsets read stably), the two orders alternated task by task, every latency
in one run. The time is from the claim acknowledged to the offsets known.

The claims read (ListOffsets, Fetch) and the stable read (DescribeGroups, OffsetFetch) are two
round trips each: beside each other they cost about the longer of the two, which loopback's round
trip of a few microseconds hides and a network's does not.

    .venv/bin/python -m benchmarks.early_stable_read [--tasks 200] [--latencies 0,0.5,2]

Prints the median and p90 per latency and order, with the ratio of beside to after, and appends
them to results/early-stable-read.jsonl.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import uuid
from functools import partial
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from pyspark_eos.kafka.group_offsets import STABLE_READ_REQUEST_TIMEOUT_S, fetch_committed_once, fetch_stable_commits
from pyspark_eos.protocol.claims_log import ClaimsClients, ClaimsLog
from pyspark_eos.sink.attempt_fencing import claim_attempt

from .report import append_measurement, percentile, standalone_cluster

RESULTS = Path(__file__).resolve().parent / "results" / "early-stable-read.jsonl"
PARTITIONS = 8
ORDERS = ("after", "beside")
WARM_UP_TASKS = 40
log = logging.getLogger("benchmarks")


class FirstAttempts:
    """One pipeline's claims (layout 2) and the clients a write task's steps use."""

    def __init__(self, bootstrap: str):
        self.group = f"early-stable-read-{uuid.uuid4().hex[:8]}"
        self.input = f"{self.group}-in"
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.admin.create_topics([NewTopic(self.input, PARTITIONS, 1)])[self.input].result(60)
        self.claims = ClaimsLog(bootstrap, {}, "claims", self.group)
        self.clients = ClaimsClients(bootstrap, {}, self.group, 60_000)
        self.tasks = 0

    def task(self, order: str) -> float:
        """A first attempt's claim, then its fence decision and the group's offsets in ``order``:
        the milliseconds from the claim acknowledged to the offsets known."""
        self.tasks += 1
        group, task_input = self.group, [(self.input, self.tasks % PARTITIONS)]
        claim = claim_attempt(self.clients, [self.claims.open_plan(group)], group, task_input, self.tasks,
                              f"task {self.tasks}", f"{group}.{self.tasks % 4}", first_of_plan=True)
        started = time.perf_counter()
        if order == "after":
            claim.enforce()
            fetch_stable_commits(self.admin, group, task_input, 30_000)
        elif claim.enforce_reading_beside(
                partial(fetch_committed_once, self.admin, group, task_input, STABLE_READ_REQUEST_TIMEOUT_S)) is None:
            fetch_stable_commits(self.admin, group, task_input, 30_000)  # as the task does when it may not decide
        ended = time.perf_counter()
        claim.release()
        return (ended - started) * 1000


def measure(bootstrap: str, proxies: list, latencies: list[float], tasks: int, warm_up: int = WARM_UP_TASKS
            ) -> dict[tuple[float, str], list[float]]:
    attempts = FirstAttempts(bootstrap)
    for index in range(warm_up):
        attempts.task(ORDERS[index % 2])
    times: dict[tuple[float, str], list[float]] = {}
    for latency in latencies:
        for proxy in proxies:
            proxy.latency(latency, latency)
        for index in range(tasks * 2):
            order = ORDERS[index % 2]
            times.setdefault((latency, order), []).append(attempts.task(order))
        log.info("latency %.1f ms each way: %d tasks", latency, tasks * 2)
    return times


def rows_of(times: dict[tuple[float, str], list[float]]) -> list[dict]:
    rows = []
    for latency in sorted({latency for latency, _ in times}):
        row: dict = {"latency_ms": latency}
        for order in ORDERS:
            values = times[(latency, order)]
            row[order] = {"median_ms": round(statistics.median(values), 2), "p90_ms": round(percentile(values, 0.9), 2)}
        row["beside_to_after"] = round(row["beside"]["median_ms"] / row["after"]["median_ms"], 2)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.early_stable_read", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200, help="per order and latency")
    parser.add_argument("--latencies", default="0,0.5,2", help="milliseconds each way, comma-separated")
    args = parser.parse_args(argv)
    latencies = [float(latency) for latency in args.latencies.split(",")]
    with standalone_cluster("early-stable-read", proxied=True) as cluster:
        times = measure(cluster.proxied_bootstrap_servers, list(cluster.proxies.values()), latencies, args.tasks)
    rows = rows_of(times)
    for row in rows:
        print(f"{row['latency_ms']:4.1f} ms each way: claim to offsets known, read after the claims read "
              f"{row['after']['median_ms']:6.2f} ms (p90 {row['after']['p90_ms']:6.2f}), beside it "
              f"{row['beside']['median_ms']:6.2f} ms (p90 {row['beside']['p90_ms']:6.2f}): "
              f"{row['beside_to_after']:.2f}x")
    append_measurement(RESULTS, tasks=args.tasks, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
