"""The chaos campaign (devtools.chaos): its verifiers and schedule on made-up records,
and a three-minute fixed-seed smoke of the campaign itself against a three-node cluster and Spark
in local-cluster mode. The smoke runs before a release (``make release-tests``), not in ``make test``:
each fault it may fire has a deterministic test of its own in the suite. The full campaign is
``make chaos`` (docs/chaos.md)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from devtools.chaos.campaign import Campaign, split_recovery
from devtools.chaos.faults import KINDS, NETWORK_KINDS, NETWORK_SCOPES, Schedule
from devtools.chaos.query import death_cause
from devtools.chaos.verifiers import FinalCheck, _check_one
from pyspark_eos.testing.output_check import Record

SMOKE_SEED = 20261124
# Draws every network scope among its first five faults, the driver's for a partition.
NETWORK_SMOKE_SEED = 20261138


def _output(partition: int, offset: int, identity: str, input_offset: int) -> Record:
    return Record("chaos-out", partition, offset, None, f"{identity}/payload|{input_offset}".encode())


def _check(outputs: list[Record], aborted: frozenset[str] = frozenset()) -> FinalCheck:
    expected = {f"in/0/{n}": Record("in", 0, 10 + n, None, b"") for n in range(3)}
    check, seen, last = FinalCheck(), {}, {}
    for record in outputs:
        _check_one(check, record, expected, seen, last, set(aborted))
    return check


def test_the_final_check_passes_each_committed_record_once_in_order():
    check = _check([_output(0, 0, "in/0/0", 10), _output(0, 1, "in/0/1", 11), _output(0, 2, "in/0/2", 12)])
    assert check.ok and check.problems == []


@pytest.mark.parametrize("outputs, aborted, broken, named", [
    ([_output(0, 0, "in/0/0", 10), _output(0, 1, "in/0/0", 10)], (), "duplicates", "duplicate: input record in/0/0"),
    ([_output(0, 0, "in/0/1", 11), _output(0, 1, "in/0/0", 10)], (), "out_of_order", "order: input record in/0/0"),
    ([_output(0, 0, "in/0/1", 12)], (), "wrong_offset", "in/0/1 carries offset 12, its offset is 11"),
    ([_output(0, 0, "in/0/7", 17)], ("in/0/7",), "from_aborted", "in/0/7 of an aborted transaction"),
])
def test_the_final_check_names_the_first_record_that_breaks_it(outputs, aborted, broken, named):
    check = _check(outputs, frozenset(aborted))
    assert not check.ok and getattr(check, broken) == 1
    assert named in check.problems[0]


def test_the_schedule_fires_every_kind_first_and_replays_from_its_seed():
    first, again = Schedule(7, list(KINDS)), Schedule(7, list(KINDS))
    drawn = [first.next() for _ in range(30)]
    assert {kind for kind, _, _ in drawn[:len(KINDS)]} == set(KINDS)
    replayed = [again.next() for _ in range(30)]
    assert [(k, g) for k, g, _ in drawn] == [(k, g) for k, g, _ in replayed]
    assert [r.random() for _, _, r in drawn] == [r.random() for _, _, r in replayed]
    with pytest.raises(ValueError, match="unknown fault kinds \\['broker-kil'\\]; the kinds are worker-kill"):
        Schedule(7, ["broker-kil"])


def test_a_dead_querys_cause_is_read_from_its_drivers_log(tmp_path):
    log = tmp_path / "driver-1.log"
    log.write_text("\n".join([
        "18:20:24.225 WARN ProcessingTimeExecutor: Current batch is falling behind.",
        "python: rdkafka_queue.h:1086: rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed.",
        "18:20:24.244 ERROR MicroBatchExecution: Query [id = 09a6] terminated with error",
        "java.io.EOFException",
        "\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:386)",
    ]))
    cause = death_cause(log)
    assert len(cause) == 2 and "Assertion `eonce->refcnt > 0' failed" in cause[0] and "terminated" in cause[1]
    assert death_cause(tmp_path / "missing.log") == []


@pytest.mark.parametrize("took, applied, waited, recovered, after", [
    (5.0, 5.0, 2.0, 7.0, 2.0),  # a broker down 5 s: its function returns once it is back
    (27.0, 2.0, 26.0, 28.0, 1.0),  # a stall: it goes on for 25 s after its function returned
    (20.0, 30.0, 1.5, 31.5, 11.5),  # a second instance: its function waits for the first one's stop
    (5.0, 5.0, None, None, None),  # not recovered
])
def test_recovery_is_counted_from_the_faults_start_and_after_its_own_time(took, applied, waited, recovered, after):
    fault = {"took_s": took, "applied_s": applied}
    split_recovery(fault, waited)
    assert (fault["recovered_s"], fault["after_s"]) == (recovered, after)


def test_recovery_is_timed_from_the_faults_end_however_long_the_input_end_took_to_read():
    # After a hard-killed broker, reading the input's end waits for the cluster as the query does:
    # those seconds are recovery, not a pause before its clock starts.
    committed = SimpleNamespace(latest=lambda: 100)
    rig = SimpleNamespace(query=SimpleNamespace(alive=lambda: True, pid=1), expected_exits=set())
    waited = Campaign.__new__(Campaign)._wait_recovered(rig, committed, 100, "broker-bounce",
                                                        since=time.monotonic() - 12.0)
    assert 12.0 <= waited < 13.0


@pytest.mark.release
def test_a_three_minute_chaos_smoke_passes_every_verifier(tmp_path):
    command = [sys.executable, "-m", "devtools.chaos", "--seed", str(SMOKE_SEED), "--minutes", "3",
               "--no-plot", "--results", str(tmp_path), "--work-dir", str(tmp_path / "work")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    report = json.loads((tmp_path / f"chaos-{SMOKE_SEED}.json").read_text())
    assert report["verdict"] == "passed", run.stdout
    assert report["faults_fired"] >= 3 and report["faults_survived"] == report["faults_fired"]
    assert len(report["per_kind"]) >= 3, report["per_kind"]
    assert report["records_out"] == report["records_in"] > 10000
    assert all(verifier["ok"] for verifier in report["verifiers"].values())
    assert report["verifiers"]["concurrent_consumer"]["records_seen"] == report["records_in"]


@pytest.mark.release
def test_a_chaos_smoke_of_the_network_kinds_passes_every_verifier(tmp_path):
    """The network kinds alone, each fired once (a schedule's first round), through the proxies of
    the cluster; the seed draws each scope at least once, the driver's for a partition."""
    kinds = sorted(NETWORK_KINDS)
    command = [sys.executable, "-m", "devtools.chaos", "--seed", str(NETWORK_SMOKE_SEED), "--faults", str(len(kinds)),
               "--minutes", "8", "--kinds", ",".join(kinds), "--no-plot", "--results", str(tmp_path),
               "--work-dir", str(tmp_path / "work")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    report = json.loads((tmp_path / f"chaos-{NETWORK_SMOKE_SEED}.json").read_text())
    assert report["verdict"] == "passed", run.stdout
    assert set(report["per_kind"]) == set(kinds) and report["faults_survived"] == report["faults_fired"]
    scopes = {fault["details"]["scope"]: fault["details"] for fault in report["faults"]}
    assert set(scopes) == set(NETWORK_SCOPES), report["faults"]
    assert all(details["connections"] > 0 for details in scopes.values()), report["faults"]
    assert report["records_out"] == report["records_in"] > 1000


def test_open_transactions_are_read_from_kafkas_transactions_tool(kafka):
    from devtools.chaos.verifiers import open_transactions, transactions

    from .kafka_tools import create_topic, transactional_producer, unique_name

    prefix = unique_name("chaos-tool")
    topic = create_topic(kafka.bootstrap_servers, unique_name("chaos-tool"))
    idle = transactional_producer(kafka.bootstrap_servers, f"{prefix}-idle")
    busy = transactional_producer(kafka.bootstrap_servers, f"{prefix}-busy")
    busy.begin_transaction()
    busy.produce(topic, value=b"open")
    busy.flush(30)
    listed = {t["TransactionalId"]: t for t in transactions(kafka.bootstrap_servers, prefix)}
    assert set(listed) == {f"{prefix}-idle", f"{prefix}-busy"} and listed[f"{prefix}-busy"]["Coordinator"].isdigit()
    assert open_transactions(kafka.bootstrap_servers, prefix) == [f"{prefix}-busy (Ongoing)"]
    busy.abort_transaction(30)
    assert open_transactions(kafka.bootstrap_servers, prefix) == []
    assert idle is not None  # kept alive until here: its id stays listed
