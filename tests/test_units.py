"""Pure logic: option parsing and executor identity (no broker, no Spark)."""
from __future__ import annotations

import time

import pytest

from pyspark_eos.testing.embedded_kafka import free_ports, random_cluster_id
from pyspark_eos.errors import ConfigurationError, EosKafkaError
from pyspark_eos.protocol.executor_identity import DRIVER, executor_id
from pyspark_eos.kafka.options import parse_bool


@pytest.mark.parametrize("raw, expected", [("true", True), ("TRUE", True), (" false ", False)])
def test_parse_bool_accepts_spark_spellings(raw, expected):
    assert parse_bool({"includeheaders": raw}, "includeHeaders", default=not expected) is expected


def test_parse_bool_default_and_error_names_option_and_choices():
    assert parse_bool({}, "includeHeaders", default=True) is True
    with pytest.raises(ConfigurationError, match=r"includeHeaders='yes'.*true or false") as failure:
        parse_bool({"includeheaders": "yes"}, "includeHeaders", default=False)
    assert isinstance(failure.value, EosKafkaError)


def test_executor_id_from_standalone_log_url():
    url = "http://127.0.0.1:4040/logPage/?appId=app-1&executorId=7&logType=stderr"
    assert executor_id({"SPARK_LOG_URL_STDERR": url, "SPARK_EXECUTOR_DIRS": "/x"}) == "7"


def test_executor_id_from_executor_dirs_is_stable_and_distinct():
    first = executor_id({"SPARK_EXECUTOR_DIRS": "/data/a/executor-1"})
    assert first == executor_id({"SPARK_EXECUTOR_DIRS": "/data/a/executor-1"})
    assert first != executor_id({"SPARK_EXECUTOR_DIRS": "/data/a/executor-2"})


def test_executor_id_in_local_mode_is_the_driver():
    assert executor_id({}) == DRIVER


def test_free_ports_are_distinct_and_cluster_ids_are_kafka_uuids():
    ports = free_ports(6)
    assert len(set(ports)) == 6
    cluster_ids = [random_cluster_id() for _ in range(2000)]
    assert all(len(c) == 22 and "=" not in c and not c.startswith("-") for c in cluster_ids)


def test_the_confluent_kafka_minimum_matches_the_install_requirement():
    from configparser import ConfigParser
    from pathlib import Path

    from pyspark_eos.kafka.dependencies import CONFLUENT_KAFKA_MINIMUM, require_confluent_kafka

    setup = ConfigParser()
    setup.read(Path(__file__).resolve().parent.parent / "setup.cfg")
    wanted = ".".join(map(str, CONFLUENT_KAFKA_MINIMUM))
    assert f"confluent-kafka>={wanted}" in setup["options"]["install_requires"].split()
    require_confluent_kafka()  # the test environment's client is new enough


def test_an_old_confluent_kafka_is_refused_with_what_to_install(monkeypatch):
    import confluent_kafka

    from pyspark_eos.kafka.dependencies import require_confluent_kafka
    from pyspark_eos.errors import MissingDependencyError

    monkeypatch.setattr(confluent_kafka, "__version__", "2.5.3")
    with pytest.raises(MissingDependencyError, match=r"2\.6 or newer; .* has 2\.5\.3: install it with `pip install"):
        require_confluent_kafka()


def test_a_call_with_a_deadline_returns_raises_or_is_given_up():
    import threading

    from pyspark_eos.kafka.deadline import DeadlineExceeded, call_with_deadline

    assert call_with_deadline(lambda: 7, 5, "answer") == 7
    with pytest.raises(ZeroDivisionError):
        call_with_deadline(lambda: 1 / 0, 5, "division")
    never = threading.Event()
    with pytest.raises(DeadlineExceeded, match="stuck call did not return in 0 s"):
        call_with_deadline(never.wait, 0.2, "stuck call")
    never.set()


def test_checks_run_at_once_give_their_results_in_order_and_raise_the_first_failure_once_all_ended():
    import threading

    from pyspark_eos.kafka.at_once import all_at_once

    # The two waits only end if both calls run at the same time.
    first, second = threading.Event(), threading.Event()
    assert all_at_once([lambda: second.set() or first.wait(5) and 1, lambda: first.set() or second.wait(5) and 2]) \
        == [1, 2]
    ended = []
    slow = threading.Event()

    def later_failure():
        slow.wait(5)
        ended.append("later")
        raise KeyError("later")

    def earlier_failure():
        slow.set()
        raise ValueError("earlier")

    with pytest.raises(ValueError, match="earlier"):  # the first in order, not the first to fail
        all_at_once([earlier_failure, later_failure])
    assert ended == ["later"]  # raised only once the other call had ended
    assert all_at_once([]) == []


def test_a_call_whose_give_up_names_a_reason_is_given_up_before_its_deadline_and_one_without_is_not(monkeypatch):
    import threading
    import time

    from pyspark_eos.kafka import deadline
    from pyspark_eos.kafka.deadline import DeadlineExceeded, call_with_deadline

    monkeypatch.setattr(deadline, "FIRST_CHECK_S", 0.05)
    monkeypatch.setattr(deadline, "CHECK_EVERY_S", 0.05)
    never = threading.Event()
    answers = iter([None, None, "the group's coordinator moved from broker 1 to broker 2 meanwhile"])
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"stuck call did not return in 0 s \(the group's coordinator moved"):
        call_with_deadline(never.wait, 30, "stuck call", give_up=lambda waited: next(answers))
    assert time.monotonic() - started < 10
    asked = []
    ends = threading.Timer(0.5, never.set)
    ends.start()
    assert call_with_deadline(lambda: never.wait() and 7, 30, "slow call", give_up=asked.append) == 7
    # asked while the call ran, with the seconds it had waited, and never given up for a None
    assert len(asked) >= 2 and asked == sorted(asked) and asked[0] >= 0.05


