"""The README's first command: the example pipeline reports exactly-once after a worker crash."""
from __future__ import annotations

import re
import subprocess

from .virtualenvs import CHECKOUT


def test_make_demo_survives_its_injected_crash_exactly_once():
    result = subprocess.run(["make", "demo"], capture_output=True, text=True, timeout=900, cwd=CHECKOUT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # Report lines are "<name>  <value>"; a make run inside make adds its own "Leaving directory" line.
    report = dict(re.match(r"(\S.*?)\s{2,}(\S+)", line).groups()
                  for line in result.stdout.splitlines() if re.match(r"\S.*?\s{2,}\S", line))
    assert report["exactly-once"] == "yes"
    assert report["worker crashes injected"] == "1"
    assert report["duplicates"] == report["missing"] == "0"
    assert int(report["input records committed"]) == int(report["output records"]) > 0
