"""What an idle embedded broker costs the test suite, with the controller's no-op record at Kafka's
default interval (metadata.max.idle.interval.ms=500) and at conf/server.properties' (5000): a
one-node and a three-node cluster started in the suite's JVM options, left alone for a warm-up,
then the nodes' own CPU (/proc/<pid>/stat) over a window, alternated.

    .venv/bin/python -m benchmarks.broker_idle [--rounds 2] [--window 30]

Prints the medians per node and their ratios, and appends them to results/broker-idle.jsonl.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster
from tests.class_archives import use_suite_jvms

from .report import append_measurement
from .workload import stat_seconds

RESULTS = Path(__file__).resolve().parent / "results" / "broker-idle.jsonl"
SETTINGS = {"kafka's default": {"metadata.max.idle.interval.ms": 500}, "conf/server.properties": {}}
WARM_UP_S = 15.0
log = logging.getLogger("benchmarks")


def idle_share(nodes: int, overrides: dict, window_s: float) -> float:
    """The share of a core one node of an idle cluster uses, averaged over its nodes."""
    with tempfile.TemporaryDirectory(prefix="broker-idle-") as directory, \
            EmbeddedKafkaCluster(nodes=nodes, directory=directory, overrides=overrides) as cluster:
        pids = list(cluster.pids.values())
        time.sleep(WARM_UP_S)  # the window starts once the nodes' start-up work is over, not at an event
        before = sum(stat_seconds(pid)[0] for pid in pids)
        time.sleep(window_s)
        return (sum(stat_seconds(pid)[0] for pid in pids) - before) / window_s / nodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.broker_idle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window", type=float, default=30.0, help="seconds of idle CPU measured per cluster")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    use_suite_jvms()
    shares: dict[tuple[int, str], list[float]] = {(n, s): [] for n in (1, 3) for s in SETTINGS}
    for round_ in range(args.rounds):
        for (nodes, setting), measured in shares.items():
            measured.append(idle_share(nodes, SETTINGS[setting], args.window))
            log.info("round %d/%d: %d node(s), %s: %.1f%% of a core per node", round_ + 1, args.rounds, nodes,
                     setting, 100 * measured[-1])
    rows = []
    for nodes in (1, 3):
        default, ours = (statistics.median(shares[(nodes, s)]) for s in SETTINGS)
        rows.append({"nodes": nodes, "default_core_share": round(default, 4), "conf_core_share": round(ours, 4),
                     "ratio": round(ours / default, 2)})
        print(f"{nodes} node(s): {100 * default:.1f}% -> {100 * ours:.1f}% of a core per idle node "
              f"({rows[-1]['ratio']:.2f}x); medians of {args.rounds}")
    append_measurement(RESULTS, rounds=args.rounds, window_s=args.window, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
