"""Slots: the lowest free one per write task, freed by the kernel when its holder dies."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from pyspark_eos.sink.transactional_id_factory import PROCESS_TOKEN, lease_slot

HOLDER = textwrap.dedent(
    """
    import sys
    from pyspark_eos.sink.transactional_id_factory import PROCESS_TOKEN, lease_slot
    with lease_slot("p", "g") as lease:
        print(lease.slot, lease.transactional_id, PROCESS_TOKEN, flush=True)
        sys.stdin.readline()  # holds the slot until told to go on, or killed
    """
)


def test_a_dead_workers_slot_and_transactional_id_go_to_the_next_task(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    monkeypatch.setenv("SPARK_LOG_URL_STDERR", "http://h/logPage/?appId=a&executorId=3&logType=stderr")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=os.environ.copy())
    slot, held_id, holder_token = holder.stdout.readline().split()
    assert (slot, held_id) == ("0", "p.g.3.0")

    with lease_slot("p", "g") as lease:
        assert (lease.slot, lease.transactional_id) == (1, "p.g.3.1")  # slot 0 is busy

    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(30)
    with lease_slot("p", "g") as lease:
        assert (lease.slot, lease.transactional_id, lease.previous_holder) == (0, "p.g.3.0", holder_token)
    with lease_slot("p", "g") as again:
        assert again.slot == 0 and again.previous_holder == PROCESS_TOKEN


def test_slots_of_different_pipelines_are_independent(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    with lease_slot("p", "g1") as first, lease_slot("p", "g2") as second:
        assert first.slot == second.slot == 0
        assert first.transactional_id != second.transactional_id
