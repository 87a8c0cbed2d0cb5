"""Slots: the lowest free one per write task, freed by the kernel when its holder dies."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

from pyspark_eos.protocol.executor_identity import SLOTS_DIRECTORY_ENV
from pyspark_eos.sink.transactional_id_factory import current_holder, lease_slot, process_token, slots_name

HOLDER = textwrap.dedent(
    """
    import sys
    from pyspark_eos.sink.transactional_id_factory import lease_slot, process_token
    with lease_slot("p", "g") as lease:
        print(lease.slot, lease.transactional_id, process_token(), flush=True)
        sys.stdin.readline()  # holds the slot until told to go on, or killed
    """
)


def test_a_dead_workers_slot_and_transactional_id_go_to_the_next_task(tmp_path, monkeypatch):
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path))
    monkeypatch.setenv("SPARK_LOG_URL_STDERR", "http://h/logPage/?appId=a&executorId=3&logType=stderr")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=os.environ.copy())
    slot, held_id, holder_token = holder.stdout.readline().split()
    host = slots_name()
    assert (slot, held_id) == ("0", f"p.g.{host}.0")

    with lease_slot("p", "g") as lease:
        assert (lease.slot, lease.transactional_id) == (1, f"p.g.{host}.1")  # slot 0 is busy

    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(30)
    with lease_slot("p", "g") as lease:
        assert (lease.slot, lease.transactional_id, lease.previous_holder) == (0, f"p.g.{host}.0", holder_token)
    with lease_slot("p", "g") as again:
        assert again.slot == 0 and again.previous_holder == process_token()


def test_the_executor_that_replaces_a_removed_one_takes_its_slots_and_transactional_ids(tmp_path, monkeypatch):
    # Dynamic allocation: executor 3 is removed (its workers die with it) and executor 4 starts on
    # the same host, with a local directory of its own. Its tasks take executor 3's slots, ids and
    # all, so the ids a host ever had stay those of the workers it ran at once.
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path / "slots"))
    ids = []
    for executor in (3, 4):
        monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / f"executor-{executor}"))
        monkeypatch.setenv("SPARK_LOG_URL_STDERR", f"http://h/logPage/?appId=a&executorId={executor}&logType=stderr")
        workers = [subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True, env=os.environ.copy()) for _ in range(2)]
        ids.append(sorted(worker.stdout.readline().split()[1] for worker in workers))
        for worker in workers:
            worker.kill()
            worker.wait(30)
    assert ids[0] == ids[1] == [f"p.g.{slots_name()}.0", f"p.g.{slots_name()}.1"]


def test_a_hosts_slots_name_is_made_once_per_directory(tmp_path, monkeypatch):
    names = []
    for directory in ("a", "b", "a"):
        monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path / directory))
        names.append(subprocess.run([sys.executable, "-c", NAME], capture_output=True, text=True, timeout=60,
                                    env=os.environ.copy(), check=True).stdout.strip())
    assert names[0] == names[2] != names[1]
    assert names[0] == slots_name() and len(names[0]) == 12


NAME = "from pyspark_eos.sink.transactional_id_factory import slots_name; print(slots_name())"


FORKED_HOLDERS = textwrap.dedent(
    """
    import os
    from pyspark_eos.sink.transactional_id_factory import lease_slot, process_token
    for _ in range(2):  # workers forked one after the other from a process that imported the module
        pid = os.fork()
        if pid == 0:
            with lease_slot("p", "g") as lease:
                print(lease.slot, lease.previous_holder == process_token(), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
    """
)


def test_workers_forked_after_the_import_are_holders_of_their_own(tmp_path, monkeypatch):
    # As a fork server's daemon forks them (pyspark_eos.daemon): the second must not take the
    # first's producer for its own, which would skip init_transactions on a transactional id
    # another process may still use.
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path))
    result = subprocess.run([sys.executable, "-c", FORKED_HOLDERS], capture_output=True, text=True, timeout=60,
                            env=os.environ.copy())
    assert result.stdout.split("\n")[:2] == ["0 False", "0 False"], result.stderr


def test_slots_of_different_pipelines_are_independent(tmp_path, monkeypatch):
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path))
    with lease_slot("p", "g1") as first, lease_slot("p", "g2") as second:
        assert first.slot == second.slot == 0
        assert first.transactional_id != second.transactional_id


# A Python worker of the pool: leases a slot when told ("lease [PREFERRED]"), holds it until told
# to release, then stays alive, idle, as a pooled worker between tasks does.
POOLED_WORKER = textwrap.dedent(
    """
    import sys
    from pyspark_eos.sink.transactional_id_factory import lease_slot, process_token
    for line in sys.stdin:
        words = line.split()
        preferred = int(words[1]) if len(words) > 1 else None
        with lease_slot("p", "g", preferred) as lease:
            print(lease.slot, lease.previous_holder == process_token(), flush=True)
            sys.stdin.readline()  # release
        print("released", flush=True)
    """
)


class PooledWorker:
    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-c", POOLED_WORKER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=os.environ.copy())

    def lease(self, preferred: int | None = None) -> tuple[int, bool]:
        self.process.stdin.write(f"lease {'' if preferred is None else preferred}\n")
        self.process.stdin.flush()
        slot, held_last = self.process.stdout.readline().split()
        return int(slot), held_last == "True"

    def release(self) -> None:
        self.process.stdin.write("release\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "released"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(30)


def test_a_worker_keeps_its_slot_and_an_idle_workers_slot_is_left_to_it(tmp_path, monkeypatch):
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path))
    idle = PooledWorker()
    try:
        assert idle.lease() == (0, False)
        idle.release()  # alive and idle: its producer for slot 0 is still good
        with lease_slot("p", "g") as lease:
            assert lease.slot == 1  # not slot 0, whose last holder would lose its producer
        with lease_slot("p", "g", preferred=1) as lease:
            assert (lease.slot, lease.previous_holder) == (1, process_token())  # our producer: no init_transactions
        assert idle.lease(preferred=0) == (0, True)  # nobody used slot 0 since: its producer is reused
        idle.release()
    finally:
        idle.kill()


def test_a_dead_workers_slot_goes_before_the_slot_a_worker_prefers(tmp_path, monkeypatch):
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path))
    doomed = PooledWorker()
    assert doomed.lease() == (0, False)  # killed while it holds slot 0, maybe mid-transaction
    with lease_slot("p", "g") as lease:
        assert lease.slot == 1
    doomed.kill()
    with lease_slot("p", "g", preferred=1) as lease:
        # its init_transactions aborts what the dead worker left open, at once
        assert lease.slot == 0 and lease.previous_holder not in ("", process_token())
    with lease_slot("p", "g", preferred=1) as lease:
        assert (lease.slot, lease.previous_holder) == (1, process_token())


def test_a_slot_names_what_its_holders_producer_was_initialized_after_and_a_fencer_waits_for_it(tmp_path, monkeypatch):
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path))
    with lease_slot("p", "g") as lease:
        with current_holder(lease.transactional_id, wait_s=0.3) as holder:  # waited out: never recorded
            assert (holder.token, holder.busy, holder.pending) == (process_token(), True, True)
        recorder = threading.Timer(0.2, lease.record_producer, [("claims", 7)])
        recorder.start()
        with current_holder(lease.transactional_id) as holder:  # waits until the producer is recorded
            assert (holder.busy, holder.pending, holder.made, holder.initialized_after) == (True, False, True,
                                                                                             ("claims", 7))
        recorder.join()
    with current_holder(lease.transactional_id) as holder:  # free now: locked by the reader, record kept
        assert (holder.token, holder.busy, holder.initialized_after) == (process_token(), False, ("claims", 7))
        with lease_slot("p", "g") as other:
            assert other.slot == 1  # slot 0 is held by the reader meanwhile
    with lease_slot("p", "g", preferred=0) as again:
        again.record_producer(None)  # a producer made without a plan record: nothing to wait for
        with current_holder(again.transactional_id, wait_s=30) as holder:
            assert (again.slot, holder.pending, holder.made, holder.initialized_after) == (0, False, True, None)
    with lease_slot("p", "g", preferred=0) as failed:
        failed.record_failure()  # no producer made: nothing to wait for, and no proof of a fence
        with current_holder(failed.transactional_id, wait_s=30) as holder:
            assert (failed.slot, holder.pending, holder.made) == (0, False, False)
