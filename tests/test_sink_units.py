"""Pure logic of the sink: options, input columns, the commit plan (no broker); the decisions are
in test_protocol_decisions."""
from __future__ import annotations

import dataclasses
import sys
from types import SimpleNamespace

import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType

from pyspark_eos.sink.commit_decision import CommitPlan, commit_plan
from pyspark_eos.errors import ConfigurationError, FencedError, ProvenanceError, StaleAttemptError
from pyspark_eos.protocol.claims_records import parse_record, stamp_value
from pyspark_eos.protocol.group_stamp import GroupStamp
from pyspark_eos.protocol.offset_range import OffsetRange
from pyspark_eos.protocol.claims_log import PlanRecord
from pyspark_eos.sink.options import SinkOptions
from pyspark_eos.protocol.handover import Provenance
from pyspark_eos.sink.records import RecordColumns, check_sink_schema
from pyspark_eos.sink.task_progress import RecordDigest, group_metadata
from pyspark_eos.kafka.held_clients import Held
from pyspark_eos.sink.worker_resources import IDLE_CLOSE_S
from pyspark_eos.kafka.options import ClientSettings

STAMP = GroupStamp(b"CGMDv2:", "g", 3, "m", "i", frozenset({("t", 0), ("t", 1)}))
PLAN = CommitPlan(((STAMP, (OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 5, 6))),))


def test_sink_options_defaults_and_refusals():
    options = SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "out", "kafka.group.id": "g"})
    assert options.commits_input_offsets and options.transactional_id_prefix == "eos-kafka"
    assert options.transaction_timeout_ms == 60000 and options.stable_offsets_timeout_ms == 90000
    for key in ("kafka.transactional.id", "kafka.enable.idempotence", "kafka.acks", "kafka.enable.gapless.guarantee"):
        with pytest.raises(ConfigurationError, match=f"option {key} is not supported by the eos-kafka sink"):
            SinkOptions.parse({"kafka.bootstrap.servers": "h:1", key: "x"})
    with pytest.raises(ConfigurationError, match="unknown option"):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "topics": "x"})


@pytest.mark.parametrize("options, message", [
    ({"topic": " "}, "option topic='' is not a valid Kafka topic name"),
    ({"topic": "orders out"}, "option topic='orders out' is not a valid Kafka topic name"),
    ({"kafka.group.id": " "}, "option kafka.group.id is empty"),
    ({"kafka.transaction.timeout.ms": "-5"}, "option kafka.transaction.timeout.ms='-5' must be a positive whole number"),
    ({"kafka.linger.ms": "soon"}, "eos-kafka sink is refused by the Kafka client.*Invalid value"),
    ({"kafka.lingerms": "5"}, 'No such configuration property: "lingerms"'),
])
def test_bad_sink_options_are_named(options, message):
    with pytest.raises(ConfigurationError, match=message):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", **options})


def schema(*fields):
    return StructType([StructField(name, kind) for name, kind in fields])


@pytest.mark.parametrize("fields, topic, message", [
    ((("key", BinaryType()),), "t", "has no 'value' column"),
    ((("value", LongType()),), "t", "column 'value' has type bigint"),
    ((("value", StringType()), ("partition", LongType())), "t", "column 'partition' has type bigint; the sink needs int"),
    ((("value", StringType()), ("headers", ArrayType(StringType()))), "t", "column 'headers' has type array<string>"),
    ((("value", StringType()),), None, "no topic to write to"),
])
def test_bad_input_columns_are_named(fields, topic, message):
    with pytest.raises(ConfigurationError, match=message):
        check_sink_schema(schema(*fields), topic)


def test_good_input_columns_pass():
    check_sink_schema(schema(("value", BinaryType()), ("key", StringType()), ("topic", StringType()),
                             ("partition", IntegerType()), ("other", LongType())), None)


def test_commit_plan_needs_provenance_and_one_group():
    with pytest.raises(ProvenanceError, match="shuffle"):
        commit_plan([], "g")
    with pytest.raises(ConfigurationError, match="kafka.group.id='g'.*kafka.group.id='other'"):
        commit_plan([Provenance((OffsetRange("t", 0, 0, 1),), STAMP)], "other")
    twice = [Provenance((OffsetRange("t", 0, 0, 1),), STAMP)] * 2
    with pytest.raises(ConfigurationError, match="more than once"):
        commit_plan(twice, "g")


