"""`python -m pyspark_eos status` and `abort-lingering` against the real broker: every line of the
status of a pipeline caught mid-flight (a committed batch, a pending transaction, a static member,
a replaced member), and aborting what a dead worker left open."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from pyspark_eos.operator import coordinator_records
from pyspark_eos.operator.status import PartitionStatus, starting_offsets
from pyspark_eos.protocol.commit_metadata import partition_metadata
from pyspark_eos.kafka.group_metadata import parse_group_metadata
from pyspark_eos.testing.embedded_kafka import create_topic

RECORDS_PER_PARTITION = 10


def run_cli(bootstrap: str, *arguments: str, check: bool = True) -> subprocess.CompletedProcess:
    command, rest = arguments[0], arguments[1:]
    result = subprocess.run([sys.executable, "-m", "pyspark_eos", command, "--bootstrap-servers", bootstrap, *rest],
                            capture_output=True, text=True, timeout=180)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def status_json(bootstrap: str, group: str, *extra: str) -> dict:
    return json.loads(run_cli(bootstrap, "status", "--group", group, "--json", *extra).stdout)


class Pipeline:
    """What a running eos-kafka pipeline leaves in Kafka: input, a static member of its group, and
    write tasks' transactions under <prefix>.<group>.<executor>.<slot> ids."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        name = uuid.uuid4().hex[:8]
        self.group, self.input, self.output = f"status-{name}", f"status-in-{name}", f"status-out-{name}"
        create_topic(bootstrap, self.input, partitions=2)
        create_topic(bootstrap, self.output, partitions=1)
        producer = Producer({"bootstrap.servers": bootstrap})
        for partition in (0, 1):
            for index in range(RECORDS_PER_PARTITION):
                producer.produce(self.input, value=f"{partition}-{index}", partition=partition)
        assert producer.flush(30) == 0
        self.member = self.join("source-member")

    def join(self, instance_id: str) -> Consumer:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "group.instance.id": instance_id, "enable.auto.commit": False,
                             "session.timeout.ms": 45000})
        consumer.subscribe([self.input])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the member got no assignment"
            consumer.poll(0.2)
        return consumer

    def generation(self) -> int:
        return parse_group_metadata(self.member.consumer_group_metadata())[0]

    def transaction(self, slot: int, offsets: dict[int, int], batch: str, commit: bool) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"eos-kafka.{self.group}.0.{slot}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(self.output, value=f"batch {batch}")
        stamp = partition_metadata(self.generation(), batch, "query-1")
        producer.send_offsets_to_transaction(
            [TopicPartition(self.input, p, offset, metadata=stamp) for p, offset in offsets.items()],
            self.member.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
        return producer

    def close(self) -> None:
        self.member.close()


@pytest.fixture
def pipeline(kafka):
    running = Pipeline(kafka.bootstrap_servers)
    yield running
    running.close()


@pytest.mark.compat
def test_status_shows_committed_and_pending_offsets_lag_stamps_members_and_transactions(pipeline):
    pipeline.transaction(0, {0: 5}, batch="3", commit=True)
    pending = pipeline.transaction(1, {1: 7}, batch="4", commit=False)  # a writer stopped mid-commit

    status = status_json(pipeline.bootstrap, pipeline.group)

    partitions = {(p["topic"], p["partition"]): p for p in status["partitions"]}
    assert partitions[(pipeline.input, 0)] == {
        "topic": pipeline.input, "partition": 0, "committed": 5, "pending": False,
        "last_stable": RECORDS_PER_PARTITION, "lag": RECORDS_PER_PARTITION - 5,
        "batch": "3", "query": "query-1", "generation": pipeline.generation()}
    held = partitions[(pipeline.input, 1)]
    assert (held["committed"], held["pending"], held["last_stable"]) == (None, True, RECORDS_PER_PARTITION)
    assert set(partitions) == {(pipeline.input, 0), (pipeline.input, 1)}

    assert status["state"] == "STABLE" and status["generation"] == pipeline.generation()
    assert status["starting_offsets"] is None  # partition 1's offset is about to change
    (member,) = status["members"]
    assert member["instance_id"] == "source-member" and member["member_id"] == pipeline.member.memberid()
    assert member["assignment"] == [f"{pipeline.input}-0", f"{pipeline.input}-1"]

    transactions = {t["transactional_id"]: t for t in status["transactions"]}
    assert set(transactions) == {f"eos-kafka.{pipeline.group}.0.0", f"eos-kafka.{pipeline.group}.0.1"}
    done, open_ = transactions[f"eos-kafka.{pipeline.group}.0.0"], transactions[f"eos-kafka.{pipeline.group}.0.1"]
    assert done["state"] == "CompleteCommit" and done["open_for_s"] is None
    assert open_["state"] == "Ongoing" and 0 <= open_["open_for_s"] < 120
    assert f"{pipeline.output}-0" in open_["partitions"]
    assert any(name.startswith("__consumer_offsets-") for name in open_["partitions"])
    assert status["notes"] == []

    text = run_cli(pipeline.bootstrap, "status", "--group", pipeline.group).stdout
    assert f"group {pipeline.group}: STABLE, generation {pipeline.generation()}, 1 member(s)" in text
    assert f"member {pipeline.member.memberid()} (static source-member)" in text
    assert _row(text, f"{pipeline.input}-0") == [f"{pipeline.input}-0", "5", "stable", "10", "5", "3", "query-1",
                                                 str(pipeline.generation())]
    assert _row(text, f"{pipeline.input}-1")[:6] == [f"{pipeline.input}-1", "-", "pending", "(open", "transaction)", "10"]
    assert _row(text, f"eos-kafka.{pipeline.group}.0.1")[1] == "Ongoing"
    pending.abort_transaction(30)


def test_status_shows_offsets_a_newer_version_committed_and_names_that_version(pipeline):
    newer = json.dumps({"format": 99, "eos-kafka": "9.0.0", "generation": 3, "batch": "8", "query": "q"})
    pipeline.member.commit(offsets=[TopicPartition(pipeline.input, 0, 4, metadata=newer)], asynchronous=False)

    status = status_json(pipeline.bootstrap, pipeline.group)
    shown = {(p["topic"], p["partition"]): (p["committed"], p["batch"]) for p in status["partitions"]}
    assert shown[(pipeline.input, 0)] == (4, None)
    (note,) = status["notes"]
    assert f"{pipeline.input}-0" in note and "format 99, written by eos-kafka 9.0.0" in note and "upgrade" in note


def test_status_shows_the_pipelines_claims_topic_and_the_records_its_logs_keep(pipeline):
    from pyspark_eos.protocol.claims_layout import pipeline_topic
    from pyspark_eos.protocol.claims_log import ClaimsClients, ClaimsLog
    from pyspark_eos.sink.attempt_fencing import claim_attempt

    claims_topic = f"claims-{uuid.uuid4().hex[:8]}"
    topic = pipeline_topic(claims_topic, pipeline.group)
    assert status_json(pipeline.bootstrap, pipeline.group, "--claims-topic", claims_topic)["claims"] == {
        "topic": topic, "control_records": None, "claims_records": None}
    plan = ClaimsLog(pipeline.bootstrap, {}, claims_topic, pipeline.group).open_plan(pipeline.group)
    clients = ClaimsClients(pipeline.bootstrap, {}, pipeline.group, 60000)
    claim_attempt(clients, [plan], pipeline.group, [(pipeline.input, 0)], 7, "task 0 (attempt 7)", "t-0",
                  first_of_plan=True).release()
    clients.producer().flush(30)
    status = status_json(pipeline.bootstrap, pipeline.group, "--claims-topic", claims_topic)
    assert status["claims"] == {"topic": topic, "control_records": 1, "claims_records": 2}
    text = run_cli(pipeline.bootstrap, "status", "--group", pipeline.group, "--claims-topic", claims_topic).stdout
    assert f"claims topic {topic}: control log 1 record(s) kept" in text


def test_status_shows_the_member_that_replaced_a_fenced_static_member(pipeline):
    replacement = pipeline.join("source-member")  # a second instance of the source: the first is fenced
    try:
        with pytest.raises(KafkaException) as fenced:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                message = pipeline.member.poll(0.5)
                if message is not None and message.error() is not None:
                    raise KafkaException(message.error())
        error = fenced.value.args[0]  # librdkafka raises the broker's FENCED_INSTANCE_ID as a fatal error
        assert error.code() == KafkaError._FATAL and "fenced by other consumer with same group.instance.id" in error.str()
        (member,) = status_json(pipeline.bootstrap, pipeline.group)["members"]
        assert (member["instance_id"], member["member_id"]) == ("source-member", replacement.memberid())
        assert member["member_id"] != pipeline.member.memberid()
    finally:
        replacement.close()


@pytest.mark.compat
def test_abort_lingering_aborts_only_old_open_transactions_and_the_dry_run_nothing(pipeline):
    zombie = pipeline.transaction(1, {1: 7}, batch="4", commit=False)  # its worker died here
    lingering_id = f"eos-kafka.{pipeline.group}.0.1"

    assert "no transaction" in run_cli(pipeline.bootstrap, "abort-lingering", "--group", pipeline.group).stdout
    dry = run_cli(pipeline.bootstrap, "abort-lingering", "--group", pipeline.group, "--older-than", "0", "--dry-run")
    assert dry.stdout.startswith(f"would abort {lingering_id} (open for ")
    before = _transaction(status_json(pipeline.bootstrap, pipeline.group), lingering_id)
    assert before["state"] == "Ongoing"

    aborted = json.loads(run_cli(pipeline.bootstrap, "abort-lingering", "--group", pipeline.group,
                                 "--older-than", "0", "--json").stdout)
    assert [(a["transactional_id"], a["aborted"]) for a in aborted] == [(lingering_id, True)]
    after = status_json(pipeline.bootstrap, pipeline.group)
    assert _transaction(after, lingering_id)["state"] == "Empty"  # aborted, then ready under a new epoch
    assert _transaction(after, lingering_id)["producer_epoch"] > before["producer_epoch"]
    held = next(p for p in after["partitions"] if p["partition"] == 1)
    assert (held["pending"], held["committed"]) == (False, None)  # its offsets went with it
    with pytest.raises(KafkaException):  # the dead worker, were it to come back, is fenced
        zombie.commit_transaction(30)


def test_status_of_an_unreachable_cluster_says_what_to_check_within_the_connect_timeout():
    started = time.monotonic()
    result = run_cli("127.0.0.1:1", "status", "--group", "g", "--connect-timeout", "2", check=False)
    assert result.returncode == 2
    assert "no Kafka broker answered at 127.0.0.1:1 within 2 s (--connect-timeout)" in result.stderr
    assert "TLS/SASL settings" in result.stderr
    # librdkafka alone would retry the refused connection for the request's whole 30 s timeout
    assert time.monotonic() - started < 25


@pytest.mark.parametrize("timeout", ["0", "inf"])
def test_a_connect_timeout_that_is_not_a_positive_number_of_seconds_is_refused(timeout):
    result = run_cli("127.0.0.1:1", "abort-lingering", "--group", "g", "--connect-timeout", timeout, check=False)
    assert result.returncode == 2
    assert f"--connect-timeout must be a number of seconds more than 0, not {timeout}" in result.stderr


def test_the_groups_position_as_sparks_starting_offsets():
    def partition(name: str, number: int, committed: int | None, pending: bool = False) -> PartitionStatus:
        return PartitionStatus(name, number, committed, pending, 50, None)

    assert starting_offsets([partition("a", 0, 12), partition("a", 1, None), partition("b", 0, 7)]) == \
        {"a": {"0": 12, "1": -2}, "b": {"0": 7}}  # -2: earliest, for a partition the group never committed
    assert starting_offsets([partition("a", 0, 12), partition("a", 1, None, pending=True)]) is None
    assert starting_offsets([]) is None


def test_coordinator_partitions_follow_javas_string_hash():
    # Java: "eos-kafka.g.driver.0".hashCode() == -2081223267, "hello".hashCode() == 99162322
    assert coordinator_records.java_string_hash("eos-kafka.g.driver.0") == -2081223267
    assert coordinator_records.coordinator_partition("hello", 50) == 99162322 % 50
    assert coordinator_records.coordinator_partition("eos-kafka.g.driver.0", 50) == 2081223267 % 50


def _row(text: str, first_cell: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.split() and line.split()[0] == first_cell]
    return line.split()


def _transaction(status: dict, transactional_id: str) -> dict:
    return next(t for t in status["transactions"] if t["transactional_id"] == transactional_id)
