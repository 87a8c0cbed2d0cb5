"""The example exactly-once pipeline, end to end, on an embedded Kafka it starts itself.

    python -m examples.exactly_once_pipeline [--records N] [--partitions P] [--no-crash] [--log-file F]

It writes an input topic in transactions (some aborted), runs eos-kafka -> upper-case the value
-> eos-kafka as a Structured Streaming query with one Python worker killed with SIGKILL between
sending its offsets and committing its transaction, then checks the output with a plain
read_committed consumer and prints a report. Exit status 0 means exactly-once held.

The terminal gets the story: where Kafka runs, the input, one line per micro-batch, the crash,
the report. Everything else (Spark's and the workers' logs, librdkafka, the broker's log) goes to
the log file named at the start and at the end.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster
from pyspark_eos.testing.fault_injection import WORKER_BEFORE_COMMIT, arm, enable
from pyspark_eos.testing.local_spark import executor_local_dirs, local_spark_session
from pyspark_eos.testing.maven_jars import kafka_version
from pyspark_eos.testing.output_check import committed_offsets, last_stable_offsets, read_committed

log = logging.getLogger("pyspark_eos.example")
Say = Callable[[str], None]

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


def run_query(spark, bootstrap: str, checkpoint: str, max_offsets: int, say: Say, crash: Path | None) -> int:
    from pyspark.sql import functions as F

    source = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", INPUT).option("kafka.group.id", GROUP)
              .option("startingOffsets", "group").option("maxOffsetsPerTrigger", str(max_offsets)).load())
    upper = source.select("key", F.upper(F.col("value").cast("string")).alias("value"))
    query = (upper.writeStream.format("eos-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", OUTPUT).option("kafka.group.id", GROUP)
             .option("kafka.transaction.timeout.ms", "10000")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    watch(query, say, crash)
    if query.exception() is not None:
        raise query.exception()
    return sum(1 for progress in query.recentProgress if progress["numInputRows"])


def watch(query, say: Say, crash: Path | None) -> None:
    """Tell each finished micro-batch, and the injected crash once its marker has been taken.

    The marker is looked at before progress is read, so the crash belongs to the first batch told
    after it was noticed: the killed worker's batch cannot finish before its task is retried, and
    no other batch can start, run and finish between the crash and the next half-second poll.
    """
    told, retried = -1, False
    while True:
        active = query.isActive  # before reading progress: a finished query has posted its last batch
        if crash is not None and not crash.exists():
            say("crash: a Python worker was killed with SIGKILL after adding its offsets to its transaction, "
                "before committing it; Spark retries the task")
            crash, retried = None, True
        for progress in [p for p in query.recentProgress if p["batchId"] > told]:
            log.info("batch %s progress: %s", progress["batchId"], progress.json)
            say(batch_line(progress, retried))
            told, retried = progress["batchId"], False
        if not active:
            return
        query.awaitTermination(0.5)


def batch_line(progress, retried: bool) -> str:
    # Spark records a batch's progress only after its writer committed, i.e. after every write
    # task committed its Kafka transaction (a failed task was retried until it did).
    outcome = "committed, the killed worker's task retried" if retried else "committed"
    seconds = progress["durationMs"]["triggerExecution"] / 1000
    return (f"batch {progress['batchId']}: {progress['numInputRows']} records, "
            f"backlog {offsets_behind_latest(progress)} offsets, {outcome} ({seconds:.1f} s)")


def offsets_behind_latest(progress) -> int:
    """latestOffset minus endOffset over all partitions: what the source still has to read."""
    source = progress["sources"][0]
    latest, end = json.loads(source["latestOffset"]), json.loads(source["endOffset"])
    return sum(offset - end[topic][partition]
               for topic, offsets in latest.items() for partition, offset in offsets.items())


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


def run(records: int, partitions: int, crash: bool, work_dir: Path, say: Say, log_path: Path) -> Report:
    started = time.monotonic()
    kafka = EmbeddedKafkaCluster(nodes=1, directory=work_dir / "kafka")
    try:
        with kafka:
            bootstrap = kafka.bootstrap_servers
            say(f"kafka: embedded Apache Kafka {kafka_version()}, one broker at {bootstrap}")
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for name, count in ((INPUT, partitions), (OUTPUT, 2)):
                admin.create_topics([NewTopic(name, count, 1)])[name].result(60)
            say(f"topics: {INPUT} ({partitions} partitions) -> {OUTPUT} (2 partitions), consumer group {GROUP}")
            committed, aborted = write_input(bootstrap, records, partitions)
            say(f"input: {TRANSACTIONS} transactions, every fourth aborted: {len(committed)} records committed, "
                f"{aborted} aborted")
            batches, markers = run_spark(bootstrap, work_dir, max(1, records // 5), crash, say)
            report = verify(bootstrap, committed, aborted, partitions)
    finally:
        append_broker_logs(kafka, log_path)
    report.batches = batches
    report.crashes = sum(1 for marker in markers if not marker.exists())
    report.seconds = time.monotonic() - started
    return report


def run_spark(bootstrap: str, work_dir: Path, max_offsets: int, crash: bool, say: Say) -> tuple[int, list[Path]]:
    if crash:
        enable()  # before Spark starts: its workers load the fault handler
    spark = local_spark_session(MASTER, app_name="eos-kafka example pipeline")
    try:
        markers = arm_crash(spark) if crash else []
        say(f"query: Spark {MASTER}, Trigger.AvailableNow, maxOffsetsPerTrigger {max_offsets}"
            + ("; the first worker to reach its commit will be killed" if markers else ""))
        batches = run_query(spark, bootstrap, str(work_dir / "checkpoint"), max_offsets, say,
                            markers[0] if markers else None)
    finally:
        spark.stop()
    return batches, markers


def append_broker_logs(kafka: EmbeddedKafkaCluster, log_path: Path) -> None:
    """The broker logs to its node directory, which goes away with the work directory."""
    with open(log_path, "ab") as out:
        for node in kafka.nodes:
            if node.log_path.exists():
                out.write(f"\n===== Kafka node {node.node_id}: its server.log =====\n".encode())
                out.write(node.log_path.read_bytes())


@contextmanager
def story_on_terminal(log_path: Path) -> Iterator[Say]:
    """Point this process's stdout and stderr at ``log_path``; yield a function that writes a
    line to the terminal. Spark's JVM, its Python workers, their librdkafka clients and anything
    else started from here inherit the log file as their stdout and stderr."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in (1, 2)]
    terminal = os.fdopen(os.dup(1), "w", buffering=1)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd in (1, 2):
        os.dup2(log_fd, fd)
    os.close(log_fd)
    try:
        yield lambda line: print(line, file=terminal, flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original in zip((1, 2), saved):
            os.dup2(original, fd)
            os.close(original)
        terminal.close()


def new_log_file() -> Path:
    fd, path = tempfile.mkstemp(prefix="eos-kafka-example-", suffix=".log")
    os.close(fd)
    return Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.exactly_once_pipeline", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="input records to write (default 20000)")
    parser.add_argument("--partitions", type=int, default=4, help="input partitions (default 4)")
    parser.add_argument("--no-crash", dest="crash", action="store_false", help="do not kill a worker")
    parser.add_argument("--log-file", type=Path, help="where Spark's, the workers' and Kafka's output goes "
                                                      "(default: a new file in the temporary directory)")
    args = parser.parse_args(argv)
    log_path = (args.log_file or new_log_file()).resolve()
    logging.basicConfig(filename=log_path, level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pyspark_eos").setLevel(logging.INFO)
    with story_on_terminal(log_path) as say:
        say(f"eos-kafka example pipeline: {INPUT} -> upper(value) -> {OUTPUT}")
        say(f"log file: {log_path} (Spark, Python workers, librdkafka, Kafka broker)")
        try:
            with tempfile.TemporaryDirectory(prefix="eos-kafka-example-") as work_dir:
                report = run(args.records, args.partitions, args.crash, Path(work_dir), say, log_path)
        except Exception as error:
            log.exception("the example pipeline failed")
            say(f"failed: {_headline(error)} (the log file has the details)")
            report = None
        else:
            say("\n".join(["", "output checked with a plain read_committed consumer:", *report.lines()]))
        say(f"log file: {log_path}")
    return 0 if report is not None and report.exactly_once else 1


def _headline(error: Exception, limit: int = 300) -> str:
    # A failed query's message carries the whole Java cause chain on its first line.
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return line if len(line) <= limit else line[:limit] + " ..."


if __name__ == "__main__":
    sys.exit(main())
