"""The README's first command: the example pipeline tells its story on the terminal, sends
everything else to its log file, and reports exactly-once after a worker crash."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from .virtualenvs import CHECKOUT

BATCH = re.compile(r"batch (\d+): (\d+) records, backlog (\d+) offsets, (committed.*) \(\d+\.\d s\)")
# What Spark, the JVM or a killed worker print; the story never does.
NOISE = ("\tat org.apache", "Exception in thread", "ERROR", "|rdkafka#", "Traceback")


def test_make_demo_survives_its_injected_crash_exactly_once():
    result = subprocess.run(["make", "demo"], capture_output=True, text=True, timeout=900, cwd=CHECKOUT)
    terminal = result.stdout + result.stderr
    assert result.returncode == 0, terminal[-3000:]
    lines = result.stdout.splitlines()
    log_file = _log_file(lines)
    try:
        assert [noise for noise in NOISE if noise in terminal] == [], terminal
        report = _report(lines)
        _check_batches(lines, int(report["input records committed"]))
        log = log_file.read_text(errors="replace")
        assert "\tat org.apache.spark" in log and "ERROR Executor" in log
        assert "fault injection: worker-before-commit, killing pid" in log
        assert "===== Kafka node 1: its server.log =====" in log
    finally:
        log_file.unlink()


def _log_file(lines: list[str]) -> Path:
    """Named at the start and at the end of the story."""
    named = [(index, match.group(1)) for index, line in enumerate(lines)
             if (match := re.match(r"log file: (\S+)", line))]
    assert len(named) == 2 and named[0][1] == named[1][1], lines
    assert lines[named[0][0] - 1].startswith("eos-kafka example pipeline: "), lines
    assert all(line.startswith("make") for line in lines[named[1][0] + 1:]), lines  # make[1]: Leaving directory
    return Path(named[1][1])


def _report(lines: list[str]) -> dict[str, str]:
    # Report lines are "<name>  <value>"; a make run inside make adds its own "Leaving directory" line.
    report = dict(re.match(r"(\S.*?)\s{2,}(\S+)", line).groups() for line in lines if re.match(r"\S.*?\s{2,}\S", line))
    assert report["exactly-once"] == "yes"
    assert report["worker crashes injected"] == "1"
    assert report["duplicates"] == report["missing"] == "0"
    assert int(report["input records committed"]) == int(report["output records"]) > 0
    return report


def _check_batches(lines: list[str], records: int) -> None:
    """One line per micro-batch; the crash is told once, before the batch whose task it retried."""
    batches = [(index, match) for index, line in enumerate(lines) if (match := BATCH.fullmatch(line))]
    assert [int(match.group(1)) for _, match in batches] == list(range(len(batches))) and len(batches) >= 3, lines
    assert sum(int(match.group(2)) for _, match in batches) == records
    backlogs = [int(match.group(3)) for _, match in batches]
    assert backlogs[0] > 0 and backlogs[-1] == 0 and backlogs == sorted(backlogs, reverse=True), backlogs
    crashes = [index for index, line in enumerate(lines) if line.startswith("crash: ")]
    retried = [index for index, match in batches if match.group(4) != "committed"]
    assert len(crashes) == 1 and retried == [crashes[0] + 1], lines
