"""The embedded broker is a real Kafka: transactions, read_committed and stable offset fetches."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, free_ports
from pyspark_eos.testing.output_check import settled_stable_offsets
from pyspark_eos.errors import EmbeddedKafkaError

from .kafka_tools import create_topic, read_committed, transactional_producer, unique_name, wait_until


def produce_values(producer, topic: str, values: list[bytes]) -> None:
    for value in values:
        producer.produce(topic, value=value, partition=0)


def test_read_committed_sees_committed_and_not_aborted_transactions(kafka):
    topic = create_topic(kafka.bootstrap_servers, unique_name("smoke-txn"))
    producer = transactional_producer(kafka.bootstrap_servers)
    producer.begin_transaction()
    produce_values(producer, topic, [b"committed-1", b"committed-2"])
    producer.commit_transaction(30)
    producer.begin_transaction()
    produce_values(producer, topic, [b"aborted-1", b"aborted-2", b"aborted-3"])
    producer.flush(30)
    producer.abort_transaction(30)

    records = read_committed(kafka.bootstrap_servers, topic)

    assert [r.value for r in records] == [b"committed-1", b"committed-2"]
    # Two data records, one commit marker, three aborted records and an abort marker: the log has
    # gaps that a reader must not mistake for data.
    assert [r.offset for r in records] == [0, 1]


def test_a_read_right_after_a_commit_waits_for_the_markers_of_every_partition(kafka):
    """A commit's markers reach each partition after ``commit_transaction`` returns: where a read
    starts while a partition's stable offset is behind its high watermark (here the commit itself
    is delayed, as its markers can be), the read's ends wait until they cover the transaction."""
    topic = create_topic(kafka.bootstrap_servers, unique_name("smoke-markers"), 2)
    producer = transactional_producer(kafka.bootstrap_servers)
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(topic, value=b"p%d" % partition, partition=partition)
    producer.flush(30)
    committer = threading.Timer(0.5, producer.commit_transaction, (30,))
    committer.start()
    try:
        ends = settled_stable_offsets(kafka.bootstrap_servers, topic, 2)
    finally:
        committer.join(60)
    assert ends == {0: 2, 1: 2}  # a record and the commit marker each
    assert sorted(r.value for r in read_committed(kafka.bootstrap_servers, topic, partitions=2)) == [b"p0", b"p1"]


def fetch_stable_offset(bootstrap: str, group: str, topic: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
    result = admin.list_consumer_group_offsets(request, require_stable=True)[group].result(30)
    return result.topic_partitions[0]


@pytest.mark.compat
def test_open_transaction_with_group_offsets_is_unstable_until_it_commits(kafka):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("smoke-unstable"))
    group = unique_name("group")
    producer = transactional_producer(bootstrap)
    # Group metadata of a consumer that never joined (generation -1): the broker accepts it.
    metadata = Consumer({"bootstrap.servers": bootstrap, "group.id": group}).consumer_group_metadata()

    producer.begin_transaction()
    produce_values(producer, topic, [b"out"])
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 42)], metadata, 30)

    pending = fetch_stable_offset(bootstrap, group, topic)
    assert pending.error is not None
    assert pending.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT

    producer.commit_transaction(30)
    committed = wait_until(lambda: _stable(fetch_stable_offset(bootstrap, group, topic)), 30,
                           "the committed offset to become stable")
    assert committed.offset == 42


def _stable(partition):
    return partition if partition.error is None else None


def test_cli_starts_reports_and_stops_a_broker(tmp_path):
    directory = tmp_path / "cli-cluster"
    command = [sys.executable, "-m", "pyspark_eos.testing.embedded_kafka"]
    started = subprocess.run(command + ["start", "--dir", str(directory)], capture_output=True, text=True,
                             timeout=180)
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip()
    try:
        assert bootstrap.startswith("127.0.0.1:")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert [node.id for node in admin.describe_cluster(request_timeout=30).result().nodes] == [1]
        status = subprocess.run(command + ["status", "--dir", str(directory)], capture_output=True, text=True)
        assert status.returncode == 0 and "running (pid" in status.stdout
    finally:
        stopped = subprocess.run(command + ["stop", "--dir", str(directory)], capture_output=True, text=True,
                                 timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    after = subprocess.run(command + ["status", "--dir", str(directory)], capture_output=True, text=True)
    assert after.returncode == 3 and "stopped" in after.stdout


def test_a_node_that_cannot_start_is_reported_with_its_log(tmp_path):
    cluster = EmbeddedKafkaCluster(nodes=1, directory=tmp_path, overrides={"num.io.threads": "not-a-number"})
    with pytest.raises(EmbeddedKafkaError) as failure:
        cluster.start(timeout=60)
    message = str(failure.value)
    assert str(cluster.node(1).log_path) in message
    assert "num.io.threads" in message
    assert cluster.running_node_ids() == []


def test_a_command_dying_with_its_parent_starts_while_other_threads_hold_locks_and_dies_with_its_thread():
    """Started from a threaded process whose other thread holds the logging lock while a third
    keeps, in its thread-local storage, an object that logs when it is finalized (as py4j's
    connections do): the command still starts (no Python code runs between fork and exec), as the
    command itself, and the kernel kills it once the thread that started it has ended."""
    import logging
    import time

    from pyspark_eos.testing.embedded_kafka import start_dying_with_parent

    logger, handler = logging.getLogger(f"{__name__}.finalizer"), logging.StreamHandler()
    logger.addHandler(handler)

    class LogsWhenFinalized:
        def __del__(self):
            logger.warning("finalized")

    release, held = threading.Event(), threading.Event()
    local = threading.local()

    def hold_the_lock():
        with handler.lock:
            held.set()
            release.wait(30)

    def keep_a_finalizer():
        local.connection = LogsWhenFinalized()
        release.wait(30)

    started = {}

    def start():
        process = started["process"] = start_dying_with_parent(["sleep", "60"])
        # Exec'd as the command (same pid): the pid a cluster kills and checks is the program's.
        wait_until(lambda: open(f"/proc/{process.pid}/cmdline").read().startswith("sleep\0"), 10, "the exec")
        started["exec"] = True

    helpers = [threading.Thread(target=hold_the_lock), threading.Thread(target=keep_a_finalizer)]
    for helper in helpers:
        helper.start()
    try:
        assert held.wait(10)
        starter = threading.Thread(target=start)
        starter.start()
        starter.join(10)
        assert not starter.is_alive(), "Popen did not return: the forked child hangs before exec"
    finally:
        release.set()
        for helper in helpers:
            helper.join()
        logger.removeHandler(handler)
    process = started["process"]
    try:
        assert started.get("exec")
        wait_until(lambda: process.poll() is not None, 10, "the command's death with its starting thread")
        assert process.returncode == -9
    finally:
        if process.poll() is None:
            process.kill()


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range_that_connections_take_theirs_from():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(port < low for port in ports), (ports, low)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
