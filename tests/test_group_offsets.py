"""G5: a reader never takes a committed offset that an open transaction is about to replace."""
from __future__ import annotations

import logging
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException

from pyspark_eos.errors import PendingTransactionError
from pyspark_eos.kafka.group_offsets import fetch_stable_committed_offsets
from pyspark_eos.kafka.backoff import Backoff
from pyspark_eos.testing import fault_injection as faults
from pyspark_eos.testing.local_spark import executor_local_dirs

from .kafka_tools import create_topic, transactional_producer, unique_name, wait_until, write_transactions
from .spark_tools import BatchRecorder, run_available_now, source


class GroupTransactions:
    """A topic with ten committed records and a group whose offsets a transaction holds."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.topic = create_topic(bootstrap, unique_name("g5"))
        write_transactions(bootstrap, self.topic, [(True, [(0, b"v%d" % i) for i in range(10)])])
        self.group = unique_name("g5-group")
        self.producer = transactional_producer(bootstrap)
        self.metadata = Consumer({"bootstrap.servers": bootstrap, "group.id": self.group}).consumer_group_metadata()

    def commit_offset(self, offset: int) -> None:
        self.open_with_offset(offset)
        self.producer.commit_transaction(30)

    def open_with_offset(self, offset: int) -> None:
        self.producer.begin_transaction()
        self.producer.send_offsets_to_transaction([TopicPartition(self.topic, 0, offset)], self.metadata, 30)


@pytest.fixture
def held(kafka):
    setup = GroupTransactions(kafka.bootstrap_servers)
    setup.commit_offset(3)
    setup.open_with_offset(7)
    return setup


def fetch_in_background(held, timeout_ms=60_000):
    admin = AdminClient({"bootstrap.servers": held.bootstrap})
    outcome = {}

    def run():
        try:
            outcome["offsets"] = fetch_stable_committed_offsets(admin, held.group, [(held.topic, 0)], timeout_ms)
        except Exception as error:  # handed to the test thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def backoff_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "UNSTABLE_OFFSET_COMMIT" in r.getMessage()]


@pytest.mark.parametrize("resolve, expected", [("commit_transaction", 7), ("abort_transaction", 3)])
def test_fetch_backs_off_while_the_transaction_is_open_then_takes_its_outcome(held, caplog, resolve, expected):
    caplog.set_level(logging.WARNING, logger="pyspark_eos.kafka.group_offsets")
    thread, outcome = fetch_in_background(held)
    wait_until(lambda: len(backoff_warnings(caplog)) >= 3, 60, "three logged back-off steps")
    assert thread.is_alive() and not outcome, "the fetch returned while the transaction was open"
    getattr(held.producer, resolve)(30)
    thread.join(60)
    assert outcome == {"offsets": {(held.topic, 0): expected}}
    assert f"{held.topic}-0" in backoff_warnings(caplog)[0] and held.group in backoff_warnings(caplog)[0]


def test_fetch_gives_up_at_its_deadline_naming_group_partitions_and_the_cause(held):
    thread, outcome = fetch_in_background(held, timeout_ms=1500)
    thread.join(60)
    held.producer.abort_transaction(30)
    error = outcome["error"]
    assert isinstance(error, PendingTransactionError)
    message = str(error)
    assert held.group in message and f"{held.topic}-0" in message and "open transaction" in message
    assert "stableOffsetsTimeoutMs" in message


def test_backoff_is_exponential_jittered_and_bounded():
    delays = Backoff(initial_s=0.1, maximum_s=1.0, factor=2.0, jitter=0.25).delays(random.Random(7))
    values = [next(delays) for _ in range(8)]
    nominal = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    assert all(0.75 * n <= v <= 1.25 * n for v, n in zip(values, nominal))
    assert len(set(values)) == len(values)


def test_retries_take_the_retriable_codes_and_those_a_caller_adds_and_nothing_else():
    from confluent_kafka import KafkaError, KafkaException

    from pyspark_eos.kafka.backoff import with_retries

    def failing(*codes):
        left = list(codes)

        def call():
            if left:
                raise KafkaException(KafkaError(left.pop(0)))
            return "answered"
        return call

    quick = Backoff(initial_s=0.001, maximum_s=0.001)
    assert with_retries(failing(KafkaError._TRANSPORT, KafkaError.NOT_COORDINATOR), "asking", backoff=quick) == "answered"
    assert with_retries(failing(KafkaError._NOENT), "asking", backoff=quick, also=frozenset({KafkaError._NOENT})) \
        == "answered"
    with pytest.raises(KafkaException, match="_NOENT"):
        with_retries(failing(KafkaError._NOENT), "asking", backoff=quick)
    with pytest.raises(KafkaException, match="_TRANSPORT"):
        with_retries(failing(*[KafkaError._TRANSPORT] * 1000), "asking", timeout_s=0.05, backoff=quick)


def test_a_coordinators_answer_is_awaited_here_while_librdkafka_keeps_its_request_open():
    from concurrent.futures import Future

    from confluent_kafka import KafkaError, KafkaException

    from pyspark_eos.kafka.group_offsets import coordinator_answer

    asked = []

    def request(timeout_s):
        asked.append(timeout_s)
        return {"g": Future()}  # never answered

    with pytest.raises(KafkaException) as raised:
        coordinator_answer(request, "g", 0.05)
    assert raised.value.args[0].code() == KafkaError._TIMED_OUT and "group 'g'" in raised.value.args[0].str()
    assert asked[0] >= 600  # librdkafka's own timeout never comes first
    answered = Future()
    answered.set_result("description")
    assert coordinator_answer(lambda timeout_s: {"g": answered}, "g", 0.05) == "description"


@pytest.mark.compat
@pytest.mark.parametrize("resolve, first_value", [("commit_transaction", b"v7"), ("abort_transaction", b"v3")])
def test_a_query_starting_from_the_group_waits_for_the_open_transaction(spark, held, tmp_path, resolve, first_value):
    # The transaction is resolved only once the source is seen stalled at it: the outcome the query
    # then starts from proves it waited, the abort case too (a stale read would also start at v3).
    frame = source(spark, held.bootstrap, held.topic, startingOffsets="group", **{"kafka.group.id": held.group})
    recorder = BatchRecorder()
    # In local mode the driver-side source process has the driver's local directory.
    (local_dir,) = executor_local_dirs(spark)
    with ThreadPoolExecutor(1) as pool, faults.stalled_until_exit(faults.STALL_OFFSETS_PENDING, local_dir,
                                                                  tmp_path) as stall:
        running = pool.submit(run_available_now, frame, str(tmp_path / "checkpoint"), recorder)
        wait_until(lambda: stall.report() or running.done(), 120, "the source to stall at the open transaction")
        assert not running.done(), "the query started from the group's offsets without waiting for the transaction"
        getattr(held.producer, resolve)(30)
    running.result()
    values = [value for _, _, value in recorder.all_rows()]
    assert values[0] == first_value and values[-1] == b"v9"


def test_a_query_fails_naming_the_group_when_the_transaction_stays_open(spark, held, tmp_path):
    frame = source(spark, held.bootstrap, held.topic, startingOffsets="group", stableOffsetsTimeoutMs=2000,
                   **{"kafka.group.id": held.group})
    try:
        with pytest.raises(StreamingQueryException, match=f"consumer group '{held.group}'.*still held by an open transaction"):
            run_available_now(frame, str(tmp_path / "checkpoint"), BatchRecorder())
    finally:
        held.producer.abort_transaction(30)
