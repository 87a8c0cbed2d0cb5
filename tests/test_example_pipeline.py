"""The README's first command: the example pipeline reports exactly-once after a worker crash."""
from __future__ import annotations

import subprocess
import sys


def test_the_example_pipeline_survives_its_injected_crash_exactly_once(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pyspark_eos.example_pipeline", "--records", "600"],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = dict(line.rsplit(None, 1) for line in result.stdout.splitlines()[-11:] if line.strip())
    assert report["exactly-once"] == "yes"
    assert report["worker crashes injected"] == "1"
    assert report["duplicates"] == report["missing"] == "0"
    assert report["input records committed"] == report["output records"] == "450"
