"""``listen --server``: recognition by a daemon, over one session of the native protocol.

:class:`RemoteRecognition` is a :class:`~streamwhisper.listen.recognition.Recognition`: it sends
16 kHz samples with :class:`~streamwhisper.client.StreamClient` and hands the events the server
sends (``Partial``, ``Final``, ``SpeechStarted``, ``SpeechEnded``, ``Error``) to ``on_event``
as they arrive. A lost connection is repaired by the client (it resumes the session, or goes on
in a new one after a shutdown or a daemon restart, sending the audio it still holds again);
only a connection that stays down for the client's ``reconnect_s`` ends the recognition.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from streamwhisper.client import Closed, StreamClient
from streamwhisper.errors import StreamWhisperError
from streamwhisper.events import Error, Event, Final, Partial, SpeechEnded, SpeechStarted


class RemoteRecognition:
    """One native-protocol session with a daemon, sending 16 kHz s16le PCM.

    Use as ``async with RemoteRecognition(url, on_event) as rec:``. Raises StreamWhisperError
    when the server cannot be reached, refuses the session, closes it before the end, or sends
    a malformed message (ProtocolError).
    """

    def __init__(
        self, url: str, on_event: Callable[[Event], None], *, token: str | None = None, **settings: Any
    ) -> None:
        self._url, self._token, self._settings = url, token, settings
        self._on_event = on_event
        self._stack = contextlib.AsyncExitStack()
        self._client: StreamClient | None = None
        self._reader: asyncio.Task[None] | None = None
        self.closed: Closed | None = None  # the server's last message, once it came

    async def __aenter__(self) -> RemoteRecognition:
        connecting = StreamClient.connect(self._url, token=self._token, sample_rate=16000, **self._settings)
        try:
            self._client = await self._stack.enter_async_context(connecting)
        except (OSError, ConnectionError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
            raise StreamWhisperError(f"cannot stream to {self._url}: {exc}") from None
        self._reader = asyncio.create_task(self._read(self._client))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self._stack.aclose()

    async def feed(self, samples: np.ndarray) -> None:
        assert self._client is not None
        if not len(samples):
            return
        try:
            await self._client.send_audio(samples)
        except (ConnectionClosed, ConnectionError) as exc:
            raise StreamWhisperError(f"{self._lost()}: {exc}") from None

    async def finish(self) -> None:
        assert self._client is not None and self._reader is not None
        with contextlib.suppress(ConnectionClosed, ConnectionError):  # a closed session is reported below
            await self._client.eof()
        with contextlib.suppress(ConnectionError):
            await self._reader
        if self.closed is None:
            raise StreamWhisperError(self._lost())

    async def _read(self, client: StreamClient) -> None:
        async for message in client:
            match message:
                case Closed():
                    self.closed = message
                case Partial() | Final() | SpeechStarted() | SpeechEnded() | Error():
                    self._on_event(message)
                # Ready, Status and messages of a newer server are not events

    def _lost(self) -> str:
        code = self._client.close_code if self._client is not None else None
        return f"the server closed the session (close code {code})"
