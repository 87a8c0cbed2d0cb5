"""PySpark 4.0/4.1 have no admission control for Python sources: the options still work there.

Spark 4.1 calls ``latestOffset()`` with no arguments and never asks for a read limit; the stream
must then continue from its last end and apply maxOffsetsPerTrigger itself. This runs a real
PySpark 4.1 in a virtual environment of its own (kept in .cache/ between runs).
"""
from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

import pytest

from pyspark_eos.project_files import cache_dir

from .kafka_tools import create_topic, read_committed, unique_name, write_transactions

OLDER_PYSPARK = "4.1.4"
CHECKOUT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.older_pyspark


def older_pyspark_python() -> Path:
    home = cache_dir() / f"venv-pyspark-{OLDER_PYSPARK}"
    python = home / "bin" / "python"
    marker = home / ".complete"
    if not marker.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(home)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run(pip + [f"pyspark=={OLDER_PYSPARK}", "confluent-kafka", "pyarrow"], check=True, timeout=900)
        subprocess.run(pip + ["--no-deps", "-e", str(CHECKOUT), "--config-settings", "editable_mode=compat"],
                       check=True, timeout=300)
        marker.write_text(OLDER_PYSPARK)
    return python


def test_max_offsets_per_trigger_works_through_the_older_api(kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, unique_name("older"))
    # 0-4 committed, 5 marker, 6-7 aborted, 8 marker, 9-10 committed, 11 marker
    write_transactions(bootstrap, topic, [(True, [(0, b"a%d" % i) for i in range(5)]),
                                          (False, [(0, b"x"), (0, b"y")]),
                                          (True, [(0, b"b0"), (0, b"b1")])])
    result = subprocess.run([str(older_pyspark_python()), str(CHECKOUT / "tests" / "older_pyspark_job.py"),
                             bootstrap, topic, str(tmp_path / "checkpoint")],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-5000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["pyspark"] == OLDER_PYSPARK
    batches = [batch for batch in outcome["batches"] if batch]
    assert batches == [[0, 1, 2], [3, 4], [9, 10]]
    assert sorted(o for b in batches for o in b) == [r.offset for r in read_committed(bootstrap, topic)]
