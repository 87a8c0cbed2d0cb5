"""What a transactional producer's next transaction costs when it starts right after its last
commit: a one-node embedded cluster, one producer (the sink's worker producer, kept from task to
task), transactions of one record and the group's offset (sendOffsetsToTransaction), each started
a given gap after the previous commit returned; the time from begin to the record delivered
(AddPartitionsToTxn and Produce) is measured per gap, the gaps alternated round by round.

The transaction coordinator answers EndTxn once the commit is prepared and writes the markers
after; an AddPartitionsToTxn that arrives before it has completed the commit is answered
CONCURRENT_TRANSACTIONS, and librdkafka asks again after a back-off of its own.

    .venv/bin/python -m benchmarks.transaction_gap [--rounds 4] [--transactions 40] [--gaps 0,2,5,10] [--warm-up 200]

Prints the median and p90 per gap with the ratio to the largest gap's median, and appends them to
results/transaction-gap.jsonl.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


from .report import append_measurement, percentile, standalone_cluster

RESULTS = Path(__file__).resolve().parent / "results" / "transaction-gap.jsonl"
# A cold broker completes its commits slower (its JIT): --warm-up 0 measures that.
WARM_UP_TRANSACTIONS = 200
log = logging.getLogger("benchmarks")


class OneProducer:
    def __init__(self, bootstrap: str):
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.admin.create_topics([NewTopic("out", 1, 1)])["out"].result(60)
        self.group = Consumer({"bootstrap.servers": bootstrap, "group.id": "transaction-gap"})
        self.metadata = self.group.consumer_group_metadata()
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "transaction-gap"})
        self.producer.init_transactions(60)
        self.offset = 0

    def transaction(self, gap_s: float) -> float:
        """One transaction, begun ``gap_s`` after the previous commit returned: its first record's ms."""
        time.sleep(gap_s)  # the gap under measurement, not a wait for an event
        started = time.perf_counter()
        self.producer.begin_transaction()
        self.producer.produce("out", value=b"x" * 100)
        self.producer.flush(60)
        delivered = time.perf_counter()
        self.offset += 1
        self.producer.send_offsets_to_transaction([TopicPartition("out", 0, self.offset)], self.metadata, 60)
        self.producer.commit_transaction(60)
        return (delivered - started) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transaction_gap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--transactions", type=int, default=40, help="per gap and round")
    parser.add_argument("--gaps", default="0,2,5,10", help="milliseconds after the previous commit, comma-separated")
    parser.add_argument("--warm-up", type=int, default=WARM_UP_TRANSACTIONS, help="transactions before the rounds")
    args = parser.parse_args(argv)
    gaps = [float(g) for g in args.gaps.split(",")]
    times: dict[float, list[float]] = {gap: [] for gap in gaps}
    with standalone_cluster("transaction-gap") as cluster:
        one = OneProducer(cluster.bootstrap_servers)
        for _ in range(args.warm_up):
            one.transaction(0.005)
        for round_ in range(args.rounds):
            for gap in gaps if round_ % 2 == 0 else reversed(gaps):
                times[gap].extend(one.transaction(gap / 1000) for _ in range(args.transactions))
            log.info("round %d/%d done", round_ + 1, args.rounds)
    reference = statistics.median(times[max(gaps)])
    rows = []
    for gap in gaps:
        median, p90 = statistics.median(times[gap]), percentile(times[gap], 0.9)
        rows.append({"gap_ms": gap, "median_ms": round(median, 2), "p90_ms": round(p90, 2),
                     "ratio_to_largest_gap": round(median / reference, 2)})
        print(f"next transaction {gap:4.0f} ms after a commit: its first record in {median:5.1f} ms "
              f"(p90 {p90:5.1f}), {rows[-1]['ratio_to_largest_gap']:.2f}x that of {max(gaps):.0f} ms")
    append_measurement(RESULTS, rounds=args.rounds, transactions=args.transactions, warm_up=args.warm_up, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