def test_kafka_settings_are_judged_as_for_the_sinks_transactional_producer(caplog):
    base = {"kafka.bootstrap.servers": "h:1", "topic": "t"}
    with pytest.raises(ConfigurationError, match="queuing.strategy"):  # refused by a transactional producer
        SinkOptions.parse({**base, "kafka.queuing.strategy": "lifo"})
    # A certificate shipped to the executors only: the driver cannot judge it and says so.
    options = SinkOptions.parse({**base, "kafka.security.protocol": "ssl", "kafka.ssl.ca.location": "only-there.pem"})
    assert options.kafka["ssl.ca.location"] == "only-there.pem"
    assert "could not be checked on the driver" in caplog.text


class _Client:
    closed = False

    def close(self):
        self.closed = True


@pytest.fixture
def worker_pool(monkeypatch):
    """What a worker holds for the sink, empty, on a clock the test moves; ``use`` fills a
    configuration's clients at its first use."""
    from pyspark_eos.kafka.held_clients import Registry
    from pyspark_eos.sink import producer_pool, worker_resources

    now = [0.0]
    registry = Registry("a sink configuration", worker_resources.IDLE_CLOSE_S, worker_resources.KEPT_CONFIGURATIONS,
                        clock=lambda: now[0])
    monkeypatch.setattr(worker_resources, "WORKER", registry)

    def configuration(prefix: str):
        return (ClientSettings.of("h:1", {}, 60000), (prefix, None)), (_Client(), _Client(), _Client())

    def use(configuration_and_clients) -> Held:
        (settings, scope), (producer, admin, claims) = configuration_and_clients
        held = worker_resources.use(settings, scope)
        held.client(producer_pool.PRODUCER, lambda: producer_pool.WorkerProducer(f"{scope[0]}.0", producer, 1, 0))
        held.client("admin", lambda: admin)
        held.client("claims", lambda: claims)
        held.fact("existing topics", lambda: {"t"})
        return held

    return use, producer_pool, now, configuration


def test_a_workers_clients_of_a_sink_configuration_idle_for_two_minutes_are_closed(worker_pool):
    use, pool, now, configuration = worker_pool
    old, new = configuration("old"), configuration("new")
    use(old)
    now[0] = 60.0
    use(new)
    now[0] = IDLE_CLOSE_S + 1  # old: idle past the limit; new: used 61 s ago
    kept = use(new)
    assert [c.closed for c in old[1]] == [True, True, True]
    assert [c.closed for c in new[1]] == [False, False, False]
    assert pool.cached_slot(kept) == 0 and kept.facts == {"existing topics": {"t"}}


def test_a_worker_keeps_the_clients_of_its_four_most_recently_used_sink_configurations(worker_pool):
    use, _, now, configuration = worker_pool
    configurations = [configuration(f"q{i}") for i in range(6)]
    for used in configurations[:4] + configurations[:1] + configurations[4:]:  # q0 used again after q3
        now[0] += 1
        use(used)
    closed = [name for name, (_, clients) in zip("012345", configurations) if all(c.closed for c in clients)]
    assert closed == ["1", "2"]


class _QueueFullOnce:
    """A producer whose queue is full at the second record; its retry is refused as given."""

    def __init__(self, refusal=None):
        self.sent, self.refusal, self.full = [], refusal, True

    def produce(self, topic, value, key, partition, headers=None):
        if len(self.sent) == 1 and self.full:
            self.full = False
            raise BufferError("queue full")
        if self.refusal is not None and not self.full:
            raise self.refusal
        self.sent.append(value)

    def poll(self, timeout):
        return 0