def test_a_worker_freezes_its_objects_again_only_after_it_imported_modules(monkeypatch):
    import sys
    import types

    from pyspark_eos.kafka import worker_gc

    freezes = []
    monkeypatch.setattr(worker_gc.gc, "freeze", lambda: freezes.append(len(sys.modules)))
    monkeypatch.setattr(worker_gc, "_frozen", None)
    worker_gc.freeze_long_lived_objects()  # a worker's first task
    worker_gc.freeze_long_lived_objects()  # nothing imported since: the task's own objects stay collectable
    assert len(freezes) == 1
    # PySpark imports pandas during a worker's first task, after that task froze.
    monkeypatch.setitem(sys.modules, "late_import_in_a_task", types.ModuleType("late_import_in_a_task"))
    worker_gc.freeze_long_lived_objects()
    worker_gc.freeze_long_lived_objects()
    assert len(freezes) == 2
    # A library that added a module per task would freeze each task's objects: a few times at most.
    for task in range(10):
        monkeypatch.setitem(sys.modules, f"module_of_task_{task}", types.ModuleType(f"module_of_task_{task}"))
        worker_gc.freeze_long_lived_objects()
    assert len(freezes) == worker_gc._MOST_FREEZES


def test_a_callback_option_names_a_callable_that_pickles_and_compares_by_its_path():
    import pickle

    from pyspark_eos.kafka.options import kafka_params

    params = kafka_params({"kafka.oauth_cb": " tests.oauth_tokens:unsecured_token ", "kafka.sasl.mechanism": "x"})
    callback = params["oauth_cb"]
    assert pickle.loads(pickle.dumps(callback)) == callback and {callback: 1}[callback] == 1
    before = time.time()
    token, expiry = callback("sub=eos lifetime=100")
    # librdkafka is told half the token's remaining life (callbacks.refresh_early): it fetches the
    # next token at 80% of that, before the broker asks the connection to re-authenticate.
    assert token.count(".") == 2 and before + 49 <= expiry <= time.time() + 50
    for path, says in [("tokens", "module:function"), ("no_such_module:f", "cannot be imported"),
                       ("tests.oauth_tokens:missing", "has no callable 'missing'")]:
        with pytest.raises(ConfigurationError, match=says):
            kafka_params({"kafka.oauth_cb": path})


def test_a_token_provider_is_refused_with_a_confluent_kafka_that_fetches_tokens_only_in_poll(monkeypatch):
    import confluent_kafka

    from pyspark_eos.errors import MissingDependencyError
    from pyspark_eos.kafka.options import kafka_params

    monkeypatch.setattr(confluent_kafka, "__version__", "2.12.2")
    with pytest.raises(MissingDependencyError, match=r"option kafka.oauth_cb needs confluent-kafka 2.13 or newer "
                                                     r"here, found 2.12.2"):
        kafka_params({"kafka.oauth_cb": "tests.oauth_tokens:unsecured_token"})
    monkeypatch.setattr(confluent_kafka, "__version__", "2.13.0")
    assert kafka_params({"kafka.oauth_cb": "tests.oauth_tokens:unsecured_token"})["oauth_cb"]


def test_the_operator_commands_take_a_token_provider_by_import_path():
    from pyspark_eos.kafka.callbacks import ImportedCallable
    from pyspark_eos.operator.cli import _client_config, _parser

    arguments = _parser().parse_args(["status", "--bootstrap-servers", "h:1", "--group", "g",
                                      "-X", "oauth_cb=tests.oauth_tokens:unsecured_token"])
    assert _client_config(arguments)["oauth_cb"] == ImportedCallable("kafka.oauth_cb",
                                                                     "tests.oauth_tokens:unsecured_token")


def test_a_first_contact_fails_on_refused_handshakes_only_once_every_bootstrap_server_refused():
    from confluent_kafka import KafkaError

    from pyspark_eos.kafka.handshake_refusals import HandshakeRefusals

    def said(server: str, text: str, code=KafkaError._TRANSPORT) -> KafkaError:
        return KafkaError(code, f"ssl://{server}/bootstrap: {text}")

    refusals = HandshakeRefusals("a:9093, b:9093")
    refusals(said("a:9093", "error:0A000086:SSL routines::certificate verify failed"))
    refusals(said("a:9093", "Connect to ipv4#1.2.3.4:9093 failed: Connection refused"))  # not a refusal
    assert refusals.final() is None  # b may still answer
    refusals(said("b:9093", "SSL handshake failed: Disconnected: SSL connection closed by peer"))
    assert refusals.final() is None  # dropped once: a restarting broker does that too
    refusals(said("b:9093", "SSL handshake failed: Disconnected: SSL connection closed by peer"))
    assert "certificate verify failed" in refusals.final().str()


def test_a_process_stat_line_gives_parents_start_times_and_tells_a_zombie_from_a_running_process():
    import os
    import subprocess
    import sys

    from pyspark_eos.protocol.process_stat import START_TICKS, parent_pid, running, stat_fields

    assert parent_pid(os.getpid()) == os.getppid()
    assert int(stat_fields(os.getpid())[START_TICKS]) > 0
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while running(child.pid):  # exited and not reaped yet: a zombie, not running
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    assert stat_fields(child.pid)[0] == "Z"
    child.wait()
    assert not running(child.pid)  # reaped: gone
