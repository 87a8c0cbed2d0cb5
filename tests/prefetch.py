"""What several tests fetch from outside the checkout, fetched once, up front, beside the first
tests: ``make test`` starts this in the background and pytest at once. Spark's Kafka connector
jars (every Spark session of the suite), the oldest supported Kafka broker's jars, and the virtual environments of the older PySpark (a
download of its own) and of the runtime with and without confluent-kafka (the slow tests at the
end), and the class archives every later Spark and Kafka JVM of the suite starts faster with. Each entry is filled under its cache lock, so a test that needs one before it is ready waits
for it instead of fetching it again; where the suite ran before, everything is there and this ends
at once. ``python -m tests.prefetch`` logs what it fetched and how long each took.
"""
from __future__ import annotations

import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from pyspark_eos.testing.maven_jars import OLDEST_KAFKA, SPARK_KAFKA_CONNECTOR, kafka_broker

from . import class_archives
from .virtualenvs import SUITE_OLDER_PYSPARK, no_kafka_client_python, older_pyspark_python, runtime_python

log = logging.getLogger("prefetch")

FETCHES = {
    "Spark's Kafka connector jars": SPARK_KAFKA_CONNECTOR.ensure,
    f"Kafka {OLDEST_KAFKA}'s broker jars": kafka_broker(OLDEST_KAFKA).ensure,
    f"PySpark {SUITE_OLDER_PYSPARK}'s virtual environment": lambda: older_pyspark_python(SUITE_OLDER_PYSPARK),
    "the runtime's virtual environment": runtime_python,
    "the virtual environment without confluent-kafka": no_kafka_client_python,
    "the class archives of the suite's JVMs": class_archives.record,
}


def _fetch(what: str) -> bool:
    started = time.monotonic()
    try:
        FETCHES[what]()
    except Exception as error:  # the test that needs it fetches it again, and fails with the cause
        log.warning("%s: failed after %.0f s (%s); the tests that need it will try again", what,
                    time.monotonic() - started, error)
        return False
    log.info("%s: ready in %.0f s", what, time.monotonic() - started)
    return True


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="prefetch: %(message)s", stream=sys.stderr)
    with ThreadPoolExecutor(max_workers=len(FETCHES)) as pool:
        done = list(pool.map(_fetch, FETCHES))
    return 0 if all(done) else 1


if __name__ == "__main__":
    sys.exit(main())
