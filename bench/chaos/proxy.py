"""A TCP fault proxy of the bench's own: it sits between the workers and Redis, and between the workers
and Postgres, passes bytes through untouched while no fault is on, and while one is on it delays every
chunk (latency with jitter, order kept), and now and then closes a connection (a drop: FIN, as a NAT
or load balancer that forgets a flow) or resets one (RST, SO_LINGER 0); a connection opened during the
fault may be reset at once. The workers see what a slow, lossy network shows a client library:
timeouts, EOFs and ECONNRESET mid-conversation, from which it must reconnect and carry on.

It runs on an asyncio loop in a thread of the bench process, one listener per upstream:

    with FaultProxy({"redis": ("127.0.0.1", 6379), "postgres": ("127.0.0.1", 5432)}) as proxy:
        proxy.port("redis")  # point the workers at 127.0.0.1:<this port>
        proxy.start_fault(NetworkFault(latency_s=0.2))
        ...
        proxy.end_fault()
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass(frozen=True)
class NetworkFault:
    """What the network does while the fault is on. The defaults: a bad link, not a dead one. 200 ms
    each way is a cross-region round trip and a half; a connection is cut about once in 20 s (drop or
    reset alike), so that within an 8 s fault most of the workers' connections to Redis and Postgres
    see latency and several see a cut; a fifth of new connections are refused with a reset."""

    latency_s: float = 0.2  # added to every chunk, each way
    jitter_s: float = 0.1  # uniform 0..jitter_s on top (the order of a connection's bytes is kept)
    drop_per_s: float = 0.025  # per open connection and second: closed without a word (FIN)
    reset_per_s: float = 0.025  # per open connection and second: reset (RST)
    reset_on_connect: float = 0.2  # share of connections opened during the fault reset at once


@dataclass
class ProxyCounts:
    """What the proxy did, by upstream name and kind: connections, drops, resets."""

    by_kind: Counter[str] = field(default_factory=Counter)

    def add(self, upstream: str, kind: str) -> None:
        self.by_kind[f"{upstream}:{kind}"] += 1


@dataclass(eq=False)
class _Link:
    upstream: str
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None = None
    cut: bool = False


class FaultProxy:
    def __init__(self, upstreams: dict[str, tuple[str, int]], ports: dict[str, int] | None = None) -> None:
        self.upstreams = upstreams
        self._wanted_ports = ports or {}
        self._ports: dict[str, int] = {}
        self.fault: NetworkFault | None = None
        self.counts = ProxyCounts()
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-proxy", daemon=True)
        self._servers: list[asyncio.Server] = []
        self._random = random.Random(0)

    def port(self, upstream: str) -> int:
        return self._ports[upstream]

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()
        for name in self.upstreams:
            server = asyncio.run_coroutine_threadsafe(self._listen(name), self._loop).result(timeout=10)
            self._servers.append(server)
            self._ports[name] = int(server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        async def close() -> None:
            for server in self._servers:
                server.close()
            for link in list(self._links):
                _abort(link.client, reset=False)
                if link.server is not None:
                    _abort(link.server, reset=False)
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def start_fault(self, fault: NetworkFault) -> None:
        self.fault = fault
        asyncio.run_coroutine_threadsafe(self._cutter(fault), self._loop)

    def end_fault(self) -> None:
        self.fault = None

    async def _listen(self, name: str) -> asyncio.Server:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(name, reader, writer)

        return await asyncio.start_server(accept, "127.0.0.1", self._wanted_ports.get(name, 0))

    async def _serve(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counts.add(name, "connections")
        fault = self.fault
        if fault is not None and self._random.random() < fault.reset_on_connect:
            self.counts.add(name, "refused")
            _abort(writer, reset=True)
            return
        link = _Link(name, writer)
        host, port = self.upstreams[name]
        try:
            up_reader, link.server = await asyncio.open_connection(host, port)
        except OSError:  # the service is down: the client sees its connection closed
            _abort(writer, reset=False)
            return
        self._links.add(link)
        try:
            await asyncio.gather(self._pipe(link, reader, link.server), self._pipe(link, up_reader, writer))
        finally:
            self._links.discard(link)
            if not link.cut:
                _abort(writer, reset=False)
                _abort(link.server, reset=False)

    async def _pipe(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One direction: chunks go into a delay line, a second task writes each when its time comes."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer))
        try:
            while not link.cut:
                try:
                    data = await reader.read(CHUNK)
                except OSError:
                    break
                if not data:
                    break
                fault = self.fault
                delay = fault.latency_s + self._random.uniform(0, fault.jitter_s) if fault else 0.0
                queue.put_nowait((time.monotonic() + delay, data))
        finally:
            queue.put_nowait((0.0, b""))  # end of stream, after what is queued
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await sender
            if not link.cut and writer.can_write_eof():
                with contextlib.suppress(OSError):
                    writer.write_eof()

    @staticmethod
    async def _send(queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        while True:
            due, data = await queue.get()
            if not data:
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    async def _cutter(self, fault: NetworkFault) -> None:
        """While this fault is on: each second, cut some open connections (drop or reset)."""
        while self.fault is fault:
            for link in list(self._links):
                draw = self._random.random()
                if draw < fault.reset_per_s:
                    self._cut(link, reset=True)
                elif draw < fault.reset_per_s + fault.drop_per_s:
                    self._cut(link, reset=False)
            await asyncio.sleep(1.0)

    def _cut(self, link: _Link, *, reset: bool) -> None:
        link.cut = True
        self.counts.add(link.upstream, "resets" if reset else "drops")
        _abort(link.client, reset=reset)
        if link.server is not None:
            _abort(link.server, reset=reset)


def _abort(writer: asyncio.StreamWriter, *, reset: bool) -> None:
    """Close the connection: with a RST (SO_LINGER 0, unsent bytes discarded) or a plain close."""
    sock = writer.get_extra_info("socket")
    if reset and sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        return
    writer.close()
