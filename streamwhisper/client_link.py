"""How :class:`~streamwhisper.client.StreamClient` opens its connections, and what it reports of them.

:class:`Link` opens a WebSocket to the session's URL (with its settings, or with a resume token)
and reads its first message; :func:`moved` puts a later session's message on the clock and
``seq`` of the whole stream; :class:`Reconnect` records a repaired connection.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .events import Error, Final, Partial
from .runtime.dialects.native import ServerMessage, decode_server_message
from .runtime.wire import Unknown

First = ServerMessage | Unknown | None  # a connection's first message (None: closed before any)


@dataclass(frozen=True)
class Reconnect:
    """A connection the client repaired: when (``time.monotonic()``), and whether the session
    was resumed (else a new one began, its audio sent again from ``from_s``)."""

    at: float
    resumed: bool
    from_s: float


class Link:
    """How to open a connection: the URL, the session's settings (query) and headers."""

    def __init__(self, base: str, query: dict[str, str], headers: dict[str, str] | None, encoding: str) -> None:
        self.base, self.query, self.headers, self.encoding = base, query, headers, encoding

    async def open(self, query: dict[str, str] | None = None) -> tuple[ClientConnection, First]:
        """A new connection (with the settings, or with ``query`` instead) and its first message."""
        params = self.query if query is None else query
        url = self.base + (f"?{urlencode(params)}" if params else "")
        ws = await connect(url, additional_headers=self.headers, max_size=None)
        try:
            frame = await ws.recv()
        except ConnectionClosed:
            return ws, None
        return ws, decode_server_message(frame) if isinstance(frame, str) else None


def moved(message: Partial | Final, offset: float, seq_base: int) -> Partial | Final:
    """A later session's message on the stream's clock and seq."""
    words = tuple(dataclasses.replace(w, start=w.start + offset, end=w.end + offset) for w in message.words)
    return dataclasses.replace(
        message, start=message.start + offset, end=message.end + offset, words=words, seq=message.seq + seq_base
    )


def refusal(first: ServerMessage | Unknown | None) -> str:
    if isinstance(first, Error):
        return f"{first.code}: {first.message}"
    return "connection closed" if first is None else f"{type(first).__name__} before ready"


def query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
