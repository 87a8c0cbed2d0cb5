"""Source alone: eos-kafka against Spark's own Kafka source, read_committed, into Spark's noop sink.

    .venv/bin/python benchmarks/source_read.py [--records N] [--partitions P] [--repeats R]

Starts an embedded Kafka, writes N records of 100 bytes in committed transactions, then reads the
whole topic with each source in turn (batch read, same SparkSession, same machine) R times and
prints the median time, records per second and the ratio. Results are appended to
benchmarks/results/source_read.jsonl so a change's effect shows against earlier runs.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pyspark_eos.embedded_kafka import EmbeddedKafkaCluster
from pyspark_eos.local_spark import jars_not_in_spark, local_spark_session
from pyspark_eos.maven_jars import SPARK_KAFKA_CONNECTOR, kafka_version

log = logging.getLogger("benchmarks.source_read")
RESULTS = Path(__file__).resolve().parent / "results" / "source_read.jsonl"
TOPIC = "bench-input"


def write_input(bootstrap: str, records: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-writer", "linger.ms": 20})
    producer.init_transactions(60)
    value = b"x" * 100
    per_transaction = 50_000
    for start in range(0, records, per_transaction):
        producer.begin_transaction()
        for i in range(start, min(records, start + per_transaction)):
            while True:
                try:
                    producer.produce(TOPIC, value=value, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.commit_transaction(120)
        log.info("input: %d/%d records written", min(records, start + per_transaction), records)


def time_read(spark, fmt: str, bootstrap: str, extra: dict[str, str]) -> float:
    reader = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC)
              .option("startingOffsets", "earliest"))
    for key, value in extra.items():
        reader = reader.option(key, value)
    started = time.perf_counter()
    reader.load().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="eos-kafka source vs Spark's Kafka source")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    contenders = {"eos-kafka": ("eos-kafka", {}),
                  "spark-kafka": ("kafka", {"kafka.isolation.level": "read_committed"})}
    with tempfile.TemporaryDirectory() as work, EmbeddedKafkaCluster(directory=Path(work) / "kafka") as kafka:
        write_input(kafka.bootstrap_servers, args.records, args.partitions)
        jars = ",".join(str(j) for j in jars_not_in_spark(SPARK_KAFKA_CONNECTOR.jars()))
        spark = local_spark_session("local[2]", app_name="eos-kafka benchmark", conf={"spark.jars": jars})
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for repeat in range(args.repeats):
            for name, (fmt, extra) in contenders.items():
                times[name].append(time_read(spark, fmt, kafka.bootstrap_servers, extra))
                log.info("repeat %d/%d: %s %.2f s", repeat + 1, args.repeats, name, times[name][-1])
        spark.stop()
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"\n{'source':<14}{'median s':>10}{'records/s':>14}")
    for name, median in medians.items():
        print(f"{name:<14}{median:>10.2f}{args.records / median:>14,.0f}")
    ratio = medians["spark-kafka"] / medians["eos-kafka"]
    print(f"eos-kafka throughput relative to Spark's Kafka source: {ratio:.2f}x")
    RESULTS.parent.mkdir(exist_ok=True)
    with RESULTS.open("a") as results:
        results.write(json.dumps({
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"), "records": args.records, "partitions": args.partitions,
            "repeats": args.repeats, "seconds": times, "ratio_eos_vs_spark": ratio,
            "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
            "versions": {"kafka": kafka_version(), "pyspark": __import__("pyspark").__version__,
                         "connector": SPARK_KAFKA_CONNECTOR.version(),
                         "confluent_kafka": importlib.metadata.version("confluent-kafka")},
        }) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
