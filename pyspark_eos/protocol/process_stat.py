"""A process's line in /proc/<pid>/stat (Linux, proc(5)), read one way: the fields after its
command name, which may itself hold spaces and parentheses. The write slots name their holders by
pid and start time (sink/transactional_id_factory); the test kit and the tools follow parents."""
from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")
# Indexes into stat_fields: proc(5)'s fields 3 (state), 4 (ppid), 14 (utime) and 22 (starttime).
STATE, PARENT, USER_TICKS, START_TICKS = 0, 1, 11, 19


def stat_fields(pid: int) -> list[str]:
    """The process's fields from its state on; OSError once it has gone."""
    return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def parent_pid(pid: int) -> int:
    return int(stat_fields(pid)[PARENT])


def running(pid: int) -> bool:
    """Whether the process exists and is not a zombie that nobody has reaped yet."""
    try:
        return stat_fields(pid)[STATE] != "Z"
    except (OSError, IndexError):
        return False