def test_a_record_refused_for_a_full_queue_is_sent_once_and_a_refused_retry_names_its_record():
    from confluent_kafka import KafkaError, KafkaException
    from pyspark_eos.sink.records import RecordColumns
    from pyspark_eos.sink.produce_records import produce_rows

    columns = RecordColumns("t", None, None, [b"a", b"b", b"c"], None)
    producer = _QueueFullOnce()
    produce_rows(producer, columns.rows(), False)
    assert producer.sent == [b"a", b"b", b"c"]
    refused = _QueueFullOnce(KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    with pytest.raises(KafkaException) as raised:
        produce_rows(refused, columns.rows(), False)
    assert raised.value.row[:2] == ("t", b"b")


def test_closing_an_idle_client_never_fails_the_task_that_closes_it(caplog):
    from pyspark_eos.kafka.held_clients import close_client

    class Broken:
        purged = False

        def purge(self):
            self.purged = True

        def close(self):
            raise RuntimeError("already destroyed")

    broken = Broken()
    close_client(broken)
    close_client(object())  # an AdminClient, or a Producer of confluent-kafka < 2.13: nothing to call
    assert broken.purged and "closing an idle Kafka client failed: already destroyed" in caplog.text


def test_a_generation_stamp_survives_its_claims_topic_record():
    stamp = dataclasses.replace(STAMP, metadata=b"CGMDv2:\x03\x00\x00\x00g\x00m\x00\x00i\x00", run_token="run-1")
    assert parse_record(stamp_value(stamp), 7) == stamp
    assert parse_record(b'{"kind": "claim", "group": "g"}', 8) is None  # a claim without its fields
    assert parse_record(b"not json", 9) is None


def test_a_plan_commits_under_the_newest_generation_of_its_own_membership_only():
    planned = dataclasses.replace(STAMP, run_token="run-1")
    plan = CommitPlan(((planned, PLAN.ranges),))
    newer = dataclasses.replace(planned, generation=5, metadata=b"CGMDv2:5")
    newest = dataclasses.replace(planned, generation=6, metadata=b"CGMDv2:6")
    other_instance = dataclasses.replace(planned, generation=9, run_token="run-2")
    older = dataclasses.replace(planned, generation=2)
    assert plan.restamped([newer, other_instance, newest, older]).by_member[0][0] == newest
    assert plan.restamped([other_instance, older]).by_member[0][0] == planned
    assert plan.restamped([dataclasses.replace(newer, group_id="other")]).by_member[0][0] == planned
    untokened = CommitPlan(((dataclasses.replace(planned, run_token=""), PLAN.ranges),))
    assert untokened.restamped([dataclasses.replace(newer, run_token="")]).by_member[0][0].generation == \
        planned.generation


def test_a_task_hands_its_plans_membership_over_to_its_writer():
    from pyspark_eos.protocol.handover import _from_json, _to_json

    provenance = Provenance(PLAN.ranges, dataclasses.replace(STAMP, run_token="run-1"))
    assert _from_json(_to_json(provenance)) == provenance


def test_delivery_guarantee_is_chosen_never_fallen_back_to():
    base = {"kafka.bootstrap.servers": "h:1", "topic": "out"}
    with_group = SinkOptions.parse({**base, "kafka.group.id": "g"})
    assert with_group.commits_input_offsets and not with_group.records_progress
    without_group = SinkOptions.parse(base)  # exactly-once by its own progress records
    assert without_group.records_progress and not without_group.commits_input_offsets
    assert without_group.claims_topic == "eos-kafka-claims"
    at_least_once = SinkOptions.parse({**base, "deliveryGuarantee": "AT-LEAST-ONCE"})
    assert not at_least_once.commits_input_offsets and not at_least_once.records_progress
    with pytest.raises(ConfigurationError, match="at-least-once commits no input offsets, but kafka.group.id"):
        SinkOptions.parse({**base, "deliveryGuarantee": "at-least-once", "kafka.group.id": "g"})
    with pytest.raises(ConfigurationError, match="use one of: exactly-once, at-least-once"):
        SinkOptions.parse({**base, "deliveryGuarantee": "none"})


def _columns(values, keys=None, partitions=None):
    return RecordColumns("out", partitions, keys, values, None)


def test_a_task_digest_ignores_record_order_and_sees_any_changed_record():
    digest = lambda *chunks: _digest(chunks)  # noqa: E731
    first = digest(_columns([b"a", b"b"], [b"k1", b"k2"]), _columns(["c"], [None]))
    assert first.records == 3
    assert digest(_columns([b"c"], [None]), _columns([b"b", b"a"], [b"k2", b"k1"])) == first  # another order
    assert digest(_columns([b"a", b"b", b"c"], [b"k1", b"k2", None])) == first  # other chunks
    for changed in (_columns([b"a", b"b", b"x"], [b"k1", b"k2", None]),  # a value
                    _columns([b"a", b"b", b"c"], [b"k2", b"k1", None]),  # keys swapped between records
                    _columns([b"a", b"b", b"c"], [b"k1", b"k2", b""]),  # a null key made empty
                    _columns([b"a", b"b", b"c"], [b"k1", b"k2", None], [0, 0, 1]),  # partitions given
                    _columns([b"a", b"b"], [b"k1", b"k2"])):  # a record fewer
        assert digest(changed) != first


def test_a_task_digest_does_not_depend_on_which_records_share_a_chunk_with_headers():
    # A chunk where no record has headers has no headers column; a replay's shuffle puts a record
    # without headers into a chunk with some, and its checksum must stay the same.
    header = [("h", b"1")]
    apart = _digest([RecordColumns("out", None, None, [b"a"], [header]), RecordColumns("out", None, None, [b"b"], None)])
    together = _digest([RecordColumns("out", None, None, [b"b", b"a"], [None, header])])
    emptied = _digest([RecordColumns("out", None, None, [b"b", b"a"], [[], header])])
    assert apart == together == emptied
    assert _digest([RecordColumns("out", None, None, [b"a", b"b"], [None, header])]) != apart  # headers moved


def _digest(chunks) -> RecordDigest:
    digest = RecordDigest()
    for chunk in chunks:
        digest.add(chunk)
    return digest


def test_a_progress_groups_metadata_is_a_memberless_consumers():
    from pyspark_eos.kafka.group_metadata import parse_group_metadata

    held = Held(ClientSettings.of("127.0.0.1:9", {}, 60000))
    metadata = group_metadata(held, "eos-kafka.progress.q.0")
    assert parse_group_metadata(metadata) == (-1, "eos-kafka.progress.q.0", "", None)


def test_a_claims_producer_that_failed_in_the_background_fails_the_first_append_with_its_cause(monkeypatch):
    import time

    from pyspark_eos.errors import KafkaClientError
    from pyspark_eos.protocol import claims_log

    causes = iter([KafkaClientError("the claims topic may not be created: the principal lacks CREATE"),
                   KafkaClientError("tried again")])
    tries = []

    def refused(*args):
        tries.append(args)
        raise next(causes)

    monkeypatch.setattr(claims_log, "ensure_claims_topic", refused)
    claims = claims_log.ClaimsLog("127.0.0.1:9", {}, "claims")
    claims.prepare()
    deadline = time.monotonic() + 10
    while claims._prepare_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    # The first append (in the group's join) raises the background attempt's cause instead of
    # spending another request timeout; a later append tries again.
    with pytest.raises(KafkaClientError, match="lacks CREATE"):
        claims.record_stamp(None)
    assert len(tries) == 1
    with pytest.raises(KafkaClientError, match="tried again"):
        claims.record_stamp(None)
    assert len(tries) == 2


def test_offsets_refused_to_a_fenced_static_member_say_another_instance_took_over():
    from confluent_kafka import KafkaError, KafkaException

    from pyspark_eos.sink.task_failures import DeliveryErrors, explain

    from pyspark_eos.sink.task_failures import FailureContext

    context = FailureContext(Held(ClientSettings.of("127.0.0.1:9", {}, 60000)), True, True, False)
    refused = KafkaException(KafkaError(KafkaError.FENCED_INSTANCE_ID, "Static consumer fenced by other consumer"))
    error = explain(refused, "task 3", DeliveryErrors(), context)
    assert isinstance(error, FencedError)
    assert str(error).startswith("task 3: Kafka refused this task's offsets (FENCED_INSTANCE_ID)")
    assert "another instance of the same pipeline" in str(error) and "none of this task's records are visible" in str(error)


@pytest.mark.parametrize("code", ["_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"])
def test_a_fenced_producer_says_a_later_attempt_or_another_instance_took_its_transactional_id(code):
    """A second instance of a pipeline fences the first's producers by their transactional ids
    when it writes before its group membership fenced the first's offsets."""
    from confluent_kafka import KafkaError, KafkaException

    from pyspark_eos.sink.task_failures import DeliveryErrors, FailureContext, explain

    context = FailureContext(Held(ClientSettings.of("127.0.0.1:9", {}, 60000)), True, True, False)
    fenced = KafkaException(KafkaError(getattr(KafkaError, code), "This instance has been fenced by a newer instance"))
    error = explain(fenced, "task 3", DeliveryErrors(), context)
    assert isinstance(error, FencedError)
    assert str(error).startswith("task 3: Kafka fenced this task's producer (This instance has been fenced by a newer")
    assert "a later attempt of this task" in str(error) and "another instance of the same pipeline" in str(error)


@pytest.mark.parametrize("last, now, moved", [(None, 2, False), (None, None, False), (1, 1, False), (1, 2, True),
                                              (1, None, True)])
def test_a_cached_producer_is_replaced_when_the_groups_coordinator_moved_or_cannot_be_found(last, now, moved):
    from pyspark_eos.sink.producer_pool import WorkerProducer, _coordinator_moved

    assert _coordinator_moved(WorkerProducer("id", None, 1, group_coordinator=last), now) is moved


@pytest.mark.parametrize("known, now, waited, reason", [
    (1, 2, 3.0, "moved from broker 1 to broker 2"), (1, 1, 3.0, None), (1, None, 30.0, None), (None, 2, 30.0, None),
    (1, 1, 5.0, "broker 1, answers this worker, yet the call has waited 5 s: its request was lost"),
])
def test_a_call_waiting_on_the_groups_coordinator_is_given_up_once_it_moved_or_answers_while_the_call_waits(
        monkeypatch, known, now, waited, reason):
    # An unknown coordinator is most likely moving or cut off: a new producer would wait as long.
    from pyspark_eos.sink import producer_pool
    from pyspark_eos.sink.producer_pool import WorkerProducer, why_offsets_wait

    monkeypatch.setattr(producer_pool, "_group_coordinator", lambda held, group_id: now)
    given_up = why_offsets_wait(None, WorkerProducer("id", None, 1, group_coordinator=known), "group", waited)
    assert (given_up is None) if reason is None else (reason in given_up)


def test_a_producers_outages_count_only_all_its_brokers_down():
    from confluent_kafka import KafkaError

    from pyspark_eos.kafka.broker_outages import BrokerOutages

    outages = BrokerOutages()
    outages(KafkaError(KafkaError._TRANSPORT, "one broker's connection closed"))
    assert not outages.seen  # librdkafka reconnects a single connection by itself
    outages(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert outages.seen


def test_a_workers_admin_client_that_lost_all_its_brokers_is_replaced_and_one_that_did_not_is_kept():
    from pyspark_eos.kafka.broker_outages import BrokerOutages
    from pyspark_eos.kafka.held_clients import Held
    from pyspark_eos.kafka.options import ClientSettings
    from pyspark_eos.sink.producer_pool import ADMIN, admin_for
    from pyspark_eos.testing.embedded_kafka import free_ports

    from .kafka_tools import wait_until

    held = Held(ClientSettings.of(f"127.0.0.1:{free_ports(1)[0]}", {}, 60000))  # nothing listens there
    first = admin_for(held)
    outages = held.clients[ADMIN].outages
    wait_until(lambda: first.poll(0.1) >= 0 and outages.seen, 30, "librdkafka reporting all brokers down")
    second = admin_for(held)
    assert second is not first
    held.clients[ADMIN].outages = BrokerOutages()  # one that saw no outage
    assert admin_for(held) is second
    assert admin_for(held, renew=True) is not second
    held.close()


class _ReadsAgain:
    """A fake claim whose stable read sent beside its claims read is never decided on."""

    def enforce_reading_beside(self, read):
        self.enforce()


class _RefusedClaim(_ReadsAgain):
    """An attempt's claim whose fence decision refuses it (a newer attempt claimed the input)."""

    released = False

    def enforce(self):
        raise StaleAttemptError("a newer attempt of this task has claimed its input")

    def release(self):
        self.released = True


class _TransactionalProducer:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append(name)


class _ClaimingTarget:
    """A commit whose attempt gets ``claim``."""

    digest = None

    def __init__(self, claim):
        self.claim = lambda held, worker: claim

    def prepared(self, provenance, count):
        return self

    def describe(self):
        return "input t-0[10,20)"


def test_an_attempt_its_fence_decision_refuses_aborts_and_releases_its_claim(monkeypatch):
    from pyspark_eos.sink import transactional_writer as writer
    from pyspark_eos.sink.producer_pool import WorkerProducer
    from pyspark_eos.sink.task_failures import FailureContext
    from pyspark_eos.sink.task_info import TaskInfo

    claim = _RefusedClaim()
    monkeypatch.setattr(writer, "collect", lambda attempt: ([], []))
    held = Held(ClientSettings.of("h:1", {}, 60000))
    worker = WorkerProducer("eos-kafka.g.driver.0", _TransactionalProducer(), 1, 0)
    task = writer._WriteTask(TaskInfo.current(), held, worker, _ClaimingTarget(claim),
                             FailureContext(held, True, True, False), 90000)
    with pytest.raises(StaleAttemptError, match="t-0.*none of this task's records are visible"):
        task.run([])
    assert "abort_transaction" in worker.producer.calls and "commit_transaction" not in worker.producer.calls
    assert claim.released  # a later attempt must not fence the id of this one, which has ended


class _Order:
    """Records the order of a task's calls around its records: produce, flush, claim; ``clock`` (a
    one-item list) is moved on by each flush."""

    def __init__(self, flush_takes_s: float = 0.0, clock: list | None = None):
        self.calls, self.flush_takes_s, self.clock = [], flush_takes_s, clock

    def produce(self, topic, value, *args, **kwargs):
        self.calls.append(f"produce {value}")

    def flush(self, timeout):
        self.calls.append("flush")
        if self.clock is not None:
            self.clock[0] += self.flush_takes_s
        return 0

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append(name)


class _Claim(_ReadsAgain):
    """An appended claim that records what the task does with it; ``refuse``: its decision refuses."""

    def __init__(self, order: _Order, refuse: bool = False, appended_at: float = 1000.0):
        from pyspark_eos.sink.attempt_fencing import Instant

        self.order, self.refuse, self.appended, self.released = order, refuse, Instant(appended_at, appended_at), False

    def enforce(self):
        self.order.calls.append("enforce")
        if self.refuse:
            raise StaleAttemptError("a newer attempt of this task has claimed its input")

    def renew_if_old(self):
        self.order.calls.append("renew_if_old")

    def release(self):
        self.released = True


class _ClaimFirstTarget:
    """A progress commit (claims before its first record): ``claim()`` returns ``made`` (None: as with
    fencing off), and records itself in ``order``."""

    claims_first = True

    def __init__(self, order: _Order, made=None):
        self.order, self.digest, self.made = order, RecordDigest(), made

    def claim(self, held, worker):
        self.order.calls.append("claim")
        return self.made

    def prepared(self, provenance, count):
        # With fencing off a plain transactional write from here; else on to a claim that refuses.
        return None if self.made is None or not self.made.refuse else self

    def describe(self):
        return "progress group p.0"


def _claim_first_task(monkeypatch, order: _Order, made=None):
    from pyspark_eos.sink import transactional_writer as writer
    from pyspark_eos.sink.producer_pool import WorkerProducer
    from pyspark_eos.sink.task_failures import FailureContext
    from pyspark_eos.sink.task_info import TaskInfo

    monkeypatch.setattr(writer, "collect", lambda attempt: ([], []))
    monkeypatch.setattr(writer, "TopicCheck", lambda held, producer: SimpleNamespace(require=lambda topics: None))
    held = Held(ClientSettings.of("h:1", {}, 60000))
    worker = WorkerProducer("eos-kafka.q.driver.1", order, 1, 0)
    return writer._WriteTask(TaskInfo.current(), held, worker, _ClaimFirstTarget(order, made),
                             FailureContext(held, True, False, True), 90000)


def _steps(order: _Order) -> list[str]:
    return [call for call in order.calls
            if call in ("claim", "enforce", "renew_if_old", "flush") or call.startswith("produce")]


def _clock(monkeypatch, at: float) -> list:
    """A clock for both of Instant's readings, starting at ``at``."""
    from pyspark_eos.sink.attempt_fencing import Instant

    clock = [at]
    monkeypatch.setattr(Instant, "now", staticmethod(lambda: Instant(clock[0], clock[0])))
    return clock


def test_a_progress_task_claims_before_its_first_record_and_delivers_that_record_at_once(monkeypatch):
    _clock(monkeypatch, 1000.0)
    order = _Order()
    claim = _Claim(order)
    _claim_first_task(monkeypatch, order, claim).run([_columns([b"a", b"b"]), _columns([b"c"])])
    assert _steps(order)[:6] == ["claim", "enforce", "renew_if_old", "produce b'a'", "flush", "produce b'b'"], \
        order.calls
    assert "commit_transaction" in order.calls and claim.released


def test_a_progress_task_whose_claim_is_refused_aborts_releases_it_and_produces_nothing(monkeypatch):
    order = _Order()
    claim = _Claim(order, refuse=True)
    with pytest.raises(StaleAttemptError, match="none of this task's records are visible"):
        _claim_first_task(monkeypatch, order, claim).run([_columns([b"a"])])
    assert _steps(order) == ["claim", "enforce"], order.calls
    assert "abort_transaction" in order.calls and claim.released


def test_with_claim_first_switched_off_a_progress_task_claims_once_its_records_are_delivered(monkeypatch):
    from pyspark_eos.sink import transactional_writer as writer

    monkeypatch.setattr(writer.faults, "switched_off", lambda switch: switch == writer.faults.CLAIM_FIRST_OFF)
    order = _Order()
    with pytest.raises(StaleAttemptError):  # the claim's decision refuses: the test's end
        _claim_first_task(monkeypatch, order, _Claim(order, refuse=True)).run([_columns([b"a", b"b"])])
    assert _steps(order) == ["produce b'a'", "produce b'b'", "flush", "claim", "enforce"], order.calls


def test_a_progress_task_whose_first_record_is_delivered_late_after_its_claim_aborts(monkeypatch):
    from pyspark_eos.errors import TransactionFailedError
    from pyspark_eos.sink import transactional_writer as writer

    clock = _clock(monkeypatch, 1000.0)
    order = _Order(flush_takes_s=writer.OPEN_AFTER_CLAIM_S + 1, clock=clock)
    claim = _Claim(order)
    with pytest.raises(TransactionFailedError, match="took over 10 s from this attempt's claim"):
        _claim_first_task(monkeypatch, order, claim).run([_columns([b"a", b"b"])])
    assert "abort_transaction" in order.calls and "commit_transaction" not in order.calls
    assert "produce b'b'" not in order.calls and claim.released


def test_a_claim_appended_long_ago_is_appended_again_before_the_first_record(monkeypatch):
    from pyspark_eos.sink.attempt_fencing import RENEW_CLAIM_AFTER_S, AttemptClaim, Instant

    clock = _clock(monkeypatch, 2000.0)
    appended = []
    monkeypatch.setattr("pyspark_eos.sink.attempt_fencing.append", lambda *args: appended.append(args) or 7)
    clients = SimpleNamespace(producer=lambda: None)
    claim = AttemptClaim(SimpleNamespace(group="g", to_json=lambda: b"{}"), "claims", 0, clients,
                         appended=Instant(2000.0, 2000.0))
    clock[0] += RENEW_CLAIM_AFTER_S  # its fences took that long: still fresh enough
    claim.renew_if_old()
    assert not appended
    clock[0] += 1
    claim.renew_if_old()  # older: a copy, from which the first record's time counts
    assert len(appended) == 1 and claim.appended == Instant(clock[0], clock[0])


def test_a_progress_task_whose_claim_kafka_refuses_fails_with_kafkas_error_and_produces_nothing(monkeypatch):
    from confluent_kafka import KafkaError, KafkaException

    from pyspark_eos.errors import TransactionFailedError

    class RefusedAppend(_ClaimFirstTarget):
        def claim(self, held, worker):
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "claims topic: not authorized"))

    order = _Order()
    task = _claim_first_task(monkeypatch, order)
    task.target = RefusedAppend(order)
    with pytest.raises(TransactionFailedError, match="claims topic: not authorized"):
        task.run([_columns([b"a"])])
    assert not [call for call in order.calls if call.startswith("produce")], order.calls


