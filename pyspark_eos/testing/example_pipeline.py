"""The example exactly-once pipeline, end to end, on an embedded Kafka it starts itself.

    python -m pyspark_eos.testing.example_pipeline [--records N] [--partitions P] [--no-crash]

It writes an input topic in transactions (some aborted), runs eos-kafka -> upper-case the value
-> eos-kafka as a Structured Streaming query with one Python worker killed with SIGKILL between
sending its offsets and committing its transaction, then checks the output with a plain
read_committed consumer and prints a report. Exit status 0 means exactly-once held.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .embedded_kafka import EmbeddedKafkaCluster
from .fault_injection import WORKER_BEFORE_COMMIT, arm, enable
from .local_spark import executor_local_dirs, local_spark_session
from .output_check import committed_offsets, last_stable_offsets, read_committed

log = logging.getLogger("pyspark_eos.example")

INPUT, OUTPUT, GROUP = "orders", "orders-upper", "example-pipeline"
TRANSACTIONS = 20
# Task retries in local mode come from the master URL: local[threads, maxFailures].
MASTER = "local[2,3]"


@dataclass
class Report:
    records_in: int
    aborted_in: int
    records_out: int
    duplicates: int
    missing: int
    unexpected: int
    batches: int
    offsets_at_end: bool
    crashes: int
    seconds: float

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.missing or self.unexpected) and self.offsets_at_end

    def lines(self) -> list[str]:
        return [
            f"input records committed     {self.records_in}",
            f"input records aborted       {self.aborted_in} (never read)",
            f"output records              {self.records_out}",
            f"duplicates                  {self.duplicates}",
            f"missing                     {self.missing}",
            f"unexpected                  {self.unexpected}",
            f"micro-batches               {self.batches}",
            f"worker crashes injected     {self.crashes}",
            f"group offsets at input end  {'yes' if self.offsets_at_end else 'NO'}",
            f"time                        {self.seconds:.1f} s",
            f"exactly-once                {'yes' if self.exactly_once else 'NO'}",
        ]


def write_input(bootstrap: str, records: int, partitions: int) -> tuple[list[bytes], int]:
    """Write the input in transactions, every fourth one aborted; return committed values, aborted count."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "example-input-writer"})
    producer.init_transactions(60)
    per_transaction = max(1, records // TRANSACTIONS)
    committed, aborted = [], 0
    for index in range(TRANSACTIONS):
        values = [b"order-%d-%d" % (index, i) for i in range(per_transaction)]
        producer.begin_transaction()
        for number, value in enumerate(values):
            producer.produce(INPUT, key=b"%d" % number, value=value, partition=number % partitions)
        producer.flush(60)
        if index % 4 == 3:
            producer.abort_transaction(60)
            aborted += len(values)
        else:
            producer.commit_transaction(60)
            committed.extend(values)
        log.info("input: transaction %d/%d written (%s)", index + 1, TRANSACTIONS,
                 "aborted" if index % 4 == 3 else "committed")
    return committed, aborted


def run_query(spark, bootstrap: str, checkpoint: str, max_offsets: int) -> int:
    from pyspark.sql import functions as F

    source = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", INPUT).option("kafka.group.id", GROUP)
              .option("startingOffsets", "group").option("maxOffsetsPerTrigger", str(max_offsets)).load())
    upper = source.select("key", F.upper(F.col("value").cast("string")).alias("value"))
    query = (upper.writeStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", OUTPUT).option("kafka.group.id", GROUP)
             .option("kafka.transaction.timeout.ms", "10000")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    while query.isActive:
        query.awaitTermination(10)
        if query.lastProgress:
            log.info("query: batch %s done, %s input rows", query.lastProgress["batchId"],
                     query.lastProgress["numInputRows"])
    if query.exception() is not None:
        raise query.exception()
    return sum(1 for progress in query.recentProgress if progress["numInputRows"])


def verify(bootstrap: str, committed: list[bytes], aborted: int, partitions: int) -> Report:
    expected = Counter(value.upper() for value in committed)
    found = Counter(record.value for record in read_committed(bootstrap, OUTPUT, partitions=2))
    return Report(
        records_in=len(committed), aborted_in=aborted, records_out=sum(found.values()),
        duplicates=sum(count - 1 for value, count in found.items() if value in expected and count > 1),
        missing=sum(1 for value in expected if value not in found),
        unexpected=sum(count for value, count in found.items() if value not in expected),
        batches=0, crashes=0, seconds=0.0,
        offsets_at_end=committed_offsets(bootstrap, GROUP, INPUT, partitions)
        == last_stable_offsets(bootstrap, INPUT, partitions),
    )


def arm_crash(spark) -> list[Path]:
    return [arm(WORKER_BEFORE_COMMIT, directory) for directory in sorted(executor_local_dirs(spark))[:1]]


def run(records: int, partitions: int, crash: bool, work_dir: Path) -> Report:
    started = time.monotonic()
    with EmbeddedKafkaCluster(nodes=1, directory=work_dir / "kafka") as kafka:
        bootstrap = kafka.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for name, count in ((INPUT, partitions), (OUTPUT, 2)):
            admin.create_topics([NewTopic(name, count, 1)])[name].result(60)
        committed, aborted = write_input(bootstrap, records, partitions)
        if crash:
            enable()  # before Spark starts: its workers load the fault handler
        spark = local_spark_session(MASTER, app_name="eos-kafka example pipeline")
        try:
            markers = arm_crash(spark) if crash else []
            batches = run_query(spark, bootstrap, str(work_dir / "checkpoint"), max(1, records // 5))
        finally:
            spark.stop()
        report = verify(bootstrap, committed, aborted, partitions)
    report.batches = batches
    report.crashes = sum(1 for marker in markers if not marker.exists())
    report.seconds = time.monotonic() - started
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyspark_eos.testing.example_pipeline", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="input records to write (default 20000)")
    parser.add_argument("--partitions", type=int, default=4, help="input partitions (default 4)")
    parser.add_argument("--no-crash", dest="crash", action="store_false", help="do not kill a worker")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("pyspark_eos.example", "pyspark_eos.testing.embedded_kafka"):
        logging.getLogger(name).setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="eos-kafka-example-") as work_dir:
        report = run(args.records, args.partitions, args.crash, Path(work_dir))
    print("\n".join(["", "eos-kafka example pipeline: orders -> upper(value) -> orders-upper", *report.lines()]))
    return 0 if report.exactly_once else 1


if __name__ == "__main__":
    sys.exit(main())
