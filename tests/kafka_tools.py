"""Kafka set-up and independent checks for the tests, written directly on confluent-kafka.

Nothing here uses pyspark_eos's reader or writer: these are the plain clients the package's
results are checked against.
"""
from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

# The independent read_committed checks live in the package (the example pipeline reports with
# them too); they use nothing but a plain confluent-kafka consumer and AdminClient.
from pyspark_eos.testing.embedded_kafka import create_topic  # noqa: F401 - the tests' topics
from pyspark_eos.testing.output_check import Record, committed_offsets, last_stable_offsets, read_committed  # noqa: F401
from pyspark_eos.sink.driver_checks import PROBE_HOST


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


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


def offsets_transaction(producer: Producer, output: str, value: bytes, offsets: list, metadata,
                        send=lambda call: call()) -> None:
    """One transaction: ``value`` into partition 0 of ``output``, and a group's ``offsets``;
    ``send`` makes the offsets' call (a test bounds it with a deadline)."""
    producer.begin_transaction()
    producer.produce(output, value=value, partition=0)
    producer.flush(30)
    send(lambda: producer.send_offsets_to_transaction(offsets, metadata, 120))
    producer.commit_transaction(60)


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


def kafka_tool(main_class: str, *args: str) -> str:
    """Run one of Kafka's own command-line tools; its stdout."""
    import subprocess

    from pyspark_eos.testing.embedded_kafka import kafka_tool_command

    result = subprocess.run([*kafka_tool_command(main_class), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{main_class} failed: {result.stderr[-3000:]}"
    return result.stdout


def transactional_ids(bootstrap: str, prefix: str, probe: bool = False) -> set[str]:
    """Transactional ids the cluster knows that start with prefix, per Kafka's TransactionsCommand:
    the write tasks' ids, and the driver's check at start (driver_checks) with ``probe``."""
    listing = kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, "list")
    ids = {line.split()[0] for line in listing.splitlines()[1:] if line.split() and line.split()[0].startswith(prefix)}
    return ids if probe else {name for name in ids if f".{PROBE_HOST}." not in name}


def group_members(bootstrap: str, group: str) -> list[str]:
    """The instance ids (or member ids, for dynamic members) of the group's members now."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group], request_timeout=30)[group].result(30)
    return sorted(member.group_instance_id or member.member_id for member in description.members)
