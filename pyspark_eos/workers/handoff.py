"""The process Spark starts for a Python module, handing its place to a forked one: it sends its
standard streams, module, arguments, environment and working directory to the fork server of its
interpreter (starting one if none runs), then stands in for the forked process until it exits:
Spark's SIGTERM is passed on, and the child's exit status becomes this process's.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from . import server_address
from .fork_server import GO, HEADER, STANDARD_STREAMS

log = logging.getLogger(__name__)

IDLE_SECONDS_ENV = "EOS_KAFKA_FORK_SERVER_IDLE_SECONDS"
DEFAULT_IDLE_SECONDS = 600.0
# A server preloads for a few seconds; one that has not forked by then is stuck (the process runs
# its module itself instead, as Spark would have started it).
_FORK_TIMEOUT_SECONDS = 60.0
_FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_forked(module: str, args: list[str]) -> int | None:
    """The exit status of a process forked to run ``module`` as ``python -m module args`` would,
    or None when no fork server can serve this interpreter (the caller runs it itself)."""
    path = _socket_path()
    if path is None:
        return None
    conn = _connect(path) or (_start_server(path) and _connect(path))
    if not conn:
        return None
    with conn:
        pid = _request(conn, {"module": module, "argv": args})
        if pid is None:
            return None
        for signal_number in _FORWARDED_SIGNALS:
            signal.signal(signal_number, lambda number, _frame: _forward(pid, number))
        _release_streams()
        return _wait_for_exit(conn, pid)


def _socket_path() -> Path | None:
    sources = [Path(__file__).resolve().parents[1]]  # eos-kafka's own modules, preloaded too
    versions = server_address.path_versions(sys.path[1:], sources)
    digest = server_address.interpreter_digest(os.path.realpath(sys.executable), os.environ, versions, os.getuid())
    runtime = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    path = server_address.socket_path(runtime, os.getuid(), digest)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        status = path.parent.stat()
    except OSError as error:
        log.warning("no fork server for Spark's Python processes (%s): starting this one directly", error)
        return None
    if status.st_uid != os.getuid() or status.st_mode & 0o077:
        log.warning("%s is not this user's alone (mode %o): starting Spark's Python process directly",
                    path.parent, status.st_mode & 0o777)
        return None
    return path


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        return conn
    except OSError:
        conn.close()
        return None


def _start_server(path: Path) -> bool:
    import subprocess  # only the first process of an interpreter pays for its import
    idle = os.environ.get(IDLE_SECONDS_ENV, str(DEFAULT_IDLE_SECONDS))
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON_WORKER_FACTORY")}
    # The server runs in "/", not in this process's directory (an executor's own); eos-kafka may
    # have been found there.
    package_parent = str(Path(__file__).resolve().parents[2])
    if package_parent not in sys.path[1:]:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (env.get("PYTHONPATH"), package_parent)))
    with open(path.with_suffix(".log"), "ab") as log_file:
        started = subprocess.run([sys.executable, "-m", "pyspark_eos.workers.fork_server", str(path), idle],
                                 stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, env=env, cwd="/",
                                 check=False)
    return started.returncode == 0


def _request(conn: socket.socket, what: dict) -> int | None:
    request = json.dumps({**what, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    conn.settimeout(_FORK_TIMEOUT_SECONDS)
    try:
        socket.send_fds(conn, [HEADER.pack(len(request))], list(range(STANDARD_STREAMS)))
        conn.sendall(request)
        reply = conn.recv(HEADER.size, socket.MSG_WAITALL)
        if len(reply) != HEADER.size:
            return None
        conn.sendall(GO)
    except OSError as error:
        log.warning("the fork server did not fork Spark's Python process (%s): starting it directly", error)
        return None
    conn.settimeout(None)
    return HEADER.unpack(reply)[0]


def _forward(pid: int, signal_number: int) -> None:
    try:
        os.kill(pid, signal_number)
    except ProcessLookupError:
        pass


def _release_streams() -> None:
    # The child has its own copies; Spark sees the stdout end when the child's ends.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)


def _wait_for_exit(conn: socket.socket, pid: int) -> int:
    status = conn.recv(HEADER.size, socket.MSG_WAITALL)
    if len(status) == HEADER.size:
        return HEADER.unpack(status)[0]
    # The server is gone, and with it the only way to learn when the child ends: stop it, as
    # Spark restarts a daemon or fails a task whose worker quit.
    log.error("the fork server of Spark's Python process %d quit: stopping that process", pid)
    _forward(pid, signal.SIGTERM)
    return 1
