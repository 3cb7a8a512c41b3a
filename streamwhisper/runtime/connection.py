"""The seam between a session and its transport: one WebSocket connection, as a session sees it.

:class:`~streamwhisper.runtime.session.Session` and the dialects use only this protocol, so they
import no web framework; :mod:`streamwhisper.runtime.http` implements it over aiohttp, and a test
can implement it over anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class ConnectionClosed(Exception):
    """The connection is closed: the client left, or the transport closed it (a malformed
    frame, a missed keepalive). ``clean`` when the client closed it on purpose (a WebSocket
    close frame), not when the connection was lost (a reset, an end of the TCP stream without a
    close frame, a missed keepalive): a lost connection may come back (session resume)."""

    def __init__(self, reason: str = "", clean: bool = False) -> None:
        super().__init__(reason)
        self.clean = clean


class Connection(Protocol):
    """One client connection carrying text and binary messages."""

    path: str  # the request's path, without the query
    query: Mapping[str, str]  # the query string's parameters (the last of a repeated name)
    headers: Mapping[str, str]  # the upgrade request's headers (case-insensitive)

    async def receive(self) -> str | bytes:
        """The next message; raises :class:`ConnectionClosed` once the connection is closed, and
        :class:`~streamwhisper.errors.ProtocolError` (``message_too_big``, 1009) for a message
        over the server's ``max_message_bytes``, which is refused without being read."""
        ...

    async def send(self, text: str) -> None:
        """Send one text message (waits while the client's buffers are full); raises
        :class:`ConnectionClosed`."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Close with ``code`` and ``reason`` (at most 123 bytes are sent); never raises."""
        ...
