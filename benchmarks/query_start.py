"""What a query's start costs its driver: the eos-kafka source's ``initialOffset`` (the group join,
whose first generation is recorded on the claims topic, and the starting offsets) and its first
``latestOffset``, for new queries one after another, alternated against the same embedded broker:

- the driver's claims producer made while the group is joined (``ClaimsLog.prepare``) and
  without idempotence (``claims_producer``), as it runs;
- the same producer idempotent, as it was before, whose first append waits for a producer id;
- the idempotent producer made at its first append (``prepare`` switched off).

    .venv/bin/python -m benchmarks.query_start [--repeats N]

Results go to results/query-start.json.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from unittest import mock

from pyspark_eos.sink import attempt_fencing
from pyspark_eos.source.micro_batch_stream import KafkaMicroBatchStream
from pyspark_eos.source.options import SourceOptions
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from .client_start import idempotent_claims_producer
from .report import percentile, save_json

log = logging.getLogger("benchmarks.query_start")
# case -> (made during the join, idempotent)
CASES = {"made during the join, not idempotent": (True, False), "made during the join, idempotent": (True, True),
         "made at its first append, idempotent": (False, True)}
# Above this a start has waited for librdkafka's 500 ms producer-id retry.
SLOW_MS = 400


def _start_ms(bootstrap: str, topic: str, prepare: bool, idempotent: bool) -> float:
    options = SourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                   "kafka.group.id": f"start-{uuid.uuid4().hex}", "maxOffsetsPerTrigger": "1000"},
                                  streaming=True)
    stream = KafkaMicroBatchStream(options)
    if not prepare:
        stream.planner._claims.prepare = lambda: None
    producer = idempotent_claims_producer if idempotent else attempt_fencing.claims_producer
    started = time.perf_counter()
    try:
        with mock.patch.object(attempt_fencing, "claims_producer", producer):
            start = stream.initialOffset()
            stream.latestOffset(start, stream.getDefaultReadLimit())
        return (time.perf_counter() - started) * 1000
    finally:
        stream.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.query_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("pyspark_eos").setLevel(logging.WARNING)
    results: dict[str, list[float]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory(prefix="eos-kafka-query-start-") as work, \
            EmbeddedKafkaCluster(directory=Path(work) / "kafka") as kafka:
        bootstrap = kafka.bootstrap_servers
        topic = create_topic(bootstrap, "query-start", 8)
        _start_ms(bootstrap, topic, True, False)  # the broker's one-time costs (claims topic, transaction log) left out
        for repeat in range(args.repeats):
            for case, (prepare, idempotent) in CASES.items():
                results[case].append(_start_ms(bootstrap, topic, prepare, idempotent))
            log.info("repeat %d/%d done", repeat + 1, args.repeats)
    print(f"\nA query's start on the driver (initialOffset + first latestOffset), ms over {args.repeats} queries "
          "each, alternated, same broker:")
    print(f"  {'claims producer':<42} {'median':>7} {'p90':>7} {'max':>7}  over {SLOW_MS} ms")
    summary = {case: {"median_ms": round(statistics.median(values), 1), "p90_ms": round(percentile(values, 0.9), 1),
                      "max_ms": round(max(values), 1), "over_slow_ms": sum(v > SLOW_MS for v in values),
                      "runs_ms": [round(v, 1) for v in values]}
               for case, values in results.items()}
    for case, figures in summary.items():
        print(f"  {case:<42} {figures['median_ms']:>7.1f} {figures['p90_ms']:>7.1f} {figures['max_ms']:>7.1f}"
              f"  {figures['over_slow_ms']}/{len(results[case])}")
    save_json("query-start", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
