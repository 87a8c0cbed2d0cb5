"""What a new producer's start costs: ``init_transactions`` of a transactional producer, the first
record of an idempotent one (as the claims producer was), and the first record of the claims
producer as it is (``claims_producer``, not idempotent), each made and used at once against made
and first sent one metadata request (``pyspark_eos.kafka.cluster.connected``), alternated against
the same embedded broker. A query's start makes one transactional producer and one claims
producer per writing worker and a claims producer on the driver, so this is part of every
query's first batches.

    .venv/bin/python -m benchmarks.client_start [--repeats N]

Results go to results/client-start.json.
"""
from __future__ import annotations

import argparse
import functools
import logging
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from pyspark_eos.kafka.cluster import connected
from pyspark_eos.sink.attempt_fencing import claims_producer
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from .report import save_json

log = logging.getLogger("benchmarks.client_start")


def _init_transactions_ms(bootstrap: str, topic: str, connect_first: bool) -> float:
    started = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"start-{uuid.uuid4().hex}"})
    if connect_first:
        connected(producer, bootstrap, 30)
    producer.init_transactions(30)
    return (time.perf_counter() - started) * 1000


def idempotent_claims_producer(bootstrap_servers: str, kafka_params: dict[str, str]) -> Producer:
    """The claims producer as it was before it dropped idempotence, for comparison."""
    return Producer({**kafka_params, "bootstrap.servers": bootstrap_servers, "acks": "all",
                     "enable.idempotence": True, "linger.ms": 0})


def _first_record_ms(bootstrap: str, topic: str, connect_first: bool, idempotent: bool = True) -> float:
    started = time.perf_counter()
    producer = (idempotent_claims_producer if idempotent else claims_producer)(bootstrap, {})
    if connect_first:
        connected(producer, bootstrap, 30, topic)
    delivered: list = []
    producer.produce(topic, b"x", partition=0, on_delivery=lambda error, message: delivered.append(error))
    deadline = time.monotonic() + 30
    while not delivered and time.monotonic() < deadline:
        producer.poll(0.005)
    if delivered != [None]:
        raise RuntimeError(f"the first record was not delivered: {delivered}")
    return (time.perf_counter() - started) * 1000


CASES = {"init_transactions": _init_transactions_ms, "idempotent first record": _first_record_ms,
         "claims producer's first record": functools.partial(_first_record_ms, idempotent=False)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=12)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="eos-kafka-client-start-") as work, \
            EmbeddedKafkaCluster(directory=Path(work) / "kafka") as kafka:
        bootstrap = kafka.bootstrap_servers
        topic = create_topic(bootstrap, "client-start", 1)
        for measure in CASES.values():  # the broker's one-time costs (its transaction log) left out
            measure(bootstrap, topic, True)
        for repeat in range(args.repeats):
            for case, measure in CASES.items():
                for connect_first in (False, True):
                    key = f"{case}, {'after a metadata request' if connect_first else 'at once'}"
                    results.setdefault(key, []).append(measure(bootstrap, topic, connect_first))
            log.info("repeat %d/%d done", repeat + 1, args.repeats)
    print(f"\nA new producer's start, ms (median, max of {args.repeats}, alternated, same broker):")
    summary = {}
    for key, values in results.items():
        summary[key] = {"median_ms": round(statistics.median(values), 1), "max_ms": round(max(values), 1),
                        "runs_ms": [round(v, 1) for v in values]}
        print(f"  {key:<58} {summary[key]['median_ms']:>7.1f} {summary[key]['max_ms']:>7.1f}")
    save_json("client-start", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