@pytest.mark.parametrize("value", ["slot", "partition"])
def test_the_removed_transactional_id_per_option_says_to_drop_it(value):
    with pytest.raises(ConfigurationError, match=f"transactionalIdPer='{value}' is no longer supported.*drop the option"):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "t", "transactionalIdPer": value})


# ------------------------------------------------------------------------------- the driver's checks at start

def _sink(**options) -> SinkOptions:
    return SinkOptions.parse({"kafka.bootstrap.servers": "b:9092", "topic": "t", **options})


@pytest.mark.parametrize("options, streaming, scope, claims", [
    ({"kafka.group.id": "g"}, True, "g", {"READ", "WRITE"}),
    ({}, True, "query-", {"READ", "WRITE"}),
    ({"txnAppId": "nightly", "txnVersion": "3"}, False, "app-nightly", {"READ", "WRITE"}),
    # A batch write without a group or app id takes "no-group" ids, or "query-<id>" in foreachBatch.
    ({}, False, None, {"WRITE"}),
])
def test_the_driver_checks_the_ids_and_claims_operations_the_tasks_will_use(options, streaming, scope, claims):
    from pyspark_eos.sink.driver_checks import claims_operations_needed
    from pyspark_eos.sink.transactional_id_factory import id_scope

    sink = _sink(**options)
    assert id_scope(sink.group_id, sink.txn_app_id, "" if streaming else None) == scope
    assert claims_operations_needed(sink, streaming) == claims


