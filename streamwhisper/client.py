"""An asyncio client for the native protocol (docs/protocol.md), yielding typed messages.

::

    from streamwhisper.events import Final

    async with StreamClient.connect("ws://127.0.0.1:8765", sample_rate=16000) as client:
        await client.send_audio(samples)          # float32 samples or raw PCM bytes
        await client.eof()                        # no more audio: the server finalises
        async for message in client:              # Partial, Final, ..., Closed
            if isinstance(message, Final):
                print(message.text)

Messages are the events of :mod:`streamwhisper.events` (``Partial``, ``Final``,
``SpeechStarted``, ``SpeechEnded``, ``Error``) and :class:`Ready`, :class:`Status`,
:class:`Closed`; a message type this client does not know (a newer server) arrives as
:class:`Unknown`. Both directions are encoded by :mod:`streamwhisper.runtime.dialects.native`.
:func:`stream_file` streams a file at real time (or faster) and returns every message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .audio.convert import float32_to_pcm
from .errors import ProtocolError
from .events import Error
from .runtime.dialects.native import (
    STREAM_PATH,
    Closed,
    Ready,
    ServerMessage,
    Status,
    decode_server_message,
    encode_client_message,
)
from .runtime.wire import ClientMessage, ConfigMessage, Eof, Finalize, KeepAlive, Unknown

__all__ = ["Closed", "ConfigMessage", "Ready", "ServerMessage", "Status", "StreamClient", "Unknown", "stream_file"]


class StreamClient:
    """One streaming session. Use :meth:`connect` (an async context manager)."""

    def __init__(self, ws: ClientConnection, encoding: str) -> None:
        self._ws = ws
        self._encoding = encoding
        self.ready: Ready | None = None  # the latest ``ready``: the session's effective settings

    @classmethod
    def connect(cls, url: str, *, token: str | None = None, **settings: Any) -> _Connecting:
        """Connect to ``url`` (``ws://host:port``; the path defaults to /v1/stream).

        ``settings`` are session settings (sample_rate, encoding, channels, language, task,
        interim_results, word_timestamps, endpointing_ms, label), sent as query parameters.
        Entering the context raises ConnectionError when the server refuses the session.
        """
        parts = urlsplit(url)
        path = parts.path if parts.path not in ("", "/") else STREAM_PATH
        query = {k: _query_value(v) for k, v in settings.items() if v is not None}
        headers = {"Authorization": f"Bearer {token}"} if token else None
        target = f"{parts.scheme}://{parts.netloc}{path}" + (f"?{urlencode(query)}" if query else "")
        return _Connecting(cls, target, headers, settings.get("encoding", "pcm_s16le"))

    async def send_audio(self, audio: np.ndarray | bytes) -> None:
        """Send samples (float32 in [-1, 1], encoded as the session's encoding) or raw bytes."""
        if isinstance(audio, (bytes, bytearray, memoryview)):
            await self._ws.send(bytes(audio))
        else:
            await self._ws.send(float32_to_pcm(audio, self._encoding))

    async def send(self, message: ClientMessage) -> None:
        """Send a control message; a :class:`ConfigMessage` (before any audio) also sets the
        encoding :meth:`send_audio` uses."""
        if isinstance(message, ConfigMessage):
            self._encoding = message.settings.get("encoding", self._encoding)
        await self._ws.send(encode_client_message(message))

    async def finalize(self) -> None:
        await self.send(Finalize())

    async def keepalive(self) -> None:
        await self.send(KeepAlive())

    async def eof(self) -> None:
        await self.send(Eof())

    async def recv(self) -> ServerMessage | Unknown | None:
        """The next server message, or None once the server closed the session.

        Raises ProtocolError when the server sends something that is not a message.
        """
        try:
            frame = await self._ws.recv()
        except ConnectionClosed:
            return None
        if not isinstance(frame, str):
            raise ProtocolError("the server sent a binary frame")
        message = decode_server_message(frame)
        if isinstance(message, Ready):
            self.ready = message
        return message

    def __aiter__(self) -> AsyncIterator[ServerMessage | Unknown]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[ServerMessage | Unknown]:
        while (message := await self.recv()) is not None:
            yield message

    @property
    def close_code(self) -> int | None:
        return self._ws.close_code

    async def close(self) -> None:
        await self._ws.close()


class _Connecting:
    def __init__(self, cls: type[StreamClient], url: str, headers: dict[str, str] | None, encoding: str) -> None:
        self._cls, self._url, self._headers, self._encoding = cls, url, headers, encoding
        self._client: StreamClient | None = None

    async def __aenter__(self) -> StreamClient:
        ws = await connect(self._url, additional_headers=self._headers, max_size=None)
        self._client = self._cls(ws, self._encoding)
        first = await self._client.recv()
        if not isinstance(first, Ready):
            code = ws.close_code
            await ws.close()
            if isinstance(first, Error):
                detail = first.message
            elif first is None:
                detail = "connection closed"
            else:
                detail = f"{type(first).__name__} before ready"
            raise ConnectionError(f"session refused ({code}): {detail}")
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        assert self._client is not None
        await self._client.close()


def _query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


async def stream_file(
    url: str,
    audio: np.ndarray,
    *,
    speed: float = 1.0,
    chunk_s: float = 0.1,
    on_message: Callable[[ServerMessage | Unknown, float], None] | None = None,
    token: str | None = None,
    **settings: Any,
) -> list[ServerMessage | Unknown]:
    """Stream 16 kHz float32 ``audio`` at ``speed`` x real time, then eof; returns every message
    (the first is the :class:`Ready`, the last normally :class:`Closed`).

    ``on_message(message, sent_s)`` is called as each message arrives with the audio seconds
    sent so far (for latency measurements).
    """
    messages: list[ServerMessage | Unknown] = []
    sent = 0.0
    async with StreamClient.connect(url, token=token, sample_rate=16000, **settings) as client:
        assert client.ready is not None
        messages.append(client.ready)

        async def read() -> None:
            async for message in client:
                messages.append(message)
                if on_message is not None:
                    on_message(message, sent)

        reader = asyncio.create_task(read())
        step = max(int(chunk_s * 16000), 1)
        began = time.monotonic()
        for i in range(0, len(audio), step):
            await client.send_audio(audio[i : i + step])
            sent = min(i + step, len(audio)) / 16000
            if speed > 0:
                await asyncio.sleep(max(0.0, began + sent / speed - time.monotonic()))
        await client.eof()
        await reader
    return messages
