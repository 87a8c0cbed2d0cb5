"""Asks a consumer group's coordinator, in four threads, as a write task does (through its worker's
AdminClient, ``sink.producer_pool.admin_for``, and ``kafka.group_offsets.describe_group``), until
its stdin closes; keeps its counts in a JSON file.
librdkafka bugs in such requests abort the process, which is why it runs apart from the test.

Usage: python -m tests.coordinator_requests_job BOOTSTRAP COUNTS_FILE [LIBRDKAFKA_TIMEOUT_S]
(the last argument, the control: librdkafka's own timeout of each request instead of the default)
"""
from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path

from confluent_kafka import KafkaException

from pyspark_eos.kafka import group_offsets
from pyspark_eos.kafka.held_clients import Held
from pyspark_eos.kafka.options import ClientSettings
from pyspark_eos.sink.producer_pool import admin_for

ANSWER_TIMEOUT_S = 2.0
THREADS = 4


def main(bootstrap: str, counts_file: Path, librdkafka_timeout_s: str | None = None) -> None:
    if librdkafka_timeout_s is not None:
        group_offsets._LIBRDKAFKA_COORDINATOR_TIMEOUT_S = float(librdkafka_timeout_s)
    counts: Counter[str] = Counter()
    done = threading.Event()

    def ask(group: str) -> None:
        held = Held(ClientSettings.of(bootstrap, {}, 60000))  # one per thread, as one per worker
        while not done.is_set():
            try:
                group_offsets.describe_group(admin_for(held), group, ANSWER_TIMEOUT_S)
                counts["answered"] += 1
            except KafkaException as error:
                counts[error.args[0].name()] += 1
                done.wait(0.05)  # a refused connection fails at once
        held.close()  # while the interpreter lives: a client destroyed at its shutdown crashed it (SIGSEGV)

    threads = [threading.Thread(target=ask, args=(f"asked-{i}",), daemon=True) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    writer = threading.Thread(target=_keep_writing, args=(counts, counts_file, done), daemon=True)
    writer.start()
    sys.stdin.read()
    done.set()
    for thread in (*threads, writer):
        thread.join()


def _keep_writing(counts: Counter, counts_file: Path, done: threading.Event) -> None:
    while True:
        partial = counts_file.with_suffix(".partial")
        partial.write_text(json.dumps(dict(counts)))
        os.replace(partial, counts_file)
        if done.wait(0.2):
            return


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:])
