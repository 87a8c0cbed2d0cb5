"""A TCP proxy with network faults, for tests: clients connect to the proxy, the proxy to a broker.

An embedded broker advertises a listener at a proxy's port (embedded_kafka's ``proxied=True``), so
the clients of a pipeline that bootstrap there reach the broker only through the proxy, while
the brokers among themselves, and a test's verifiers and input writers, use the direct listener.

The faults, each set from the test's thread and applied to the connections open and to come:

- ``latency(upstream_ms, downstream_ms)``: every chunk is delivered that much later, in order
  (upstream: client to broker);
- ``bandwidth(bytes_per_s)``: each direction's delivery is limited to that rate;
- ``reset()``: the open connections are closed with a TCP reset, as a stateful firewall or a
  restarted load balancer does;
- ``partition()`` and ``heal(reset=...)``: nothing is forwarded, and the connections are kept
  (a client sees silence, not an error) until healed: then what was held is delivered, or the
  connections are reset;
- ``refuse()`` and ``accept()``: new connections are refused (the listening socket is closed),
  the open ones are left alone.

``only(clients)`` narrows every fault to the connections of some client processes: a
``ClientProcesses`` names them as the processes descending from some pids but not from others
(the driver's JVM, without the executors it started), or as those working in a directory (a
Spark executor's work directory: its Python workers). Each connection's process is found in
``/proc`` (Linux): the socket whose local port is the connection's peer port, and the process
holding it. Outside the clients, connections pass untouched; a refusal becomes a reset right
after the accept.

It runs an asyncio loop on a thread of its own; nothing here is used by the runtime.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..protocol.process_stat import parent_pid

log = logging.getLogger(__name__)

CHUNK = 64 * 1024


@dataclass
class Faults:
    upstream_delay_s: float = 0.0
    downstream_delay_s: float = 0.0
    bytes_per_s: float | None = None


@dataclass(frozen=True)
class ClientProcesses:
    """The processes descending from (or being) one of ``roots`` and from none of ``excluding``;
    or, with a ``directory``, those working in it (a Spark executor's Python workers, which its
    JVM starts in its work directory, also when they are forked by a fork server, no child of it)."""

    roots: frozenset[int] = frozenset()
    excluding: frozenset[int] = frozenset()
    directory: Path | None = None

    @classmethod
    def of(cls, *roots: int, excluding=()) -> "ClientProcesses":
        return cls(frozenset(roots), frozenset(excluding))

    @classmethod
    def working_in(cls, directory: str | Path) -> "ClientProcesses":
        return cls(directory=Path(directory).resolve())

    def __contains__(self, pid: int | None) -> bool:
        if pid is None:
            return False
        if self.directory is not None:
            try:
                cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
            except OSError:
                return False
            return cwd == self.directory or self.directory in cwd.parents
        lineage = set(ancestors(pid))
        return bool(lineage & self.roots) and not lineage & self.excluding


def ancestors(pid: int) -> list[int]:
    """``pid`` and its parents, up to the first process."""
    chain = []
    while pid > 0 and pid not in chain:
        chain.append(pid)
        try:
            pid = parent_pid(pid)
        except (OSError, IndexError, ValueError):
            break
    return chain


def client_pid(client_port: int, server_port: int) -> int | None:
    """The process holding the loopback TCP socket from ``client_port`` to ``server_port``."""
    return client_pids([client_port], server_port).get(client_port)


def client_pids(client_ports: list[int], server_port: int) -> dict[int, int]:
    """The processes holding the loopback TCP sockets from ``client_ports`` to ``server_port``, by
    port, found in one pass over /proc (a pass takes tens of milliseconds on a busy host)."""
    wanted = {f"0100007F:{port:04X} 0100007F:{server_port:04X}": port for port in client_ports}
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return {}
    ports = {f"socket:[{fields[9]}]": wanted[" ".join(fields[1:3])]
             for fields in map(str.split, lines) if " ".join(fields[1:3]) in wanted}
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir() if ports else ():
        if entry.name.isdigit():
            for port in _held_ports(entry, ports):
                found.setdefault(port, int(entry.name))  # a forked child shares it: the first found
    return found


def _held_ports(process: Path, sockets: dict[str, int]) -> list[int]:
    try:
        return [sockets[link] for link in (os.readlink(fd) for fd in (process / "fd").iterdir()) if link in sockets]
    except OSError:  # gone, or not ours to read
        return []


class _Connection:
    """One client's connection and its connection to the target, with a pump each way."""

    def __init__(self, proxy: "TcpProxy", client: asyncio.StreamWriter):
        self.proxy = proxy
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task] = []
        peer = client.get_extra_info("peername")  # None once the client has gone
        self.peer_port: int = peer[1] if peer else 0
        self.pid: int | None = None  # the client's process, once asked for (TcpProxy.only)

    @property
    def faults(self) -> Faults:
        return self.proxy.faults if self.proxy._affects(self) else Faults()

    async def forwarding(self) -> None:
        """Until no partition holds this connection."""
        if self.proxy._affects(self):
            await self.proxy._forwarding.wait()

    async def run(self, client_reader: asyncio.StreamReader) -> None:
        try:
            await self.forwarding()  # a partition holds new connections too
            target_reader, self.upstream = await asyncio.open_connection(*self.proxy.target)
        except OSError as error:
            log.info("proxy %s: connecting to %s:%d failed: %s", self.proxy.name, *self.proxy.target, error)
            self.abort()
            return
        self.tasks = [asyncio.ensure_future(self._pump(client_reader, self.upstream, upstream=True)),
                      asyncio.ensure_future(self._pump(target_reader, self.client, upstream=False))]
        await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        self.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool) -> None:
        """Reads as fast as data comes; a second task delivers each chunk when it is due."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        deliver = asyncio.ensure_future(self._deliver(queue, writer))
        try:
            while True:
                data = await reader.read(CHUNK)
                faults = self.faults
                delay = faults.upstream_delay_s if upstream else faults.downstream_delay_s
                await queue.put((time.monotonic() + delay, data))
                if not data:
                    break
            await deliver
        except OSError:
            pass
        finally:
            deliver.cancel()

    async def _deliver(self, queue: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            due, data = await queue.get()
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await self.forwarding()
            if not data:
                writer.write_eof() if writer.can_write_eof() else writer.close()
                return
            rate = self.faults.bytes_per_s
            if rate:
                await asyncio.sleep(len(data) / rate)
            writer.write(data)
            await writer.drain()

    def abort(self) -> None:
        """Close both sides with a TCP reset (SO_LINGER 0), not an orderly FIN."""
        for writer in (self.client, self.upstream):
            if writer is None:
                continue
            sock = writer.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.close()
        for task in self.tasks:
            task.cancel()


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; ``port`` 0 takes a free one (see ``address``)."""

    def __init__(self, target: tuple[str, int], port: int = 0, name: str = ""):
        self.target = target
        self.name = name or f"->{target[0]}:{target[1]}"
        self.faults = Faults()
        self._port = port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"tcp-proxy {self.name}", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()
        self.connections_made = 0
        self._forwarding = asyncio.Event()
        self.clients: ClientProcesses | None = None  # None: every client
        self._refusing_clients = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._port}"

    def start(self) -> "TcpProxy":
        self._thread.start()
        self._call(self._forwarding.set)
        self.accept()
        log.info("proxy %s listening at %s", self.name, self.address)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self.refuse()
        self._call(lambda: [connection.close() for connection in list(self._connections)])
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> "TcpProxy":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # ------------------------------------------------------------------------------- faults

    def only(self, clients: ClientProcesses | None) -> None:
        """The faults apply to these clients' connections only (None: to every connection)."""
        unknown = [connection for connection in list(self._connections) if connection.pid is None]
        if clients is not None and unknown:
            pids = client_pids([connection.peer_port for connection in unknown], self._port)
            for connection in unknown:
                connection.pid = pids.get(connection.peer_port)
        self.clients = clients

    def affected(self) -> int:
        """How many open connections the faults apply to."""
        return sum(1 for connection in list(self._connections) if self._affects(connection))

    def latency(self, upstream_ms: float = 0, downstream_ms: float = 0) -> None:
        self.faults.upstream_delay_s, self.faults.downstream_delay_s = upstream_ms / 1000, downstream_ms / 1000

    def bandwidth(self, bytes_per_s: float | None) -> None:
        self.faults.bytes_per_s = bytes_per_s

    def reset(self) -> int:
        """Reset every open connection; how many there were."""
        return self._call(self._reset_all)

    def partition(self) -> None:
        self._call(self._forwarding.clear)

    def heal(self, reset: bool = False) -> None:
        """End a partition: deliver what was held, or (``reset``) reset the held connections."""
        if reset:
            self.reset()
        self._call(self._forwarding.set)

    def refuse(self) -> None:
        if self.clients is None:
            self._call_async(self._close_server())
        else:
            self._refusing_clients = True

    def accept(self) -> None:
        self._refusing_clients = False
        self._call_async(self._open_server())

    def clear(self) -> None:
        """Every fault off, for every client; refused connections are accepted again."""
        self.faults = Faults()
        self.heal()
        self.accept()
        self.clients = None

    # ------------------------------------------------------------------------------- the loop

    def _affects(self, connection: _Connection) -> bool:
        return self.clients is None or connection.pid in self.clients

    def _reset_all(self) -> int:
        connections = [connection for connection in self._connections if self._affects(connection)]
        for connection in connections:
            connection.abort()
        return len(connections)

    async def _open_server(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", self._port, reuse_address=True)
            self._port = self._server.sockets[0].getsockname()[1]

    async def _close_server(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(self, writer)
        self._connections.add(connection)
        self.connections_made += 1
        try:
            if self.clients is not None:
                connection.pid = await asyncio.get_running_loop().run_in_executor(
                    None, client_pid, connection.peer_port, self._port)
                if self._refusing_clients and self._affects(connection):
                    connection.abort()
                    return
            await connection.run(reader)
        finally:
            self._connections.discard(connection)

    def _call(self, function):
        async def run():
            return function()
        return self._call_async(run())

    def _call_async(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)