def test_a_tasks_transactional_ids_begin_with_what_the_driver_checked():
    from pyspark_eos.sink.transactional_id_factory import id_scope, transactional_id

    for group, app in ((None, None), ("g", None), (None, "nightly")):
        checked = f"p.{id_scope(group, app, '')}"
        assert transactional_id("p", id_scope(group, app, "3f2a"), "1", 0).startswith(checked)
    assert id_scope(None, None, "3f2a") == "query-3f2a" and id_scope(None, None, None) is None


@pytest.mark.parametrize("code, start", [
    ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "the principal may not use the sink's transactional ids p.g.* at b:9092"),
    ("_UNSUPPORTED_FEATURE", "the cluster at b:9092 does not support Kafka transactions"),
    ("UNSUPPORTED_VERSION", "the cluster at b:9092 does not support Kafka transactions"),
    ("_TIMED_OUT", "no transaction coordinator answered at b:9092 within 5 s"),
    ("COORDINATOR_NOT_AVAILABLE", "no transaction coordinator answered at b:9092 within 5 s"),
    ("INVALID_TRANSACTION_TIMEOUT", "option kafka.transaction.timeout.ms=60000 is above the brokers'"),
    ("_TRANSPORT", None),
])
def test_a_refused_transactional_producer_on_the_driver_is_explained_by_its_code(code, start):
    from pyspark_eos.sink.driver_checks import transactions_refusal

    message = transactions_refusal(code, "p.g.", "b:9092", 5, 60000)
    assert (message if start is None else message[:len(start)]) == start


