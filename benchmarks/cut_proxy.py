"""A TCP proxy between a client and a daemon whose connections a test (or benchmark) breaks.

``cut()`` resets every connection through it, on both sides (a dropped network, as each end sees
it). ``stall()`` stops forwarding and reading in both directions, leaving the sockets open (a
network that went silent: neither end hears of it until a keepalive or a full buffer tells it);
``stall(downstream_only=True)`` stops only what the server sends (the client's messages still
reach it); a ``cut()`` afterwards tells the ends at last. New connections are forwarded as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct


class CutProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port  # where new connections go
        self._server: asyncio.Server | None = None
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter, list[asyncio.Task[None]]]] = []
        self.connections = 0  # connections accepted so far

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.close()
            return
        tasks = [asyncio.create_task(_pipe(client_r, server_w)), asyncio.create_task(_pipe(server_r, client_w))]
        self._pairs.append((client_w, server_w, tasks))

    def cut(self) -> None:
        """Reset every connection (both sides) now."""
        pairs, self._pairs = self._pairs, []
        for client_w, server_w, tasks in pairs:
            for task in tasks:
                task.cancel()
            for writer in (client_w, server_w):
                _reset(writer)

    def stall(self, downstream_only: bool = False) -> None:
        """Stop forwarding and reading on every connection, keeping the sockets open (with
        ``downstream_only``, only from the server to the client)."""
        for client_w, server_w, (upstream, downstream) in self._pairs:
            downstream.cancel()
            if not downstream_only:
                upstream.cancel()
            for writer in (server_w,) if downstream_only else (client_w, server_w):
                with contextlib.suppress(Exception):
                    writer.transport.pause_reading()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(Exception):
        writer.write_eof()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
