"""Independent Kafka checks for the tests, written directly on confluent-kafka.

Nothing here uses pyspark_eos's reader or writer: these are the plain clients the package's
results are checked against.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication: int = 1,
                 config: dict[str, str] | None = None) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, replication, config=config or {})],
                                  operation_timeout=30)
    futures[name].result(timeout=60)
    wait_until(lambda: _has_leaders(admin, name, partitions), 60, f"leaders for topic {name}")
    return name


def _has_leaders(admin: AdminClient, topic: str, partitions: int) -> bool:
    metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
    if metadata is None or metadata.error is not None or len(metadata.partitions) != partitions:
        return False
    return all(p.leader >= 0 for p in metadata.partitions.values())


def wait_until(condition, timeout: float, what: str, interval: float = 0.1):
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def transactional_producer(bootstrap: str, transactional_id: str | None = None, **config) -> Producer:
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id or unique_name("txn"),
        "transaction.timeout.ms": 60000,
        **config,
    })
    producer.init_transactions(60)
    return producer


def last_stable_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    futures = admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30)
    return {tp.partition: future.result().offset for tp, future in futures.items()}


def read_committed(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 60.0) -> list[Record]:
    """Every committed record of ``topic``, read with a plain read_committed consumer.

    Reads until each partition's position reaches its last stable offset (offsets have gaps for
    transaction markers and aborted records, so records are never counted to decide the end).
    """
    ends = last_stable_offsets(bootstrap, topic, partitions)
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": unique_name("checker"),
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[Record] = []
    eof_at: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while not _reached(consumer, topic, ends, eof_at):
            if time.monotonic() > deadline:
                raise AssertionError(f"read_committed of {topic} did not reach {ends} in {timeout:.0f} s")
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    eof_at[message.partition()] = message.offset()
                continue
            records.append(Record(message.topic(), message.partition(), message.offset(),
                                  message.key(), message.value()))
    finally:
        consumer.close()
    return records


def _reached(consumer: Consumer, topic: str, ends: dict[int, int], eof_at: dict[int, int]) -> bool:
    """Done when the position, or the partition end seen, is at or past the last stable offset."""
    positions = consumer.position([TopicPartition(topic, p) for p in ends])
    return all(max(tp.offset, eof_at.get(tp.partition, -1)) >= ends[tp.partition] for tp in positions)


def write_transactions(bootstrap: str, topic: str, transactions: list[tuple[bool, list[tuple[int, bytes]]]],
                       headers: list[tuple[str, bytes]] | None = None) -> None:
    """Write each (commit?, [(partition, value), ...]) as one transaction, committed or aborted.

    Aborted records are flushed to the broker first, so they take offsets in the log (followed by
    an abort marker) exactly as a writer that failed late would leave them.
    """
    producer = transactional_producer(bootstrap)
    for commit, records in transactions:
        producer.begin_transaction()
        for partition, value in records:
            producer.produce(topic, key=value[:2], value=value, partition=partition, headers=headers)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def mixed_transactions(partitions: int, rounds: int, per_partition: int = 2) -> list[tuple[bool, list[tuple[int, bytes]]]]:
    """Rounds of transactions over all partitions, every third one aborted."""
    return [
        (index % 3 != 1, [(p, b"r%d-p%d-%d" % (index, p, i)) for p in range(partitions) for i in range(per_partition)])
        for index in range(rounds)
    ]


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (stable), read with a plain AdminClient; -1001 if none."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]
    result = admin.list_consumer_group_offsets(request, require_stable=True)[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def kafka_tool(main_class: str, *args: str) -> str:
    """Run one of Kafka's own command-line tools (from the kafka-tools artifact); its stdout."""
    import shutil
    import subprocess

    from pyspark_eos.maven_jars import KAFKA_BROKER
    from pyspark_eos.project_files import conf_dir

    command = [shutil.which("java"), f"-Dlog4j2.configurationFile={conf_dir() / 'broker-log4j2.properties'}",
               "-cp", KAFKA_BROKER.classpath(), main_class, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{main_class} failed: {result.stderr[-3000:]}"
    return result.stdout


def transactional_ids(bootstrap: str, prefix: str) -> set[str]:
    """Transactional ids the cluster knows that start with prefix, per Kafka's TransactionsCommand."""
    listing = kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, "list")
    return {line.split()[0] for line in listing.splitlines()[1:] if line.split() and line.split()[0].startswith(prefix)}