@pytest.mark.parametrize("authorized, needed, missing", [
    ({"READ", "WRITE", "DESCRIBE"}, {"READ", "WRITE"}, None),
    ({"ALL"}, {"READ", "WRITE"}, None),
    ({"WRITE", "DESCRIBE"}, {"READ", "WRITE"}, "READ"),
    ({"WRITE", "DESCRIBE"}, {"WRITE"}, None),
    (None, {"READ", "WRITE"}, "READ and WRITE"),
])
def test_the_claims_topic_refusal_names_the_missing_operations(authorized, needed, missing):
    from pyspark_eos.sink.driver_checks import claims_refusal

    message = claims_refusal("c", "b:9092", authorized, needed)
    assert message is None if missing is None else message.startswith(f"the principal may not {missing} the claims")


@pytest.mark.parametrize("argv, checked", [
    (["/spark/python/lib/pyspark.zip/pyspark/daemon.py", "pyspark.sql.worker.python_streaming_sink_runner"], False),
    (["/spark/python/lib/pyspark.zip/pyspark/daemon.py", "pyspark.sql.worker.write_into_data_source"], True),
])
def test_the_sink_commit_runner_builds_its_writer_without_the_driver_checks(monkeypatch, argv, checked):
    # The planner's process checked the same options for the batch it planned; the commit runner
    # only calls commit() or abort(), which reach no Kafka.
    from pyspark_eos import data_source
    from pyspark_eos.kafka import cluster
    from pyspark_eos.sink import driver_checks

    calls = []
    monkeypatch.setattr(cluster, "check_output", lambda *args: calls.append("cluster"))
    monkeypatch.setattr(driver_checks, "check_sink_can_commit", lambda *args: calls.append("transactions"))
    monkeypatch.setattr(sys, "argv", argv)
    schema = StructType([StructField("value", BinaryType())])

    writer = data_source.EosKafkaDataSource({"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "out",
                                             "kafka.group.id": "g"}).streamWriter(schema, overwrite=False)

    assert writer.options.topic == "out"
    assert sorted(calls) == (["cluster", "transactions"] if checked else [])  # the checks run at once


def test_a_tasks_step_times_name_each_step_with_its_own_seconds_and_the_whole():
    from pyspark_eos.sink.transactional_writer import StepTimes

    steps = StepTimes(started=10.0, ends=[("producer", 10.5), ("records", 12.0), ("commit", 12.25)])
    assert str(steps) == "in 2.25 s (producer 0.50, records 1.50, commit 0.25)"
