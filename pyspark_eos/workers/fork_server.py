"""The fork server: one process per interpreter identity (``server_address``) that imports PySpark's
daemon and workers, pandas, pyarrow, confluent-kafka and eos-kafka once, and then forks a ready
process for each of Spark's Python processes that ``pyspark-eos-python`` hands over.

Spark starts a fresh interpreter for each kind of Python process an application runs: a
``pyspark.daemon`` for the task workers and one for each data source planner (lookup, create,
plan a read, write, commit), a streaming source's runner, and each imports PySpark, pyarrow and
the data source again. A forked process has them already. The request carries the process's
standard streams (its pipes to Spark), module, arguments, environment and working directory; the
child takes them on and runs the module as ``python -m`` would have. The server reports each
child's exit status to the process Spark started.

A server exits when it has had no child for ``idle_seconds``; only one runs per address (a lock
file held for its life), and it serves only its own user (the directory is 0700 and each
connection's peer credentials are checked).
"""
from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib
import json
import logging
import os
import random
import runpy
import selectors
import signal
import socket
import struct
import sys
import time
import warnings
from pathlib import Path

log = logging.getLogger(__name__)

# What Spark's Python processes of an eos-kafka query import: the daemons and their workers, the
# planners, the streaming source's runner. Missing ones (pandas is optional to PySpark, planners
# differ between versions) are skipped. pyarrow and numpy start threads when imported (jemalloc's,
# OpenBLAS's); their libraries re-arm them in a forked child (pthread_atfork), which is what
# PySpark's own daemon avoids by importing after its fork, and what multiprocessing's forkserver
# with preloaded modules relies on as this server does.
PRELOADED_MODULES = (
    "pyspark.daemon", "pyspark.worker", "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source", "pyspark.sql.worker.commit_data_source_write",
    "pyspark.sql.worker.python_streaming_sink_runner", "pyspark.sql.streaming.python_streaming_source_runner",
    "pandas", "pyarrow", "confluent_kafka", "pyspark_eos.data_source", "pyspark_eos.source.batch_reader",
    "pyspark_eos.sink.writer", "pyspark_eos.sink.transactional_writer",
)
# Set in each child: the pid of the process Spark started, which stands in for it (the child's own
# parent is the server), for tools that look for a Spark process's JVM among its ancestors.
STAND_IN_ENV = "EOS_KAFKA_STAND_IN_PID"
HEADER = struct.Struct("!i")
GO = b"g"
STANDARD_STREAMS = 3
_POLL_SECONDS = 0.5


def serve(path: Path, idle_seconds: float, listener: socket.socket, lock: int) -> None:
    """Preload, then fork processes for requests on ``listener`` until idle for ``idle_seconds``."""
    started = time.monotonic()
    loaded = preload(PRELOADED_MODULES)
    gc.freeze()  # the preloaded objects stay shared with every child, untouched by its collections
    log.info("fork server %s ready in %.1f s with %d of %d modules", path, time.monotonic() - started,
             len(loaded), len(PRELOADED_MODULES))
    server = _Server(listener, lock)
    while server.children or time.monotonic() - server.last_activity < idle_seconds:
        if server.selector.select(_POLL_SECONDS):
            server.accept()
        server.reap()
    log.info("fork server %s idle for %.0f s: exiting", path, idle_seconds)


class _Server:
    def __init__(self, listener: socket.socket, lock: int):
        self.listener, self.lock = listener, lock
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)
        self.children: dict[int, socket.socket] = {}  # a child's pid: the connection of the process Spark started
        self.last_activity = time.monotonic()

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            request, fds = _receive_request(conn)
            request["env"][STAND_IN_ENV] = str(_peer(conn)[0])
        except (OSError, ValueError) as error:
            log.warning("refused a request: %s", error)
            conn.close()
            return
        pid = os.fork()
        if pid == 0:
            self._close_in_child()
            _run_module(request, fds, conn)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        with contextlib.suppress(OSError):
            conn.sendall(HEADER.pack(pid))

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(HEADER.pack(os.waitstatus_to_exitcode(status)))
                conn.close()
            self.last_activity = time.monotonic()

    def _close_in_child(self) -> None:
        # A child holding the lock would keep a new server from starting after this one exits;
        # holding other children's connections would hide their ends.
        self.selector.close()
        self.listener.close()
        os.close(self.lock)
        for conn in self.children.values():
            conn.close()


def preload(modules: tuple[str, ...]) -> list[str]:
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as error:  # noqa: BLE001  (a module the installation lacks is simply not preloaded)
            log.debug("not preloading %s: %s", name, error)
    return loaded


def _receive_request(conn: socket.socket) -> tuple[dict, list[int]]:
    _check_peer(conn)
    header, fds, _, _ = socket.recv_fds(conn, HEADER.size, STANDARD_STREAMS)
    if len(fds) != STANDARD_STREAMS or len(header) != HEADER.size:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request without its three standard streams")
    return json.loads(_read_exactly(conn, HEADER.unpack(header)[0])), fds


def _run_module(request: dict, fds: list[int], conn: socket.socket) -> None:
    """In the child: become the process Spark started, on its streams, and never return."""
    code = 1
    try:
        # The process Spark started commits to this child with one byte; without it (it gave up
        # waiting and runs the module itself) the streams are not taken.
        if conn.recv(1) != GO:
            os._exit(0)
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for signal_number in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGINT):
            signal.signal(signal_number, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["-m", *request["argv"]]
        sys.path[0] = request["cwd"]  # as `python -m` in that directory would have set it
        random.seed()  # a fork shares its parent's random state
        # runpy warns that a preloaded module runs again as __main__: that is what `python -m` does.
        warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001  (reported on the process's stderr, which Spark logs)
        logging.getLogger(__name__).exception("the forked %s failed", request.get("module"))
    finally:
        os._exit(code)


def _peer(conn: socket.socket) -> tuple[int, int, int]:
    """The connected process's pid, uid and gid, as the kernel saw them at connect()."""
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))


def _check_peer(conn: socket.socket) -> None:
    _, uid, _ = _peer(conn)
    if uid != os.getuid():
        raise ValueError(f"a request from user {uid}, not this server's")


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ValueError("the request ended early")
        data += chunk
    return bytes(data)


def start(path: Path, idle_seconds: float) -> bool:
    """Bind the server's socket and detach the server from the caller (a launcher's start): True
    when a server listens at ``path`` now, this one or one already running."""
    lock = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return True
    path.unlink(missing_ok=True)  # a server that died left it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    if os.fork() != 0:
        return True
    os.setsid()  # outlives the process that started it, and no signal to that one's group reaches it
    try:
        serve(path, idle_seconds, listener, lock)
    except BaseException:  # noqa: BLE001
        log.exception("fork server %s failed", path)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os._exit(0)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    path, idle_seconds = Path(argv[0]), float(argv[1])
    return 0 if start(path, idle_seconds) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
